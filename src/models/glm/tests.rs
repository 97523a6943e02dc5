//! Tests of the GLM fit's rounds: when a round is expected last, and that
//! skipping X'WX in such rounds changes no figure.

use super::fit::{LastRoundRule, expected_last, fit_model};
use super::*;
use crate::coordinator::context::FedContext;
use crate::frontend::demo::{DEMO_TABLE, register_demo};
use crate::models::glm_fit::GlmFit;

fn spec(formula: &str, family: &str) -> GlmSpec {
    GlmSpec::parse(&[DEMO_TABLE.into(), formula.into(), family.into()]).unwrap()
}

#[test]
fn a_round_is_expected_last_at_maxit_or_when_the_changes_fall_fast_enough() {
    let binomial = spec("event ~ age", "binomial");
    // Newton's steps: each change about the square of the one before.
    assert!(!expected_last(&[], 1, &binomial));
    assert!(!expected_last(&[0.3], 2, &binomial));
    assert!(!expected_last(&[0.3, 1e-2], 3, &binomial));
    assert!(!expected_last(&[1e-2, 1e-4], 4, &binomial));
    assert!(expected_last(&[1e-4, 1e-8 * 1.5], 5, &binomial));
    // The demo's binomial fit: 5.8e-4, 8.2e-7, then 1.8e-12.
    assert!(expected_last(&[5.8e-4, 8.2e-7], 5, &binomial));
    // A gamma fit whose next change was 1.8e-8, not below 1e-8.
    assert!(!expected_last(&[0.47, 4.5e-4], 3, &binomial));
    // Linear convergence at a rate of a half.
    assert!(!expected_last(&[2e-8, 1e-8], 6, &binomial));
    // Changes at the rounding of the sums predict nothing.
    let tight = GlmSpec {
        epsilon: 1e-14,
        ..binomial.clone()
    };
    assert!(!expected_last(&[1.8e-8, 6.8e-12], 5, &tight));
    // A change that grew predicts nothing; maxit ends the fit.
    assert!(!expected_last(&[1e-12, 1e-11], 5, &binomial));
    assert!(expected_last(&[], 25, &binomial));
    let few = GlmSpec {
        maxit: 2,
        ..binomial
    };
    assert!(expected_last(&[0.3], 2, &few));
}

/// Every printed figure of a fit, to the last bit.
fn figures(fit: &GlmFit) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        fit.estimate,
        fit.std_error,
        fit.covariance,
        fit.deviance,
        fit.null_deviance,
        fit.dispersion,
        fit.log_likelihood,
        fit.iterations,
        fit.converged
    )
}

#[tokio::test]
async fn skipping_x_w_x_in_rounds_expected_last_changes_no_figure() {
    let ctx = FedContext::new();
    register_demo(&ctx).unwrap();
    let always: LastRoundRule = |_, _, _| true;
    let never: LastRoundRule = |_, _, _| false;
    for (formula, family) in [
        ("event ~ age + bmi + smoker + C(region)", "binomial"),
        ("visits ~ age + smoker", "poisson"),
        ("systolic ~ age + bmi", "Gamma(log)"),
        ("systolic ~ age + bmi", "gaussian"),
    ] {
        let spec = spec(formula, family);
        let fit = |rule| fit_model(&ctx, &spec, None, true, rule, None);
        let usual = figures(&fit(expected_last).await.unwrap());
        // Every round first without X'WX, then again with it (a round
        // expected last that was not); and never skipping.
        assert_eq!(figures(&fit(always).await.unwrap()), usual, "{family}");
        assert_eq!(figures(&fit(never).await.unwrap()), usual, "{family}");
    }
}
