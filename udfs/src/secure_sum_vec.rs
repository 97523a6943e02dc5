//! `secure_sum_vec([x, y, z], [lx, ly, lz], [ux, uy, uz])`: several secure
//! sums at once, each value clipped to its own bounds; returns the list of
//! sums (of the values' common type), NULL where a value had no non-NULL row.
//!
//! State: a list of quantized sums and a list of counts (one per value),
//! `UInt64` added mod 2^64 (see [`crate::secure_quantized`]).

use datafusion::logical_expr::AggregateUDF;

use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_sum_vec(values, lowers, uppers)`.
pub fn secure_sum_vec() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_sum_vec", Output::SumVec))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Float64Type;

    use crate::testing::{assert_split_invariant, float, run_pair};

    #[tokio::test]
    async fn equals_one_secure_sum_per_value() {
        let (got, want) = run_pair(
            "SELECT secure_sum_vec([a, b, c], [998, -0.01, 0], [1003, 0.01, 600]) AS v FROM t",
            "SELECT secure_sum(a, 998, 1003), secure_sum(b, -0.01, 0.01), secure_sum(c, 0, 600) FROM t",
        )
        .await;
        let list = got[0].column(0).as_list::<i32>().value(0);
        let list = list.as_primitive::<Float64Type>();
        assert_eq!(list.len(), 3);
        for i in 0..3 {
            assert_eq!(list.value(i), float(&want, i), "value {i}");
        }
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("secure_sum_vec([a, b, c], [995, -1, 0], [1005, 1, 1000])").await;
    }
}
