//! `secure_avg(value, lower, upper)`: the mean of the values clipped to
//! `[lower, upper]`, as DOUBLE — the secure sum divided by the secure count.
//!
//! State: the same as `secure_sum` (quantized sum and count, `UInt64` mod
//! 2^64), so both the sum and the number of rows are merged securely.

use datafusion::logical_expr::AggregateUDF;

use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_avg(value, lower, upper)`.
pub fn secure_avg() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_avg", Output::Avg))
}

/// The documentation of `secure_avg`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "The mean of the values clipped to [lower, upper]: the secure sum divided by the secure count, both merged as pairwise-masked sums.",
    syntax: "secure_avg(value, lower, upper)",
    arguments: &[
        (
            "value",
            "an INT, BIGINT, REAL or DOUBLE column or expression; NULL and NaN are skipped",
        ),
        (
            "lower, upper",
            "constant bounds of the value's type, finite, lower < upper",
        ),
    ],
    options: &[],
    returns: "DOUBLE",
    releases: "its quantized sum and count, two integers mod 2^64, each masked with pairwise masks that cancel in the merge.",
    example: "SELECT secure_avg(bmi, 10, 60) AS mean_bmi FROM clinic",
};

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, float, run_pair};

    #[tokio::test]
    async fn equals_the_mean_of_clipped_values() {
        let (got, want) = run_pair(
            "SELECT secure_avg(CAST(a * 10 AS BIGINT), 9980, 10030) AS m FROM t",
            "SELECT avg(least(greatest(CAST(a * 10 AS BIGINT), 9980), 10030)) AS m FROM t WHERE a IS NOT NULL",
        )
        .await;
        let (got, want) = (float(&got, 0), float(&want, 0));
        assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} vs {want}");
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("secure_avg(b, -1, 1)").await;
    }
}
