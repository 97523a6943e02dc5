use super::*;
use crate::family::ln_factorial;

/// The general formulas, row by row, as `irls_step`'s scalar loop has
/// them (R's `binomial()` and `poisson()` families).
fn reference(kind: Canonical, rows: &CanonicalRows) -> (RowSums, Vec<f64>, Vec<f64>) {
    let (family, link) = match kind {
        Canonical::Logistic => (Family::Binomial, Link::Logit),
        Canonical::PoissonLog => (Family::Poisson, Link::Log),
    };
    let mut sums = RowSums::default();
    let (mut working, mut wz) = (Vec::new(), Vec::new());
    for i in 0..rows.y.len() {
        let (y, w) = (rows.y[i], rows.weight[i]);
        let (eta, mu, mu_eta) = match rows.eta {
            Some(eta) => {
                let (mu, mu_eta) = link.inverse_and_derivative(eta[i]);
                (eta[i], mu, mu_eta)
            }
            None => {
                let mu = family.start_mu(y, w);
                let eta = link.link(mu);
                (eta, mu, link.mu_eta(eta))
            }
        };
        let variance = family.variance(mu);
        let log_lik = match kind {
            Canonical::Logistic => ln_binomial_log_p(y, mu),
            Canonical::PoissonLog => y * mu.ln() - mu - ln_factorial(y),
        };
        sums.n += 1.0;
        sums.sum_w += w;
        sums.sum_wy += w * y;
        sums.deviance += family.deviance_residual(y, mu, w);
        sums.log_pmf += w * log_lik;
        sums.pearson += w * (y - mu) * (y - mu) / variance;
        let z = (eta - rows.offset[i]) + (y - mu) / mu_eta;
        working.push(w * mu_eta * mu_eta / variance);
        wz.push(working[i] * z);
    }
    (sums, working, wz)
}

fn ln_binomial_log_p(y: f64, mu: f64) -> f64 {
    if y == 1.0 { mu.ln() } else { (1.0 - mu).ln() }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
}

/// Checks the pass against [`reference`] with prior weights 0.5, 1.5
/// and 2.5 in turn, and again with unit weights (the logistic rows'
/// logarithms then come from products).
fn check(kind: Canonical, y: &[f64], eta: Option<&[f64]>) {
    let rows = y.len();
    let varied: Vec<f64> = (0..rows).map(|i| 0.5 + (i % 3) as f64).collect();
    check_weighted(kind, y, eta, &varied);
    check_weighted(kind, y, eta, &vec![1.0; rows]);
}

fn check_weighted(kind: Canonical, y: &[f64], eta: Option<&[f64]>, weight: &[f64]) {
    let rows = y.len();
    let offset: Vec<f64> = (0..rows).map(|i| 0.01 * i as f64).collect();
    let trials = vec![1.0; rows];
    let given = CanonicalRows {
        y,
        trials: &trials,
        offset: &offset,
        weight,
        eta,
    };
    let (mut working, mut wz) = (vec![0.0; rows], vec![0.0; rows]);
    let sums = kind
        .add_rows(
            CanonicalRows {
                y,
                trials: &trials,
                offset: &offset,
                weight,
                eta,
            },
            &mut working,
            &mut wz,
        )
        .expect("every row admitted");
    let (expected, expected_working, expected_wz) = reference(kind, &given);
    for (name, a, b) in [
        ("n", sums.n, expected.n),
        ("sum_w", sums.sum_w, expected.sum_w),
        ("sum_wy", sums.sum_wy, expected.sum_wy),
        ("deviance", sums.deviance, expected.deviance),
        ("log_pmf", sums.log_pmf, expected.log_pmf),
        ("pearson", sums.pearson, expected.pearson),
    ] {
        assert!(close(a, b), "{kind:?} {name}: {a} vs {b}");
    }
    for i in 0..rows {
        assert!(
            close(working[i], expected_working[i]),
            "{kind:?} working[{i}]"
        );
        assert!(close(wz[i], expected_wz[i]), "{kind:?} wz[{i}]");
    }
}

#[test]
fn logistic_rows_agree_with_the_general_formulas() {
    let eta: Vec<f64> = (0..64).map(|i| -30.0 + 60.0 * i as f64 / 63.0).collect();
    let y: Vec<f64> = (0..64).map(|i| ((i * 7) % 3 == 0) as u8 as f64).collect();
    check(Canonical::Logistic, &y, Some(&eta));
    check(Canonical::Logistic, &y, None);
}

/// Thousands of the least probable rows a logistic block admits
/// (|η| = 30 against the response), so that every product of
/// [`FACTORS_PER_LOG`] rows is as small as it can be, and some rows
/// left over after the last whole product.
#[test]
fn products_of_the_least_probable_rows_do_not_underflow() {
    let rows = 4 * (FACTORS_PER_LOG * 100 + 3);
    let y: Vec<f64> = (0..rows).map(|i| (i % 2) as f64).collect();
    let eta: Vec<f64> = y
        .iter()
        .map(|&y| if y == 1.0 { -30.0 } else { 30.0 })
        .collect();
    check(Canonical::Logistic, &y, Some(&eta));
}

#[test]
fn poisson_rows_agree_with_the_general_formulas() {
    let eta: Vec<f64> = (0..64).map(|i| -20.0 + 0.5 * i as f64).collect();
    let y: Vec<f64> = (0..64).map(|i| ((i * 5) % 11) as f64).collect();
    check(Canonical::PoissonLog, &y, Some(&eta));
    check(Canonical::PoissonLog, &y, None);
}

/// The first round's terms looked up by response are those each row
/// computes, to the bit, with AVX2 and without: logistic rows (0/1) and
/// poisson counts (0 to 255), offsets varied, and blocks with a row both
/// refuse (two trials; a negative count).
#[test]
fn a_start_looked_up_by_response_is_the_row_by_row_start() {
    struct Both<'a>(Canonical, CanonicalRows<'a>);
    type Out = [(Option<RowSums>, Vec<u64>); 2];
    impl WithLanes for Both<'_> {
        type Output = Out;
        fn run<L: Lanes>(self, lanes: L) -> Out {
            let Both(kind, given) = self;
            let n = given.y.len();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let rows = || CanonicalRows { ..given };
            let (mut w, mut wz) = (vec![0.0; n], vec![0.0; n]);
            let by_table = match kind {
                Canonical::Logistic => add_logistic_start_groups(lanes, rows(), &mut w, &mut wz),
                Canonical::PoissonLog => add_poisson_start_groups(lanes, rows(), &mut w, &mut wz),
            };
            let table = (by_table, [bits(&w), bits(&wz)].concat());
            let products = kind == Canonical::Logistic;
            let by_row = add_groups(lanes, kind, products, rows(), &mut w, &mut wz);
            [table, (by_row, [bits(&w), bits(&wz)].concat())]
        }
    }
    let n = 4 * 97;
    let offset: Vec<f64> = (0..n).map(|i| 0.37 * i as f64 - 20.0).collect();
    let one = vec![1.0; n];
    for kind in [Canonical::Logistic, Canonical::PoissonLog] {
        for refused in [false, true] {
            let (mut y, mut trials): (Vec<f64>, Vec<f64>) = match kind {
                Canonical::Logistic => (
                    (0..n).map(|i| ((i * 7) % 3 == 0) as u8 as f64).collect(),
                    one.clone(),
                ),
                Canonical::PoissonLog => (
                    (0..n).map(|i| ((i * 37) % 256) as f64).collect(),
                    one.clone(),
                ),
            };
            if refused {
                match kind {
                    Canonical::Logistic => trials[101] = 2.0,
                    Canonical::PoissonLog => y[101] = -1.0,
                }
            }
            let rows = || CanonicalRows {
                y: &y,
                trials: &trials,
                offset: &offset,
                weight: &one,
                eta: None,
            };
            for [(table, table_bits), (row, row_bits)] in [
                lanes::dispatch(Both(kind, rows())),
                Both(kind, rows()).run(lanes::Portable),
            ] {
                assert_eq!(table.is_none(), refused, "{kind:?}");
                let bits = |s: Option<RowSums>| {
                    s.map(|s| {
                        [
                            s.n, s.sum_w, s.sum_wy, s.deviance, s.log_pmf, s.pearson, s.boundary,
                        ]
                        .map(f64::to_bits)
                    })
                };
                assert_eq!(bits(table), bits(row), "{kind:?}");
                if !refused {
                    assert_eq!(table_bits, row_bits, "{kind:?}");
                }
            }
        }
    }
}

/// Which responses the poisson start looks up: whole counts below the
/// table's end, not −0, fractions, negatives, the end itself, ∞ or NaN.
#[test]
fn start_counts_are_whole_numbers_below_the_tables_end() {
    let end = START_COUNTS as f64;
    for (y, row) in [
        (0.0, Some(0)),
        (7.0, Some(7)),
        (end - 1.0, Some(START_COUNTS - 1)),
        (-0.0, None),
        (2.5, None),
        (-1.0, None),
        (end, None),
        (f64::INFINITY, None),
        (f64::NAN, None),
    ] {
        assert_eq!(whole_count(y, START_COUNTS), row, "{y}");
    }
}

#[test]
fn rows_the_general_path_must_handle_are_not_admitted() {
    let ok = [0.0, 1.0, 1.0, 0.0];
    let one = [1.0; 4];
    let eta = [0.1, -0.2, 0.3, 0.0];
    let admits = |kind: Canonical, y: &[f64], trials: &[f64], weight: &[f64], eta: &[f64]| {
        let rows = CanonicalRows {
            y,
            trials,
            offset: &[0.0; 4],
            weight,
            eta: Some(eta),
        };
        kind.add_rows(rows, &mut [0.0; 4], &mut [0.0; 4]).is_some()
    };
    assert!(admits(Canonical::Logistic, &ok, &one, &one, &eta));
    assert!(admits(Canonical::PoissonLog, &ok, &one, &one, &eta));
    // A proportion, two trials, a zero weight, a clamped or NaN η.
    assert!(!admits(
        Canonical::Logistic,
        &[0.5, 1.0, 1.0, 0.0],
        &one,
        &one,
        &eta
    ));
    assert!(!admits(
        Canonical::Logistic,
        &ok,
        &[2.0, 1.0, 1.0, 1.0],
        &one,
        &eta
    ));
    assert!(!admits(
        Canonical::Logistic,
        &ok,
        &one,
        &[0.0, 1.0, 1.0, 1.0],
        &eta
    ));
    assert!(!admits(
        Canonical::Logistic,
        &ok,
        &one,
        &one,
        &[31.0, 0.0, 0.0, 0.0]
    ));
    assert!(!admits(
        Canonical::Logistic,
        &ok,
        &one,
        &one,
        &[0.0, 0.0, -31.0, 0.0]
    ));
    assert!(!admits(
        Canonical::Logistic,
        &ok,
        &one,
        &one,
        &[f64::NAN, 0.0, 0.0, 0.0]
    ));
    // A negative, infinite or NaN count, an infinite weight, an
    // overflowing η.
    for y in [-1.0, f64::INFINITY, f64::NAN] {
        assert!(!admits(
            Canonical::PoissonLog,
            &[1.0, 1.0, y, 0.0],
            &one,
            &one,
            &eta
        ));
    }
    let infinite = [1.0, 1.0, 1.0, f64::INFINITY];
    assert!(!admits(Canonical::PoissonLog, &ok, &one, &infinite, &eta));
    assert!(!admits(
        Canonical::PoissonLog,
        &ok,
        &one,
        &one,
        &[800.0, 0.0, 0.0, 0.0]
    ));
}
