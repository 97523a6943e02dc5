//! `correlation_matrix(x1, ..., xk)`: the correlation matrix of k columns
//! (listwise deletion of rows with a NULL). State: the centered co-moments
//! n, means and cross products (k² + k + 1 numbers).

use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::AggregateUDF;

use crate::comoments::{CoMoments, CoMomentsAggregate};
use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::labeled::{labeled_matrix, labeled_matrix_type};

/// `correlation_matrix(x1, ..., xk)`: the correlation matrix, as a labeled matrix.
pub fn correlation_matrix() -> AggregateUDF {
    AggregateUDF::from(CoMomentsAggregate::new(
        "correlation_matrix",
        labeled_matrix_type(),
        finish,
    ))
}

fn finish(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    labeled_matrix(names, state.correlation().as_ref())
}

/// The documentation of `correlation_matrix`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Matrices,
    description: "The Pearson correlation matrix of k numeric columns, over the rows where none of them is NULL.",
    syntax: "correlation_matrix(x1, ..., xk)",
    arguments: &[(
        "x1, ..., xk",
        "numeric columns or expressions (at least one)",
    )],
    options: &[],
    returns: "a labeled k × k matrix, `struct<names: list<utf8>, matrix: list<list<float64>>>`",
    releases: "its rows' centred co-moments: n, k means and the k × k centred cross products (k² + k + 1 numbers, whatever its rows).",
    example: "SELECT correlation_matrix(age, bmi, systolic) AS r FROM clinic",
};

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, matrix_of};

    #[tokio::test]
    async fn matches_corr_with_a_unit_diagonal() {
        let (got, want) = crate::testing::run_pair(
            "SELECT correlation_matrix(a, c) AS m FROM t",
            "SELECT corr(a, c) AS r FROM t",
        )
        .await;
        let m = matrix_of(&got, "m");
        let r = crate::testing::float(&want, 0);
        assert_eq!((m[0][0], m[1][1]), (1.0, 1.0));
        assert!((m[0][1] - r).abs() <= 1e-9 * r.abs() && (m[1][0] - r).abs() <= 1e-9 * r.abs());
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("correlation_matrix(a, b, c)").await;
    }
}
