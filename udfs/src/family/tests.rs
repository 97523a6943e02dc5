//! Tests of the families, links and log-probabilities.

use statrs::function::gamma::ln_gamma;

use super::log_pmf::FACTORIAL_TABLE;
use super::*;

#[test]
fn links_invert_and_their_derivatives_agree_with_finite_differences() {
    let cases = [
        (Link::Identity, 2.5),
        (Link::Log, 2.5),
        (Link::Logit, 0.3),
        (Link::Probit, 0.3),
        (Link::Cloglog, 0.3),
        (Link::Sqrt, 2.5),
        (Link::Inverse, 2.5),
        (Link::InverseSquare, 2.5),
    ];
    for (link, mu) in cases {
        let eta = link.link(mu);
        assert!((link.inverse(eta) - mu).abs() < 1e-12, "{link}");
        let h = 1e-6;
        let numeric = (link.inverse(eta + h) - link.inverse(eta - h)) / (2.0 * h);
        assert!(
            (link.mu_eta(eta) - numeric).abs() < 1e-6 * numeric.abs().max(1.0),
            "{link}"
        );
    }
}

#[test]
fn families_parse_with_links_and_refuse_wrong_ones() {
    assert_eq!(
        parse_family("binomial").unwrap(),
        (Family::Binomial, Link::Logit)
    );
    assert_eq!(
        parse_family("gamma(log)").unwrap(),
        (Family::Gamma, Link::Log)
    );
    assert_eq!(
        parse_family("inverse_gaussian").unwrap(),
        (Family::InverseGaussian, Link::InverseSquare)
    );
    assert!(
        parse_family("poisson(logit)")
            .unwrap_err()
            .contains("no `logit` link")
    );
    assert!(
        parse_family("weibull")
            .unwrap_err()
            .contains("unknown family")
    );
    assert!(
        parse_family("binomial(foo)")
            .unwrap_err()
            .contains("unknown link")
    );
}

#[test]
fn deviance_residuals_vanish_at_a_perfect_fit() {
    for family in [
        Family::Gaussian,
        Family::Binomial,
        Family::Poisson,
        Family::Gamma,
        Family::InverseGaussian,
    ] {
        assert!(
            family.deviance_residual(0.4, 0.4, 2.0).abs() < 1e-15,
            "{family}"
        );
    }
    assert_eq!(Family::Poisson.deviance_residual(0.0, 2.0, 1.0), 4.0);
}

#[test]
fn shared_exponentials_give_the_same_values() {
    for link in [Link::Logit, Link::Log, Link::Probit, Link::Identity] {
        for eta in [-40.0, -3.0, 0.2, 5.0, 35.0] {
            let (mu, d) = link.inverse_and_derivative(eta);
            assert!(
                (mu - link.inverse(eta)).abs() <= 1e-15 * mu.abs().max(1.0),
                "{link} {eta}"
            );
            assert!(
                (d - link.mu_eta(eta)).abs() <= 1e-15 * d.abs().max(1e-300),
                "{link} {eta}"
            );
        }
    }
    assert!((ln_factorial(5.0) - 120f64.ln()).abs() < 1e-13);
    assert!((ln_factorial(2000.0) - ln_gamma(2001.0)).abs() < 1e-9);
}

#[test]
fn only_small_whole_numbers_are_read_from_the_tables() {
    let table_end = FACTORIAL_TABLE as f64;
    for (x, row) in [
        (0.0, Some(0)),
        (-0.0, Some(0)),
        (7.0, Some(7)),
        (table_end - 1.0, Some(FACTORIAL_TABLE - 1)),
        (table_end, None),
        (0.5, None),
        (7.25, None),
        (-3.0, None),
        (5e9, None),
        (f64::INFINITY, None),
        (f64::NAN, None),
    ] {
        assert_eq!(WholeLogs::row(x), row, "{x}");
    }
    // The tables agree with what they stand for, and other arguments
    // are computed.
    assert_eq!(ln_whole(7.0), 7f64.ln());
    assert_eq!(ln_whole(7.25), 7.25f64.ln());
    assert_eq!(ln_factorial(table_end), ln_gamma(table_end + 1.0));
}

#[test]
fn log_probabilities_sum_to_one() {
    let total: f64 = (0..=5)
        .map(|s| ln_binomial_pmf(s as f64, 5.0, 0.3).exp())
        .sum();
    assert!((total - 1.0).abs() < 1e-12);
    let total: f64 = (0..60).map(|y| ln_poisson_pmf(y as f64, 4.2).exp()).sum();
    assert!((total - 1.0).abs() < 1e-12);
}
