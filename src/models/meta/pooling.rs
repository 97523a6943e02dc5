//! Pooling per-site estimates as metafor's `rma(yi, sei = se, method = …)`:
//! the fixed-effect (inverse-variance) estimate, the between-site variance
//! τ² by DerSimonian–Laird, Paule–Mandel or REML (Fisher scoring, as
//! metafor, run to convergence), Cochran's Q, I², and the z or
//! Knapp–Hartung (`test = "knha"`) inference. Coordinator-side math on the
//! released estimates only.

use fedsql_udfs::distribution::{chi_squared_sf, normal_quantile, normal_sf, t_quantile, t_sf};

/// The τ² estimator (`method=` of `rma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Reml,
    DerSimonianLaird,
    PauleMandel,
    FixedEffect,
}

impl Method {
    /// metafor's name for it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::Reml => "REML",
            Method::DerSimonianLaird => "DL",
            Method::PauleMandel => "PM",
            Method::FixedEffect => "FE",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "REML" => Some(Method::Reml),
            "DL" => Some(Method::DerSimonianLaird),
            "PM" => Some(Method::PauleMandel),
            "FE" | "EE" => Some(Method::FixedEffect),
            _ => None,
        }
    }
}

/// The test of the pooled estimate (`test=` of `rma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Test {
    Z,
    KnappHartung,
}

/// One pooled model: the estimate and its inference, with heterogeneity.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pooled {
    pub estimate: f64,
    pub std_error: f64,
    pub statistic: f64,
    pub p_value: f64,
    pub conf_low: f64,
    pub conf_high: f64,
    /// τ² of this model (0 for the fixed-effect one).
    pub tau2: f64,
    /// The standard error of τ² (REML only, as metafor prints it).
    pub tau2_std_error: Option<f64>,
    /// I², in percent.
    pub i2: f64,
    /// H² = total / sampling variability.
    pub h2: f64,
    pub q: f64,
    pub q_df: usize,
    pub q_p_value: f64,
    /// The degrees of freedom of a Knapp–Hartung t test.
    pub t_df: Option<usize>,
    /// Each site's weight in this model, in percent (metafor's `weights()`).
    pub weights: Vec<f64>,
    /// The restricted (REML) or full log-likelihood, as metafor's `logLik`.
    pub log_likelihood: f64,
    /// metafor's deviance: −2 logLik for REML, −2 (logLik − the saturated
    /// model's with the sampling variances alone) otherwise.
    pub deviance: f64,
}

/// Fixed-effect pooling at τ² = `tau2` (0 for the FE model).
fn pool_at(y: &[f64], v: &[f64], tau2: f64) -> (f64, f64, Vec<f64>) {
    let w: Vec<f64> = v.iter().map(|vi| 1.0 / (vi + tau2)).collect();
    let sum_w: f64 = w.iter().sum();
    let mu = w.iter().zip(y).map(|(wi, yi)| wi * yi).sum::<f64>() / sum_w;
    (mu, sum_w, w)
}

/// Cochran's Q (about the fixed-effect estimate).
fn cochran_q(y: &[f64], v: &[f64]) -> f64 {
    let (mu, _, w) = pool_at(y, v, 0.0);
    w.iter().zip(y).map(|(wi, yi)| wi * (yi - mu).powi(2)).sum()
}

/// DerSimonian–Laird τ².
fn tau2_dl(y: &[f64], v: &[f64]) -> f64 {
    let k = y.len() as f64;
    let q = cochran_q(y, v);
    let w: Vec<f64> = v.iter().map(|vi| 1.0 / vi).collect();
    let sum_w: f64 = w.iter().sum();
    let sum_w2: f64 = w.iter().map(|wi| wi * wi).sum();
    ((q - (k - 1.0)) / (sum_w - sum_w2 / sum_w)).max(0.0)
}

/// The generalised Q at τ² (Σ w (y − μ̂)² with w = 1/(v + τ²)).
fn generalised_q(y: &[f64], v: &[f64], tau2: f64) -> f64 {
    let (mu, _, w) = pool_at(y, v, tau2);
    w.iter().zip(y).map(|(wi, yi)| wi * (yi - mu).powi(2)).sum()
}

/// Paule–Mandel τ²: the root of Q(τ²) = k − 1 (0 when Q(0) < k − 1), by
/// bisection to the last bit (metafor's `uniroot` stops at 1e-4 unless
/// `control = list(tol = …)` asks for more).
fn tau2_pm(y: &[f64], v: &[f64]) -> f64 {
    let target = y.len() as f64 - 1.0;
    if generalised_q(y, v, 0.0) <= target {
        return 0.0;
    }
    let (mut low, mut high) = (0.0_f64, 1.0_f64.max(tau2_dl(y, v)));
    while generalised_q(y, v, high) > target {
        high *= 2.0;
    }
    for _ in 0..2000 {
        let mid = 0.5 * (low + high);
        if mid <= low || mid >= high {
            break;
        }
        if generalised_q(y, v, mid) > target {
            low = mid;
        } else {
            high = mid;
        }
    }
    0.5 * (low + high)
}

/// tr(P), tr(PP) and y'PPy of the REML score at τ² (X = 1).
fn reml_terms(y: &[f64], v: &[f64], tau2: f64) -> (f64, f64, f64) {
    let (mu, sum_w, w) = pool_at(y, v, tau2);
    // P = W − w wᵀ / Σw; Py = w ∘ (y − μ̂).
    let py: Vec<f64> = w.iter().zip(y).map(|(wi, yi)| wi * (yi - mu)).collect();
    let sum_w2: f64 = w.iter().map(|wi| wi * wi).sum();
    let sum_w3: f64 = w.iter().map(|wi| wi * wi * wi).sum();
    let trace_p = sum_w - sum_w2 / sum_w;
    let trace_pp =
        w.iter().map(|wi| wi * wi).sum::<f64>() - 2.0 * sum_w3 / sum_w + (sum_w2 / sum_w).powi(2);
    let ypp_y = py.iter().map(|p| p * p).sum();
    (trace_p, trace_pp, ypp_y)
}

/// REML τ² by Fisher scoring from the DL value (as metafor, whose default
/// stops when a step is below 1e-5; this one runs to convergence).
fn tau2_reml(y: &[f64], v: &[f64]) -> f64 {
    let mut tau2 = tau2_dl(y, v);
    for _ in 0..10_000 {
        let (trace_p, trace_pp, ypp_y) = reml_terms(y, v, tau2);
        let mut step = (ypp_y - trace_p) / trace_pp;
        while tau2 + step < 0.0 {
            step /= 2.0;
            if step.abs() < 1e-300 {
                break;
            }
        }
        let next = (tau2 + step).max(0.0);
        let done = (next - tau2).abs() <= 1e-15 * next.max(1e-300) || next == tau2;
        tau2 = next;
        if done {
            break;
        }
    }
    tau2
}

/// Pools estimates `y` with standard errors `se` as `rma(y, sei = se,
/// method, test, level)` (`Method::FixedEffect` for the model with τ² = 0).
pub(crate) fn pool(y: &[f64], se: &[f64], method: Method, test: Test, level: f64) -> Pooled {
    let k = y.len();
    let v: Vec<f64> = se.iter().map(|s| s * s).collect();
    let q = cochran_q(y, &v);
    let q_df = k.saturating_sub(1);
    let tau2 = if k <= 1 {
        0.0
    } else {
        match method {
            Method::FixedEffect => 0.0,
            Method::DerSimonianLaird => tau2_dl(y, &v),
            Method::PauleMandel => tau2_pm(y, &v),
            Method::Reml => tau2_reml(y, &v),
        }
    };
    let (mu, sum_w, w) = pool_at(y, &v, tau2);
    let mut std_error = (1.0 / sum_w).sqrt();
    let weights = w.iter().map(|wi| 100.0 * wi / sum_w).collect();
    // I² and H² as metafor: about the "typical" sampling variance for a
    // random-effects model, from Q for the fixed-effect one.
    let (i2, h2) = if k <= 1 {
        (0.0, 1.0)
    } else if method == Method::FixedEffect {
        let i2 = (100.0 * (q - q_df as f64) / q).max(0.0);
        (i2, q / q_df as f64)
    } else {
        let w0: Vec<f64> = v.iter().map(|vi| 1.0 / vi).collect();
        let (s, s2) = (
            w0.iter().sum::<f64>(),
            w0.iter().map(|x| x * x).sum::<f64>(),
        );
        let typical = q_df as f64 * s / (s * s - s2);
        (100.0 * tau2 / (typical + tau2), (typical + tau2) / typical)
    };
    let alpha = 1.0 - level;
    let (statistic, p_value, quantile, t_df) = match test {
        Test::KnappHartung if k > 1 => {
            let residual: f64 = w.iter().zip(y).map(|(wi, yi)| wi * (yi - mu).powi(2)).sum();
            std_error *= (residual / q_df as f64).sqrt();
            let t = mu / std_error;
            let df = q_df as f64;
            (
                t,
                2.0 * t_sf(t.abs(), df),
                t_quantile(1.0 - alpha / 2.0, df),
                Some(q_df),
            )
        }
        _ => {
            let z = mu / std_error;
            (
                z,
                2.0 * normal_sf(z.abs()),
                normal_quantile(1.0 - alpha / 2.0),
                None,
            )
        }
    };
    let tau2_std_error = (method == Method::Reml && k > 1).then(|| {
        let (_, trace_pp, _) = reml_terms(y, &v, tau2);
        (2.0 / trace_pp).sqrt()
    });
    Pooled {
        estimate: mu,
        std_error,
        statistic,
        p_value,
        conf_low: mu - quantile * std_error,
        conf_high: mu + quantile * std_error,
        tau2,
        tau2_std_error,
        i2,
        h2,
        q,
        q_df,
        q_p_value: if k <= 1 {
            1.0
        } else {
            chi_squared_sf(q, q_df as f64)
        },
        t_df,
        weights,
        log_likelihood: log_likelihood(y, &v, tau2, method),
        deviance: deviance(y, &v, tau2, method),
    }
}

/// metafor's deviance of the model at τ².
fn deviance(y: &[f64], v: &[f64], tau2: f64, method: Method) -> f64 {
    if method == Method::Reml {
        return -2.0 * log_likelihood(y, v, tau2, method);
    }
    // −2 (logLik − the saturated model's at τ² = 0), as metafor.
    let saturated: f64 = v
        .iter()
        .map(|vi| -0.5 * (2.0 * std::f64::consts::PI * vi).ln())
        .sum();
    -2.0 * (log_likelihood(y, v, tau2, method) - saturated)
}

/// metafor's `logLik`: restricted for REML, full otherwise.
fn log_likelihood(y: &[f64], v: &[f64], tau2: f64, method: Method) -> f64 {
    let k = y.len() as f64;
    let (mu, sum_w, w) = pool_at(y, v, tau2);
    let rss: f64 = w.iter().zip(y).map(|(wi, yi)| wi * (yi - mu).powi(2)).sum();
    let log_det: f64 = v.iter().map(|vi| (vi + tau2).ln()).sum();
    let ln_2pi = (2.0 * std::f64::consts::PI).ln();
    if method == Method::Reml {
        // metafor's restricted likelihood keeps the + ½ log|X'X| term (X = 1).
        -0.5 * (k - 1.0) * ln_2pi + 0.5 * k.ln() - 0.5 * log_det - 0.5 * sum_w.ln() - 0.5 * rss
    } else {
        -0.5 * k * ln_2pi - 0.5 * log_det - 0.5 * rss
    }
}

#[cfg(test)]
#[allow(clippy::excessive_precision)] // metafor's 17 printed digits
mod tests {
    use super::*;

    // metafor 3.8.1: rma(yi, sei = sei, method = …, control = list(threshold
    // = 1e-14, tol = 1e-15)) on these four studies.
    const Y: [f64; 4] = [0.5, 1.2, -0.3, 0.8];
    const SE: [f64; 4] = [0.3, 0.5, 0.4, 0.2];

    fn close(what: &str, got: f64, want: f64, tolerance: f64) {
        let err = (got - want).abs() / want.abs().max(1e-300);
        assert!(
            err <= tolerance,
            "{what}: got {got:.17e}, metafor {want:.17e}"
        );
    }

    #[test]
    fn reml_matches_metafor_run_to_convergence() {
        let r = pool(&Y, &SE, Method::Reml, Test::Z, 0.95);
        close("tau2", r.tau2, 0.177_353_623_021_136_03, 1e-9);
        close("I2", r.i2, 63.183_236_181_221_261, 1e-9);
        close("estimate", r.estimate, 0.547_402_674_457_877_49, 1e-9);
        close("se", r.std_error, 0.270_711_668_063_217_06, 1e-9);
        close("Q", r.q, 7.604_104_254_043_337_1, 1e-12);
    }

    #[test]
    fn paule_mandel_and_knapp_hartung_match_metafor() {
        let r = pool(&Y, &SE, Method::PauleMandel, Test::Z, 0.95);
        close("tau2", r.tau2, 0.226_259_981_507_557_94, 1e-9);
        let k = pool(&Y, &SE, Method::FixedEffect, Test::KnappHartung, 0.95);
        close("FE knha se", k.std_error, 0.233_822_600_313_431_97, 1e-12);
        close("FE knha p", k.p_value, 0.078_507_651_591_446_348, 1e-10);
        close("FE I2", k.i2, 60.547_621_392_691_809, 1e-12);
    }

    #[test]
    fn one_site_is_its_own_estimate_with_no_heterogeneity() {
        let r = pool(&[0.5], &[0.3], Method::Reml, Test::Z, 0.95);
        assert_eq!((r.estimate, r.std_error, r.tau2, r.q), (0.5, 0.3, 0.0, 0.0));
        assert_eq!((r.i2, r.q_df, r.q_p_value), (0.0, 0, 1.0));
        assert_eq!(r.weights, vec![100.0]);
    }

    #[test]
    fn homogeneous_sites_give_tau2_zero() {
        for method in [Method::Reml, Method::DerSimonianLaird, Method::PauleMandel] {
            let r = pool(&[1.0, 1.01, 0.99], &[0.5, 0.4, 0.6], method, Test::Z, 0.95);
            assert_eq!(r.tau2, 0.0, "{method:?}");
        }
    }
}
