//! `normal_equations(y, x1, ..., xk)`: the blocks of the least-squares
//! normal equations, X'X (with an intercept column first), X'y, y'y and n;
//! `normal_equations_no_intercept(y, x1, ..., xk)` leaves the intercept out.
//! Rows with a NULL in y or any x are dropped.
//!
//! State: the centered co-moments of (y, x1, ..., xk) — n, k + 1 means and
//! the (k + 1)² centered cross products — from which the raw blocks are
//! rebuilt after the merge. Merging centered moments keeps the digits that
//! raw sums of squares lose on ill-conditioned designs.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::AggregateUDF;
use ndarray::{Array1, Array2};

use crate::comoments::{CoMoments, CoMomentsAggregate, Finish};
use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::labeled::{
    matrix_array, matrix_type, names_array, names_type, vector_array, vector_type,
};

/// The name of the intercept term.
pub const INTERCEPT: &str = "(Intercept)";

/// `normal_equations(y, x1, ..., xk)`: X'X with an intercept column, X'y, y'y, n.
pub fn normal_equations() -> AggregateUDF {
    aggregate("normal_equations", finish_with_intercept)
}

/// `normal_equations_no_intercept(y, x1, ..., xk)`: the same without the intercept.
pub fn normal_equations_no_intercept() -> AggregateUDF {
    aggregate("normal_equations_no_intercept", finish_without_intercept)
}

fn aggregate(name: &'static str, finish: Finish) -> AggregateUDF {
    AggregateUDF::from(
        CoMomentsAggregate::new(name, DataType::Struct(normal_equations_fields()), finish)
            .with_min_args(2, "y and at least one x: (y, x1, ..., xk)"),
    )
}

/// The fields of the result struct.
pub fn normal_equations_fields() -> Fields {
    Fields::from(vec![
        Field::new("names", names_type(), true),
        Field::new("n", DataType::Int64, false),
        Field::new("xtx", matrix_type(), true),
        Field::new("xty", vector_type(), true),
        Field::new("yty", DataType::Float64, true),
    ])
}

/// The raw blocks (X'X, X'y, y'y) from the co-moments of (y, x1..xk).
pub fn blocks(state: &CoMoments, intercept: bool) -> (Array2<f64>, Array1<f64>, f64) {
    let n = state.n as f64;
    let p = state.p();
    // Raw cross products of (1, y, x1..xk): n·mean·meanᵀ + m2, bordered by n·mean.
    let mut raw = Array2::zeros((p + 1, p + 1));
    raw[[0, 0]] = n;
    for i in 0..p {
        raw[[0, i + 1]] = n * state.mean[i];
        raw[[i + 1, 0]] = n * state.mean[i];
        for j in 0..p {
            raw[[i + 1, j + 1]] = state.m2[[i, j]] + n * state.mean[i] * state.mean[j];
        }
    }
    // Order (1, x1..xk) for X, with y at raw index 1.
    let xs: Vec<usize> = (intercept.then_some(0)).into_iter().chain(2..=p).collect();
    let xtx = Array2::from_shape_fn((xs.len(), xs.len()), |(i, j)| raw[[xs[i], xs[j]]]);
    let xty = Array1::from_iter(xs.iter().map(|&i| raw[[i, 1]]));
    (xtx, xty, raw[[1, 1]])
}

fn finish(state: &CoMoments, names: &[String], intercept: bool) -> Result<ScalarValue> {
    let terms: Vec<String> = intercept
        .then(|| INTERCEPT.to_string())
        .into_iter()
        .chain(names[1..].iter().cloned())
        .collect();
    let (xtx, xty, yty) = blocks(state, intercept);
    let empty = state.n == 0;
    let columns: Vec<ArrayRef> = vec![
        names_array(&terms),
        Arc::new(Int64Array::from(vec![state.n as i64])),
        matrix_array((!empty).then_some(&xtx)),
        vector_array((!empty).then_some(&xty)),
        Arc::new(Float64Array::from(vec![(!empty).then_some(yty)])),
    ];
    Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(
        normal_equations_fields(),
        columns,
        None,
    )?)))
}

fn finish_with_intercept(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    finish(state, names, true)
}

fn finish_without_intercept(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    finish(state, names, false)
}

/// The documentation of `normal_equations`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Matrices,
    description: "The blocks of the least-squares normal equations of y on x1, ..., xk with an intercept: X'X (intercept column first), X'y, y'y and n, over the rows where none of the columns is NULL.",
    syntax: "normal_equations(y, x1, ..., xk)",
    arguments: &[
        ("y", "the numeric response"),
        ("x1, ..., xk", "numeric regressors"),
    ],
    options: &[],
    returns: "`struct<names, n, xtx, xty, yty>`: the regressor names, n, X'X and X'y as labeled matrix and vector, y'y",
    releases: "the centred co-moments of (y, x1, ..., xk): n, k + 1 means and the (k + 1)² centred cross products, whatever its rows; the raw blocks are rebuilt after the merge.",
    example: "SELECT normal_equations(systolic, age, bmi)['xtx'] AS xtx FROM clinic",
};

/// The documentation of `normal_equations_no_intercept`.
pub const NO_INTERCEPT_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Matrices,
    description: "The blocks of the least-squares normal equations of y on x1, ..., xk without an intercept column: X'X, X'y, y'y and n, over the rows where none of the columns is NULL.",
    syntax: "normal_equations_no_intercept(y, x1, ..., xk)",
    arguments: &[
        ("y", "the numeric response"),
        ("x1, ..., xk", "numeric regressors"),
    ],
    options: &[],
    returns: "`struct<names, n, xtx, xty, yty>`, as `normal_equations` without the intercept",
    releases: "the centred co-moments of (y, x1, ..., xk): n, k + 1 means and the (k + 1)² centred cross products, whatever its rows.",
    example: "SELECT normal_equations_no_intercept(systolic, age, bmi)['xty'] AS xty FROM clinic",
};

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, run_pair};

    #[tokio::test]
    async fn blocks_equal_raw_sums() {
        let (got, want) = run_pair(
            "SELECT normal_equations(c, a, b) AS ne FROM t",
            "SELECT count(*) AS n, sum(a) AS sa, sum(a * a) AS saa, sum(a * b) AS sab, sum(a * c) AS sac, sum(c * c) AS scc \
             FROM t WHERE a IS NOT NULL AND b IS NOT NULL AND c IS NOT NULL",
        )
        .await;
        let ne = crate::testing::struct_of(&got, "ne");
        let xtx = crate::testing::matrix_field(&ne, "xtx");
        let xty = crate::testing::vector_field(&ne, "xty");
        let w = |i| crate::testing::float(&want, i);
        assert_eq!(xtx[0][0], w(0));
        for (x, y) in [
            (xtx[0][1], w(1)),
            (xtx[1][1], w(2)),
            (xtx[1][2], w(3)),
            (xty[1], w(4)),
        ] {
            assert!((x - y).abs() <= 1e-9 * y.abs(), "{x} vs {y}");
        }
        let yty = crate::testing::float_field(&ne, "yty");
        assert!((yty - w(5)).abs() <= 1e-9 * w(5));
    }

    #[tokio::test]
    async fn no_intercept_drops_the_first_row_and_column() {
        let (got, want) = run_pair(
            "SELECT normal_equations_no_intercept(c, a, b) AS ne FROM t",
            "SELECT normal_equations(c, a, b) AS ne FROM t",
        )
        .await;
        let without = crate::testing::matrix_field(&crate::testing::struct_of(&got, "ne"), "xtx");
        let with = crate::testing::matrix_field(&crate::testing::struct_of(&want, "ne"), "xtx");
        assert_eq!(without.len(), 2);
        for i in 0..2 {
            for j in 0..2 {
                assert!(
                    (without[i][j] - with[i + 1][j + 1]).abs() <= 1e-12 * with[i + 1][j + 1].abs()
                );
            }
        }
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("normal_equations(a, b, c)").await;
        assert_split_invariant("normal_equations_no_intercept(a, b, c)").await;
    }
}
