//! The tail probabilities and quantiles against values computed with mpmath
//! at 40 digits (the test's reference: R agrees with them to ~1e-15).

// The references keep mpmath's 20 printed digits.
#![allow(clippy::excessive_precision)]

use super::*;

const T_QUANTILES: [(f64, f64, f64); 9] = [
    (0.95, 12.3, 1.7786725462382351327),
    (0.975, 1.0, 1.2706204736174693314e+1),
    (0.975, 2.5, 3.5746548420036817607),
    (0.995, 536.541951398976, 2.5850234699429559583),
    (0.05, 7.0, -1.8945786050900073517),
    (0.9, 1023.739330451382, 1.2823790639526213502),
    (1e-10, 5.0, -1.5682559270889431634e+2),
    (0.999999, 30.0, 5.8711171204086238133),
    (0.975, 100000.0, 1.9599877075346092587),
];
const T_CDFS: [(f64, f64, f64); 6] = [
    (
        -5.800108565932923,
        536.541951398976,
        5.6651789034589076796e-9,
    ),
    (
        -12.629940255533867,
        502.3184319302898,
        2.9868035454932229178e-32,
    ),
    (0.3, 10.0, 6.148396962171006936e-1),
    (2.0, 3.5, 9.3693073871204323274e-1),
    (-40.0, 1000.0, 5.2394260775866804698e-210),
    (-3.0, 250000.0, 1.3500309905658800405e-3),
];
const CHI_SQUARED_SFS: [(f64, f64, f64); 4] = [
    (3.84, 1.0, 5.0043521248705103189e-2),
    (250.0, 3.0, 6.5437500309679935993e-54),
    (0.5, 2.0, 7.7880078307140486825e-1),
    (12.3, 7.5, 1.1324170969488797772e-1),
];
const CHI_SQUARED_QUANTILES: [(f64, f64, f64); 4] = [
    (0.95, 1.0, 3.8414588206941244691),
    (0.99, 3.0, 1.134486673014437001e+1),
    (0.05, 10.0, 3.9402991361190600947),
    (0.5, 0.7, 2.1473897172368650474e-1),
];
const F_SFS: [(f64, f64, f64, f64); 4] = [
    (150.0, 3.0, 1000.0, 2.9184126321674037046e-80),
    (2.5, 2.0, 30.0, 9.9037154882832706643e-2),
    (0.3, 4.0, 12.0, 8.7236880099220149201e-1),
    (10000.0, 1.0, 20.0, 1.7701732217925080206e-28),
];
const F_QUANTILES: [(f64, f64, f64, f64); 3] = [
    (0.95, 3.0, 1000.0, 2.6138035806936198944),
    (0.99, 2.0, 30.0, 5.3903458631778831361),
    (0.1, 4.0, 12.0, 2.5670468651716556456e-1),
];
const NORMAL_QUANTILES: [(f64, f64); 4] = [
    (0.975, 1.9599639845400538556),
    (0.995, 2.5758293035489004539),
    (1e-12, -7.0344838253011319326),
    (0.6, 2.5334710313579974132e-1),
];

fn assert_close(what: &str, got: f64, want: f64, tolerance: f64) {
    let relative = (got - want).abs() / want.abs();
    assert!(
        relative <= tolerance,
        "{what}: got {got:e}, want {want:e} (relative error {relative:e})"
    );
}

#[test]
fn quantiles_are_exact_to_1e_12() {
    for (p, df, want) in T_QUANTILES {
        assert_close(&format!("qt({p}, {df})"), t_quantile(p, df), want, 1e-12);
    }
    for (p, df, want) in CHI_SQUARED_QUANTILES {
        assert_close(
            &format!("qchisq({p}, {df})"),
            chi_squared_quantile(p, df),
            want,
            1e-12,
        );
    }
    for (p, d1, d2, want) in F_QUANTILES {
        assert_close(
            &format!("qf({p}, {d1}, {d2})"),
            f_quantile(p, d1, d2),
            want,
            1e-12,
        );
    }
    for (p, want) in NORMAL_QUANTILES {
        assert_close(&format!("qnorm({p})"), normal_quantile(p), want, 1e-12);
    }
}

#[test]
fn tail_probabilities_keep_their_digits_when_tiny() {
    for (t, df, want) in T_CDFS {
        // The continued fraction's rounding grows with df: 1e-12 up to df
        // ~1e5, 1e-11 below R's switch to a normal approximation at 4e5.
        let tolerance = if df > 1e5 { 1e-11 } else { 1e-12 };
        assert_close(&format!("pt({t}, {df})"), t_cdf(t, df), want, tolerance);
        assert_close(
            &format!("pt({}, {df}, lower = FALSE)", -t),
            t_sf(-t, df),
            want,
            tolerance,
        );
    }
    for (x, df, want) in CHI_SQUARED_SFS {
        assert_close(
            &format!("pchisq({x}, {df}, lower = FALSE)"),
            chi_squared_sf(x, df),
            want,
            1e-12,
        );
    }
    for (f, d1, d2, want) in F_SFS {
        assert_close(
            &format!("pf({f}, {d1}, {d2}, lower = FALSE)"),
            f_sf(f, d1, d2),
            want,
            1e-12,
        );
    }
}

#[test]
fn the_quantile_inverts_the_tail_probability() {
    for df in [1.0, 2.0, 3.7, 10.0, 57.0, 1e3, 3e5, 1e6] {
        for p in [1e-9, 0.001, 0.025, 0.3, 0.5, 0.8, 0.975, 0.999_999] {
            let q = t_quantile(p, df);
            let tolerance = if df > 1e5 { 1e-10 } else { 1e-12 };
            assert_close(&format!("pt(qt({p}, {df}))"), t_cdf(q, df), p, tolerance);
        }
    }
    for (d1, d2) in [(1.0, 1.0), (3.0, 7.0), (12.0, 200.0)] {
        for p in [0.01, 0.5, 0.95, 0.999] {
            let q = f_quantile(p, d1, d2);
            assert_close(
                &format!("pf(qf({p}, {d1}, {d2}))"),
                f_cdf(q, d1, d2),
                p,
                1e-12,
            );
        }
    }
}

#[test]
fn edges_are_r_s() {
    assert_eq!(t_quantile(0.0, 3.0), f64::NEG_INFINITY);
    assert_eq!(t_quantile(1.0, 3.0), f64::INFINITY);
    assert!(t_quantile(1.5, 3.0).is_nan());
    assert_eq!(t_quantile(0.5, 3.0), 0.0);
    assert_eq!(chi_squared_quantile(0.0, 2.0), 0.0);
    assert_eq!(f_sf(0.0, 2.0, 3.0), 1.0);
    assert_eq!(t_cdf(f64::INFINITY, 4.0), 1.0);
    // mpmath: ln B(300, ½) and ln B(125000, ½).
    assert_close(
        "lbeta(300, 0.5)",
        ln_beta(300.0, 0.5),
        -2.279_109_627_929_634_4,
        1e-15,
    );
    assert_close(
        "lbeta(125000, 0.5)",
        ln_beta(125_000.0, 0.5),
        -5.295_668_565_217_519,
        1e-15,
    );
}
