//! `secure_sum(value, lower, upper)`: the sum of the values clipped to
//! `[lower, upper]`, of the value's type (INT, BIGINT, REAL or DOUBLE).
//!
//! State: the quantized sum and the count of non-NULL values, two `UInt64`
//! added mod 2^64 (see [`crate::secure_quantized`]), which fedsql's
//! clients mask so that the coordinator only learns the total.

use datafusion::logical_expr::AggregateUDF;

use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_sum(value, lower, upper)`.
pub fn secure_sum() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_sum", Output::Sum))
}

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
