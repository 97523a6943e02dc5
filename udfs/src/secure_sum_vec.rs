//! `secure_sum_vec([x, y, z], [lx, ly, lz], [ux, uy, uz])`: several secure
//! sums at once, each value clipped to its own bounds; returns the list of
//! sums (of the values' common type), NULL where a value had no non-NULL row.
//!
//! State: a list of quantized sums and a list of counts (one per value),
//! `UInt64` added mod 2^64 (see [`crate::secure_quantized`]).

use datafusion::logical_expr::AggregateUDF;

use crate::function_doc::{FunctionDoc, FunctionFamily};
use crate::secure_quantized::{Output, SecureAggregate};

/// `secure_sum_vec(values, lowers, uppers)`.
pub fn secure_sum_vec() -> AggregateUDF {
    AggregateUDF::from(SecureAggregate::new("secure_sum_vec", Output::SumVec))
}

/// The documentation of `secure_sum_vec`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "Several secure sums at once, each value clipped to its own bounds.",
    syntax: "secure_sum_vec([x1, ..., xm], [lower1, ..., lowerm], [upper1, ..., upperm])",
    arguments: &[
        (
            "[x1, ..., xm]",
            "a list written out, of values of one common type (cast as needed)",
        ),
        (
            "[lower1, ...], [upper1, ...]",
            "constant lists of bounds, one per value",
        ),
    ],
    options: &[],
    returns: "a list of m sums, of the values' type; NULL for a value with no non-NULL row",
    releases: "a list of m quantized sums and a list of m counts, integers mod 2^64, each masked with pairwise masks that cancel in the merge.",
    example: "SELECT secure_sum_vec([bmi, CAST(visits AS DOUBLE)], [10, 0], [60, 20]) AS sums FROM clinic",
};

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
