//! `secure_count(value)`: the number of non-NULL values, as BIGINT
//! (`secure_count(1)` counts rows).
//!
//! State: the count as one `UInt64` added mod 2^64, which fedsql's clients
//! mask, so a secure average is `secure_sum(x, lo, hi) / secure_count(x)`
//! (or `secure_avg`).

use datafusion::logical_expr::AggregateUDF;

use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_count(value)`.
pub fn secure_count() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_count", Output::Count))
}

/// The documentation of `secure_count`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "The number of non-NULL values, merged as a pairwise-masked sum (`secure_count(1)` counts rows).",
    syntax: "secure_count(value)",
    arguments: &[("value", "any column or expression")],
    options: &[],
    returns: "BIGINT",
    releases: "its count, one integer mod 2^64, masked with pairwise masks that cancel in the merge.",
    example: "SELECT secure_count(bmi) AS n FROM clinic",
};

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, float, run_pair};

    #[tokio::test]
    async fn equals_count() {
        let (got, want) = run_pair(
            "SELECT secure_count(a) AS n, secure_count(1) AS r FROM t",
            "SELECT count(a) AS n, count(1) AS r FROM t",
        )
        .await;
        assert_eq!(float(&got, 0), float(&want, 0));
        assert_eq!(float(&got, 1), float(&want, 1));
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("secure_count(b)").await;
    }
}
