//! `centered_moments(x1, ..., xk)`: the merged co-moment state itself — n,
//! the means and the centered cross-product matrix Σ (x − x̄)(x − x̄)ᵀ — for
//! decoders (such as `lm`) that solve from centered moments, and for users
//! who want the sufficient statistics. Rows with a NULL are dropped.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::AggregateUDF;

use crate::comoments::{CoMoments, CoMomentsAggregate};
use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::labeled::{
    matrix_array, matrix_type, names_array, names_type, vector_array, vector_type,
};

/// `centered_moments(x1, ..., xk)`: the co-moment state itself (n, means, centered cross products).
pub fn centered_moments() -> AggregateUDF {
    AggregateUDF::from(CoMomentsAggregate::new(
        "centered_moments",
        DataType::Struct(centered_moments_fields()),
        finish,
    ))
}

/// The fields of the result struct.
pub fn centered_moments_fields() -> Fields {
    Fields::from(vec![
        Field::new("names", names_type(), true),
        Field::new("n", DataType::Int64, false),
        Field::new("mean", vector_type(), true),
        Field::new("m2", matrix_type(), true),
    ])
}

fn finish(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    let empty = state.n == 0;
    let columns: Vec<ArrayRef> = vec![
        names_array(names),
        Arc::new(Int64Array::from(vec![state.n as i64])),
        vector_array((!empty).then_some(&state.mean)),
        matrix_array((!empty).then_some(&state.m2)),
    ];
    Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(
        centered_moments_fields(),
        columns,
        None,
    )?)))
}

/// Reads row `row` of a `centered_moments` result back into names and state.
pub fn read(result: &StructArray, row: usize) -> Result<(Vec<String>, CoMoments)> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Float64Type, Int64Type};
    let names = result
        .column_by_name("names")
        .expect("names")
        .as_list::<i32>()
        .value(row);
    let names: Vec<String> = names
        .as_string::<i32>()
        .iter()
        .map(|s| s.unwrap_or_default().to_string())
        .collect();
    let n = result
        .column_by_name("n")
        .expect("n")
        .as_primitive::<Int64Type>()
        .value(row) as u64;
    let p = names.len();
    let mut state = CoMoments::new(p);
    let mean = result
        .column_by_name("mean")
        .expect("mean")
        .as_list::<i32>();
    if n == 0 || mean.is_null(row) {
        return Ok((names, state));
    }
    state.n = n;
    let mean = mean.value(row);
    state.mean = ndarray::Array1::from_vec(mean.as_primitive::<Float64Type>().values().to_vec());
    let m2 = result
        .column_by_name("m2")
        .expect("m2")
        .as_list::<i32>()
        .value(row);
    let rows = m2.as_list::<i32>();
    for i in 0..p {
        let values = rows.value(i);
        for (j, v) in values
            .as_primitive::<Float64Type>()
            .values()
            .iter()
            .enumerate()
        {
            state.m2[[i, j]] = *v;
        }
    }
    Ok((names, state))
}

/// The documentation of `centered_moments`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Matrices,
    description: "The merged co-moment state itself: n, the means and the centred cross-product matrix Σ (x − x̄)(x − x̄)ᵀ of k columns, over the rows where none of them is NULL (the sufficient statistics of `lm`, `pca` and `cor_test`).",
    syntax: "centered_moments(x1, ..., xk)",
    arguments: &[(
        "x1, ..., xk",
        "numeric columns or expressions (at least one)",
    )],
    options: &[],
    returns: "`struct<names: list<utf8>, n: int64, mean: list<float64>, m2: list<list<float64>>>`",
    releases: "its rows' centred co-moments: n, k means and the k × k centred cross products (k² + k + 1 numbers, whatever its rows).",
    example: "SELECT centered_moments(age, systolic)['n'] AS n FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_split_invariant, run_pair, struct_of};

    #[tokio::test]
    async fn reads_back_the_state_it_returns() {
        let (got, want) = run_pair(
            "SELECT centered_moments(a, c) AS m FROM t",
            "SELECT count(*) AS n, avg(a) AS ma, var_samp(c) AS vc FROM t WHERE a IS NOT NULL AND c IS NOT NULL",
        )
        .await;
        let (names, state) = read(&struct_of(&got, "m"), 0).unwrap();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(state.n as f64, crate::testing::float(&want, 0));
        assert!((state.mean[0] - crate::testing::float(&want, 1)).abs() < 1e-12);
        let var_c = state.m2[[1, 1]] / (state.n as f64 - 1.0);
        assert!((var_c - crate::testing::float(&want, 2)).abs() <= 1e-9 * var_c);
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("centered_moments(a, b, c)").await;
    }
}
