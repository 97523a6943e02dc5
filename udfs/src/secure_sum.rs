//! `secure_sum(value, lower, upper)`: the sum of the values clipped to
//! `[lower, upper]`, of the value's type (INT, BIGINT, REAL or DOUBLE).
//!
//! State: the quantized sum and the count of non-NULL values, two `UInt64`
//! added mod 2^64 (see [`crate::secure_quantized`]), which fedsql's
//! clients mask so that the coordinator only learns the total.

use datafusion::logical_expr::AggregateUDF;

use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_sum(value, lower, upper)`.
pub fn secure_sum() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_sum", Output::Sum))
}

/// The documentation of `secure_sum`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "The sum of the values clipped to [lower, upper], merged as a pairwise-masked sum so that the coordinator learns only the total; NULL when there is no value.",
    syntax: "secure_sum(value, lower, upper)",
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
    returns: "the sum, of the value's type (exact for integers with upper − lower < 2^32; otherwise within n · (upper − lower) / (2 · (2^32 − 1)))",
    releases: "its quantized sum and count, two integers mod 2^64, each masked with pairwise masks that cancel in the merge; no site's own state is readable.",
    example: "SELECT secure_sum(visits, 0, 20) AS visits FROM clinic",
};

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, float, run_pair};

    #[tokio::test]
    async fn equals_the_sum_of_clipped_values() {
        // a is about 1000 ± 5: bounds that clip some of it, on both sides.
        // (greatest/least skip NULLs, so the reference drops them first.)
        let (got, want) = run_pair(
            "SELECT secure_sum(a, 998, 1003) AS s FROM t",
            "SELECT sum(least(greatest(a, 998), 1003)) AS s FROM t WHERE a IS NOT NULL",
        )
        .await;
        let (got, want) = (float(&got, 0), float(&want, 0));
        let bound = 120.0 * 5.0 / (u32::MAX as f64) / 2.0;
        assert!(
            (got - want).abs() <= bound + 1e-9 * want.abs(),
            "{got} vs {want}"
        );
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("secure_sum(a, 995, 1005)").await;
        assert_split_invariant("secure_sum(CAST(a AS BIGINT), 990, 1010)").await;
    }
}
