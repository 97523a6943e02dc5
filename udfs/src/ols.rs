//! Ordinary least squares from merged co-moments: the decoder of `lm`.
//!
//! With an intercept the fit is solved in centered form — slopes from
//! `Sxx β = Sxy` (the centered cross products), the intercept from the
//! means — which is what keeps ill-conditioned designs such as the Longley
//! data (condition number ~5e9 with the intercept) at full precision. Without
//! an intercept the raw blocks X'X, X'y are rebuilt from the moments.
//! Aliased (linearly dependent) columns get no estimate, as R reports NA.

use nalgebra::{DMatrix, DVector};

use crate::comoments::CoMoments;
use crate::linalg::{
    ALIAS_TOLERANCE, aliased_columns, inverse_spd, select, select_vector, solve_spd,
};
use crate::normal_equations::INTERCEPT;

/// A least-squares fit.
#[derive(Debug, Clone)]
pub struct OlsFit {
    /// Term names, the intercept first when there is one.
    pub terms: Vec<String>,
    /// Estimates; `None` for aliased terms.
    pub estimate: Vec<Option<f64>>,
    /// Standard errors; `None` for aliased terms or without residual df.
    pub std_error: Vec<Option<f64>>,
    /// Rows used.
    pub nobs: u64,
    /// Number of estimated (non-aliased) coefficients.
    pub rank: usize,
    pub intercept: bool,
    /// Residual sum of squares.
    pub rss: f64,
    /// Total sum of squares: about the mean with an intercept, about zero without.
    pub tss: f64,
    /// The estimated covariance matrix of the estimates, in the order of
    /// `terms` (R's `vcov()`); `None` where a term is aliased or without
    /// residual degrees of freedom.
    pub covariance: Vec<Vec<Option<f64>>>,
}

impl OlsFit {
    /// Residual degrees of freedom, n − rank.
    pub fn df_residual(&self) -> f64 {
        self.nobs as f64 - self.rank as f64
    }

    /// Model degrees of freedom, rank less the intercept.
    pub fn df_model(&self) -> f64 {
        self.rank as f64 - if self.intercept { 1.0 } else { 0.0 }
    }

    /// Residual standard error, √(RSS / df_residual).
    pub fn sigma(&self) -> f64 {
        (self.rss / self.df_residual()).sqrt()
    }

    /// R² (uncentered without an intercept, as R computes it).
    pub fn r_squared(&self) -> f64 {
        1.0 - self.rss / self.tss
    }

    /// Adjusted R², 1 − (1 − R²)(n − i)/df_residual with i = 1 for an intercept.
    pub fn adj_r_squared(&self) -> f64 {
        let i = if self.intercept { 1.0 } else { 0.0 };
        1.0 - (1.0 - self.r_squared()) * (self.nobs as f64 - i) / self.df_residual()
    }

    /// The F statistic of the model against the intercept-only (or empty) model.
    pub fn f_statistic(&self) -> f64 {
        ((self.tss - self.rss) / self.df_model()) / (self.rss / self.df_residual())
    }

    /// Gaussian log-likelihood at the MLE of σ², as R's `logLik.lm`.
    pub fn log_likelihood(&self) -> f64 {
        let n = self.nobs as f64;
        -0.5 * n * ((2.0 * std::f64::consts::PI).ln() + (self.rss / n).ln() + 1.0)
    }

    /// AIC as R: −2 logLik + 2 (rank + 1), the +1 for σ.
    pub fn aic(&self) -> f64 {
        -2.0 * self.log_likelihood() + 2.0 * (self.rank as f64 + 1.0)
    }

    /// BIC as R: −2 logLik + log(n) (rank + 1).
    pub fn bic(&self) -> f64 {
        -2.0 * self.log_likelihood() + (self.nobs as f64).ln() * (self.rank as f64 + 1.0)
    }
}

/// Fits y on x from the co-moments of (y, x1, ..., xk); `x_names` names x.
pub fn fit_ols(state: &CoMoments, x_names: &[String], intercept: bool) -> Result<OlsFit, String> {
    let k = state.p() - 1;
    if x_names.len() != k {
        return Err(format!("{} names for {k} regressors", x_names.len()));
    }
    if state.n == 0 {
        return Err(
            "no rows left: every row has a NULL in a used column, or the filter kept none".into(),
        );
    }
    let n = state.n as f64;
    let m2 = crate::linalg::to_dmatrix(&state.m2);
    let ybar = state.mean[0];
    let xbar = DVector::from_iterator(k, state.mean.iter().skip(1).copied());
    let sxx = m2.view((1, 1), (k, k)).into_owned();
    let sxy = DVector::from_iterator(k, (1..=k).map(|i| m2[(i, 0)]));
    let syy = m2[(0, 0)];

    // Without an intercept, work on the raw blocks X'X, X'y, y'y.
    let (gram, cross, yy) = if intercept {
        (sxx, sxy, syy)
    } else {
        (
            &sxx + &xbar * xbar.transpose() * n,
            &sxy + &xbar * (n * ybar),
            syy + n * ybar * ybar,
        )
    };
    let aliased = aliased_columns(&gram, ALIAS_TOLERANCE);
    let kept: Vec<usize> = (0..k).filter(|&j| !aliased[j]).collect();
    let gram_kept = select(&gram, &kept);
    let cross_kept = select_vector(&cross, &kept);
    let (beta, inverse) = if kept.is_empty() {
        (DVector::zeros(0), DMatrix::zeros(0, 0))
    } else {
        let beta = solve_spd(&gram_kept, &cross_kept)
            .ok_or("the design is singular after removing aliased terms")?;
        let inverse =
            inverse_spd(&gram_kept).ok_or("the design is singular after removing aliased terms")?;
        (beta, inverse)
    };
    let rss = (yy - beta.dot(&cross_kept)).max(0.0);
    let rank = kept.len() + usize::from(intercept);
    let df_residual = n - rank as f64;
    let sigma2 = (df_residual > 0.0).then(|| rss / df_residual);

    let mut terms = Vec::with_capacity(k + 1);
    let mut estimate = Vec::with_capacity(k + 1);
    let mut std_error = Vec::with_capacity(k + 1);
    if intercept {
        let xbar_kept = select_vector(&xbar, &kept);
        terms.push(INTERCEPT.to_string());
        estimate.push(Some(ybar - xbar_kept.dot(&beta)));
        std_error.push(sigma2.map(|s2| {
            (s2 * (1.0 / n + (xbar_kept.transpose() * &inverse * &xbar_kept)[(0, 0)])).sqrt()
        }));
    }
    // Position of each term's row in the kept inverse (`None`: aliased),
    // the intercept first when there is one.
    let mut slot: Vec<Option<usize>> = Vec::with_capacity(k + 1);
    if intercept {
        slot.push(None);
    }
    let mut next_kept = 0;
    for &a in &aliased {
        slot.push((!a).then(|| {
            next_kept += 1;
            next_kept - 1
        }));
    }
    let xbar_kept = select_vector(&xbar, &kept);
    // With an intercept: Var(b0) = s²(1/n + x̄'S⁻¹x̄), Cov(b0, b) = −s² S⁻¹x̄.
    let inverse_xbar = &inverse * &xbar_kept;
    let covariance: Vec<Vec<Option<f64>>> = (0..slot.len())
        .map(|a| {
            (0..slot.len())
                .map(|b| {
                    let s2 = sigma2?;
                    let is_intercept = |t: usize| intercept && t == 0;
                    match (is_intercept(a), is_intercept(b)) {
                        (true, true) => Some(s2 * (1.0 / n + xbar_kept.dot(&inverse_xbar))),
                        (true, false) => Some(-s2 * inverse_xbar[slot[b]?]),
                        (false, true) => Some(-s2 * inverse_xbar[slot[a]?]),
                        (false, false) => Some(s2 * inverse[(slot[a]?, slot[b]?)]),
                    }
                })
                .collect()
        })
        .collect();
    let mut next = 0;
    for (j, name) in x_names.iter().enumerate() {
        terms.push(name.clone());
        if aliased[j] {
            estimate.push(None);
            std_error.push(None);
        } else {
            estimate.push(Some(beta[next]));
            std_error.push(sigma2.map(|s2| (s2 * inverse[(next, next)]).sqrt()));
            next += 1;
        }
    }
    Ok(OlsFit {
        terms,
        estimate,
        std_error,
        nobs: state.n,
        rank,
        intercept,
        rss,
        tss: yy,
        covariance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// y = 1 + 2 x1 − 3 x2 exactly, plus a little noise on three rows.
    fn rows() -> Array2<f64> {
        let mut z = Array2::zeros((8, 3));
        for i in 0..8 {
            let (x1, x2) = (i as f64, ((i * i) % 5) as f64);
            let noise = [0.1, -0.2, 0.0, 0.05, 0.0, -0.1, 0.15, 0.0][i];
            z[[i, 0]] = 1.0 + 2.0 * x1 - 3.0 * x2 + noise;
            z[[i, 1]] = x1;
            z[[i, 2]] = x2;
        }
        z
    }

    fn names() -> Vec<String> {
        vec!["x1".into(), "x2".into()]
    }

    #[test]
    fn recovers_coefficients_and_matches_normal_equations() {
        let fit = fit_ols(&CoMoments::of_rows(rows().view()), &names(), true).unwrap();
        // Reference: solve the raw normal equations directly for this tiny, well-conditioned case.
        let z = rows();
        let x = DMatrix::from_fn(8, 3, |i, j| if j == 0 { 1.0 } else { z[[i, j]] });
        let y = DVector::from_iterator(8, z.column(0).iter().copied());
        let beta = (x.transpose() * &x).try_inverse().unwrap() * x.transpose() * &y;
        for (got, want) in fit.estimate.iter().zip(beta.iter()) {
            assert!((got.unwrap() - want).abs() < 1e-10, "{got:?} vs {want}");
        }
        let residuals = &y - &x * &beta;
        assert!((fit.rss - residuals.dot(&residuals)).abs() < 1e-10);
        assert_eq!((fit.rank, fit.df_residual()), (3, 5.0));
    }

    #[test]
    fn an_aliased_term_gets_no_estimate() {
        let z = rows();
        let mut with_copy = Array2::zeros((8, 4));
        for i in 0..8 {
            for j in 0..3 {
                with_copy[[i, j]] = z[[i, j]];
            }
            with_copy[[i, 3]] = z[[i, 1]] + z[[i, 2]];
        }
        let names = vec!["x1".into(), "x2".into(), "x3".into()];
        let fit = fit_ols(&CoMoments::of_rows(with_copy.view()), &names, true).unwrap();
        let plain = fit_ols(
            &CoMoments::of_rows(rows().view()),
            &super::tests::names(),
            true,
        )
        .unwrap();
        assert_eq!(fit.estimate[3], None);
        assert_eq!(fit.rank, 3);
        for j in 0..3 {
            assert!((fit.estimate[j].unwrap() - plain.estimate[j].unwrap()).abs() < 1e-10);
        }
    }

    #[test]
    fn no_rows_is_an_error() {
        assert!(
            fit_ols(&CoMoments::new(3), &names(), true)
                .unwrap_err()
                .contains("no rows")
        );
    }
}
