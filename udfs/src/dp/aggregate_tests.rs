//! Tests of the DP aggregates: decoding without noise, merges of split
//! states, sensitivities and the constants refused.

use crate::testing::{assert_split_invariant, float, run_pair};

#[tokio::test]
async fn without_noise_the_states_decode_to_the_clamped_aggregates() {
    let cases = [
        (
            "dp_sum(a, 998, 1003)",
            "sum(least(greatest(a, 998), 1003))",
            1e-3,
        ),
        (
            "dp_avg(a, 998, 1003)",
            "avg(least(greatest(a, 998), 1003))",
            1e-5,
        ),
        (
            "dp_var(a, 998, 1003)",
            "var(least(greatest(a, 998), 1003))",
            1e-4,
        ),
        (
            "CAST(dp_count(a) AS DOUBLE)",
            "CAST(count(a) AS DOUBLE)",
            0.0,
        ),
        (
            "CAST(dp_sum(CAST(a AS BIGINT), 998, 1003) AS DOUBLE)",
            "CAST(sum(least(greatest(CAST(a AS BIGINT), 998), 1003)) AS DOUBLE)",
            0.0,
        ),
        // The masked forms: the same sums as UInt64 words (a coarser
        // grid for non-integer sums).
        (
            "secure_dp_sum(a, 998, 1003)",
            "sum(least(greatest(a, 998), 1003))",
            1e-5,
        ),
        (
            "secure_dp_avg(a, 998, 1003)",
            "avg(least(greatest(a, 998), 1003))",
            1e-4,
        ),
        (
            "CAST(secure_dp_count(a) AS DOUBLE)",
            "CAST(count(a) AS DOUBLE)",
            0.0,
        ),
        (
            "CAST(secure_dp_sum(CAST(a AS BIGINT) - 1000, -2, 3) AS DOUBLE)",
            "CAST(sum(least(greatest(CAST(a AS BIGINT) - 1000, -2), 3)) AS DOUBLE)",
            0.0,
        ),
    ];
    for (dp, exact, tolerance) in cases {
        let (got, want) = run_pair(
            &format!("SELECT {dp} AS v FROM t"),
            &format!("SELECT {exact} AS v FROM t WHERE a IS NOT NULL"),
        )
        .await;
        let (got, want) = (float(&got, 0), float(&want, 0));
        assert!(
            (got - want).abs() <= tolerance * want.abs().max(1.0),
            "{dp}: {got} vs {want}"
        );
    }
}

#[tokio::test]
async fn merge_of_split_states_equals_one_pass() {
    assert_split_invariant("dp_count(b)").await;
    assert_split_invariant("dp_sum(a, 995, 1005, 0.5)").await;
    assert_split_invariant("dp_avg(a, 995, 1005)").await;
    assert_split_invariant("dp_var(a, 995, 1005)").await;
    assert_split_invariant("dp_histogram(a, 995, 1008, 7)").await;
    // Masked: UInt64 words added mod 2^64 (negative sums wrap).
    assert_split_invariant("secure_dp_count(b)").await;
    assert_split_invariant("secure_dp_sum(a - 1000, -5, 5, 0.5)").await;
    assert_split_invariant("secure_dp_avg(a, 995, 1005)").await;
}

/// The state of one call over `rows`, straight from its accumulator.
fn state_of(
    kind: super::Kind,
    literals: &[datafusion::common::ScalarValue],
    rows: &[Option<f64>],
) -> Vec<i64> {
    use datafusion::arrow::array::{Float64Array, Int64Array};
    use datafusion::logical_expr::Accumulator;
    let (params, _) = super::Params::from_literals(kind, literals).unwrap();
    let sums = match &params.bins {
        Some(b) => vec![0; b.len()],
        None => vec![0; kind.state_names().len()],
    };
    let integer = params.integer;
    let mut acc = super::DpAccumulator {
        params,
        sums,
        masked: false,
    };
    let column: super::ArrayRef = if integer {
        std::sync::Arc::new(
            rows.iter()
                .map(|r| r.map(|v| v as i64))
                .collect::<Int64Array>(),
        )
    } else {
        std::sync::Arc::new(rows.iter().copied().collect::<Float64Array>())
    };
    acc.update_batch(&[column]).unwrap();
    acc.sums.clone()
}

#[test]
fn one_row_changes_each_state_column_by_at_most_its_sensitivity() {
    use super::Kind;
    use datafusion::common::ScalarValue;
    // A small deterministic generator: values far outside the bounds too.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 20_001) as f64 / 10.0 - 1000.0 // in [-1000, 1000]
    };
    let f = |v: f64| ScalarValue::Float64(Some(v));
    let i = |v: i64| ScalarValue::Int64(Some(v));
    let calls: Vec<(Kind, Vec<ScalarValue>)> = vec![
        (Kind::Count, vec![]),
        (Kind::Sum, vec![i(-3), i(10)]),
        (Kind::Sum, vec![f(-2.5), f(7.25)]),
        (Kind::Avg, vec![f(80.0), f(200.0)]),
        (Kind::Var, vec![f(-1.0), f(1.0)]),
        (Kind::Histogram, vec![f(15.0), f(45.0), i(6)]),
    ];
    for (kind, literals) in calls {
        let (params, _) = super::Params::from_literals(kind, &literals).unwrap();
        let noise = params.noise(1.0).unwrap();
        let mut largest = vec![0u64; noise.len()];
        for trial in 0..300 {
            let mut rows: Vec<Option<f64>> = (0..20 + trial % 7).map(|_| Some(next())).collect();
            if trial % 5 == 0 {
                rows.push(None);
            }
            let before = state_of(kind, &literals, &rows);
            rows.push(Some(next() * if trial % 2 == 0 { 1.0 } else { 1e-3 }));
            let after = state_of(kind, &literals, &rows);
            // The histogram's one column is its L1 change over the bins.
            let changes: Vec<u64> = if kind == Kind::Histogram {
                vec![before.iter().zip(&after).map(|(a, b)| a.abs_diff(*b)).sum()]
            } else {
                before
                    .iter()
                    .zip(&after)
                    .map(|(a, b)| a.abs_diff(*b))
                    .collect()
            };
            for (most, change) in largest.iter_mut().zip(changes) {
                *most = (*most).max(change);
            }
        }
        for (column, (most, n)) in largest.iter().zip(&noise).enumerate() {
            assert!(
                *most <= n.sensitivity,
                "{kind:?} {literals:?} column {column}: a row changed it by {most} > sensitivity {}",
                n.sensitivity
            );
            assert!(*most > 0, "{kind:?}: the test moved column {column}");
        }
    }
}

#[test]
fn bad_constants_are_refused_before_running() {
    use super::*;
    let lit = |v: f64| ScalarValue::Float64(Some(v));
    assert!(Params::from_literals(Kind::Sum, &[lit(3.0), lit(1.0)]).is_err());
    assert!(Params::from_literals(Kind::Sum, &[lit(0.0), lit(1.0), lit(-1.0)]).is_err());
    assert!(Params::from_literals(Kind::Sum, &[lit(0.0)]).is_err());
    // Whole-number bounds past 2^20 would change the BIGINT result's
    // type: refused as a constant, before any site debits for it.
    let int = |v: i64| ScalarValue::Int64(Some(v));
    let err = Params::from_literals(Kind::Sum, &[int(0), int(2_000_000)]).unwrap_err();
    assert!(err.to_string().contains("2^20"), "{err}");
    assert!(Params::from_literals(Kind::Sum, &[int(-(1 << 20)), int(1 << 20)]).is_ok());
    assert!(Params::from_literals(Kind::Sum, &[lit(0.0), lit(2e6)]).is_ok());
    let (p, e) = Params::from_literals(Kind::Avg, &[lit(0.0), lit(10.0), lit(0.3)]).unwrap();
    assert_eq!(e, Some(0.3));
    let noise = p.noise(0.3).unwrap();
    assert!((noise[0].epsilon - 0.15).abs() < 1e-12);
}

#[test]
fn bounds_a_float_grid_cannot_hold_are_refused_and_no_row_outweighs_the_sensitivity() {
    use super::*;
    let lit = |v: f64| ScalarValue::Float64(Some(v));
    // A subnormal range: its step rounds to zero (a row would weigh ±∞)
    // or to a subnormal unit (a row would weigh more than `levels`).
    for upper in [1e-319, f64::from_bits(98_000)] {
        for kind in [Kind::Sum, Kind::Avg, Kind::Var] {
            let err = Params::from_literals(kind, &[lit(0.0), lit(upper)]).unwrap_err();
            assert!(err.to_string().contains("too narrow or too wide"), "{err}");
        }
    }
    // A midpoint that overflows.
    let err = Params::from_literals(Kind::Avg, &[lit(1e308), lit(1.5e308)]).unwrap_err();
    assert!(err.to_string().contains("too far apart"), "{err}");
    let err = Params::from_literals(Kind::Var, &[lit(-1.5e308), lit(1.5e308)]).unwrap_err();
    assert!(err.to_string().contains("too far apart"), "{err}");
    // A sum never centers: the widest bounds are fine for it, and a row at
    // either bound weighs `levels` at the most.
    assert!(Params::from_literals(Kind::Sum, &[lit(-1.5e308), lit(1.5e308)]).is_ok());
    let state = state_of(
        Kind::Sum,
        &[lit(-f64::MAX), lit(f64::MAX)],
        &[Some(f64::MAX), Some(-f64::MAX), Some(1.0)],
    );
    assert_eq!(state, vec![0]);
    // A squared half range that overflows or underflows (dp_var's second
    // step); the same bounds are fine for a sum or a mean.
    assert!(Params::from_literals(Kind::Var, &[lit(0.0), lit(1e200)]).is_err());
    assert!(Params::from_literals(Kind::Var, &[lit(0.0), lit(1e-300)]).is_err());
    assert!(Params::from_literals(Kind::Avg, &[lit(0.0), lit(1e-300)]).is_ok());
    // A midpoint that rounds (2^53 + 1 is not a float): the value at the
    // upper bound is 2h from it, but it weighs `levels` at the most.
    let big = 9_007_199_254_740_992.0;
    let state = state_of(Kind::Avg, &[lit(big), lit(big + 2.0)], &[Some(big + 2.0)]);
    assert_eq!(state, vec![1, LEVELS as i64]);
    // Ordinary bounds still pass.
    assert!(Params::from_literals(Kind::Avg, &[lit(80.0), lit(200.0)]).is_ok());
    assert!(Params::from_literals(Kind::Sum, &[lit(0.0), lit(1e-9)]).is_ok());
}
