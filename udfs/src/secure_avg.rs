//! `secure_avg(value, lower, upper)`: the mean of the values clipped to
//! `[lower, upper]`, as DOUBLE — the secure sum divided by the secure count.
//!
//! State: the same as `secure_sum` (quantized sum and count, `UInt64` mod
//! 2^64), so both the sum and the number of rows are merged securely.

use datafusion::logical_expr::AggregateUDF;

use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_avg(value, lower, upper)`.
pub fn secure_avg() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_avg", Output::Avg))
}

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
