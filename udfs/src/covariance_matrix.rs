//! `covariance_matrix(x1, ..., xk)`: the sample covariance matrix of k
//! columns (listwise deletion of rows with a NULL). State: the centered
//! co-moments n, means and cross products (k² + k + 1 numbers).

use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::AggregateUDF;

use crate::comoments::{CoMoments, CoMomentsAggregate};
use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::labeled::{labeled_matrix, labeled_matrix_type};

/// `covariance_matrix(x1, ..., xk)`: the sample covariance matrix, as a labeled matrix.
pub fn covariance_matrix() -> AggregateUDF {
    AggregateUDF::from(CoMomentsAggregate::new(
        "covariance_matrix",
        labeled_matrix_type(),
        finish,
    ))
}

fn finish(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    labeled_matrix(names, state.covariance().as_ref())
}

/// The documentation of `covariance_matrix`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Matrices,
    description: "The sample covariance matrix of k numeric columns, over the rows where none of them is NULL.",
    syntax: "covariance_matrix(x1, ..., xk)",
    arguments: &[(
        "x1, ..., xk",
        "numeric columns or expressions (at least one)",
    )],
    options: &[],
    returns: "a labeled k × k matrix, `struct<names: list<utf8>, matrix: list<list<float64>>>` (`cov['matrix'][1][2]`); the REPL prints it as a matrix",
    releases: "its rows' centred co-moments: n, k means and the k × k centred cross products (k² + k + 1 numbers, whatever its rows).",
    example: "SELECT covariance_matrix(age, bmi, systolic) AS cov FROM clinic",
};

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, matrix_of};

    #[tokio::test]
    async fn matches_covar_samp_and_var_samp() {
        let (got, want) = crate::testing::run_pair(
            "SELECT covariance_matrix(a, b) AS m FROM t",
            "SELECT var_samp(a) AS aa, covar_samp(a, b) AS ab, var_samp(b) AS bb FROM t WHERE a IS NOT NULL AND b IS NOT NULL",
        )
        .await;
        let m = matrix_of(&got, "m");
        let w: Vec<f64> = (0..3).map(|i| crate::testing::float(&want, i)).collect();
        for (x, y) in [
            (m[0][0], w[0]),
            (m[0][1], w[1]),
            (m[1][0], w[1]),
            (m[1][1], w[2]),
        ] {
            assert!((x - y).abs() <= 1e-9 * y.abs(), "{x} vs {y}");
        }
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("covariance_matrix(a, b, c)").await;
    }
}
