//! The row-wise part of an IRLS round for the two fits most analyses run,
//! logistic regression on 0/1 responses (binomial, logit link) and poisson
//! regression (log link), four rows at a time with vectorized `exp` and
//! `log` ([`crate::lanes`]) instead of a libm call and a branch per row.
//!
//! A block of rows takes this path only when every row is one the path
//! handles as the general code would: a positive finite weight, a
//! response in the family's range (and one trial for the binomial), and η
//! where R's clamps do not apply (|η| ≤ 30 for the logit, |η| ≤ 700 for
//! the log link). Any other block, and the last rows of a block that do
//! not fill four lanes, go through the general row loop. The values agree
//! with it to a few units in the last place; the order of the additions
//! depends only on the rows, never on threads.

use crate::family::{Family, Link, whole_logs};
pub use crate::lanes::LANES;
use crate::lanes::{self, Lanes, Vec4, WithLanes};
/// R's logit threshold: beyond it μ is clamped (the general path).
const LOGIT_THRESH: f64 = 30.0;
/// Beyond this |η| the log link's exp over- or underflows towards its clamp.
const LOG_THRESH: f64 = 700.0;

/// A family and link with a vectorized row pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canonical {
    /// Binomial with the logit link.
    Logistic,
    /// Poisson with the log link.
    PoissonLog,
}

/// The sums of the row-wise part over the rows of a block.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct RowSums {
    pub n: f64,
    pub sum_w: f64,
    pub sum_wy: f64,
    pub deviance: f64,
    pub log_pmf: f64,
    pub pearson: f64,
    pub boundary: f64,
}

/// One block's rows for the vectorized pass; all slices have the same
/// length, a multiple of [`LANES`]. Without η (the first round) each row
/// starts from R's `mustart`, as in the general loop.
pub struct CanonicalRows<'a> {
    pub y: &'a [f64],
    pub offset: &'a [f64],
    pub weight: &'a [f64],
    pub eta: Option<&'a [f64]>,
}

impl Canonical {
    /// The vectorized pass for a family and link, if it has one.
    pub fn of(family: Family, link: Link) -> Option<Self> {
        match (family, link) {
            (Family::Binomial, Link::Logit) => Some(Self::Logistic),
            (Family::Poisson, Link::Log) => Some(Self::PoissonLog),
            _ => None,
        }
    }

    /// Whether every row takes this pass (see the module's comment).
    pub fn admits(self, y: &[f64], trials: &[f64], weight: &[f64], eta: Option<&[f64]>) -> bool {
        let threshold = match self {
            Self::Logistic => LOGIT_THRESH,
            Self::PoissonLog => LOG_THRESH,
        };
        // A start from `mustart` keeps η finite and inside the clamps.
        // `&` rather than `&&`: no branch per row, so the checks vectorize.
        let eta_inside =
            eta.is_none_or(|eta| eta.iter().fold(true, |all, e| all & (e.abs() <= threshold)));
        let rows = y.iter().zip(trials).zip(weight);
        let rows_inside = match self {
            Self::Logistic => rows.fold(true, |all, ((&y, &t), &w)| {
                all & (t == 1.0) & ((y == 0.0) | (y == 1.0)) & (w > 0.0) & (w < f64::INFINITY)
            }),
            Self::PoissonLog => rows.fold(true, |all, ((&y, _), &w)| {
                all & (0.0..f64::INFINITY).contains(&y) & (w > 0.0) & (w < f64::INFINITY)
            }),
        };
        eta_inside && rows_inside
    }

    /// The row-wise part over admitted rows: their sums, and each row's
    /// working weight and weighted working response; over the lanes
    /// [`lanes::dispatch`] picks (the same operations either way).
    pub fn add_rows(self, rows: CanonicalRows, working: &mut [f64], wz: &mut [f64]) -> RowSums {
        lanes::dispatch(AddRows {
            kind: self,
            rows,
            working,
            wz,
        })
    }
}

/// The arguments of [`Canonical::add_rows`].
struct AddRows<'a> {
    kind: Canonical,
    rows: CanonicalRows<'a>,
    working: &'a mut [f64],
    wz: &'a mut [f64],
}

impl WithLanes for AddRows<'_> {
    type Output = RowSums;

    #[inline(always)]
    fn run<L: Lanes>(self, lanes: L) -> RowSums {
        let AddRows {
            kind,
            rows,
            working,
            wz,
        } = self;
        add_rows_with(lanes, kind, rows, working, wz)
    }
}

#[inline(always)]
fn add_rows_with<L: Lanes>(
    lanes: L,
    kind: Canonical,
    rows: CanonicalRows,
    working: &mut [f64],
    wz: &mut [f64],
) -> RowSums {
    let CanonicalRows {
        y,
        offset,
        weight,
        eta,
    } = rows;
    debug_assert_eq!(y.len() % LANES, 0);
    let c = |v: f64| Vec4::splat(lanes, v);
    let load = |values: &[f64], r: usize| Vec4::load(lanes, values, r);
    let (zero, one) = (c(0.0), c(1.0));
    let logs = whole_logs();
    let (mut n, mut sum_w, mut sum_wy) = (zero, zero, zero);
    let (mut deviance, mut log_pmf, mut pearson, mut boundary) = (zero, zero, zero, zero);
    for r in (0..y.len()).step_by(LANES) {
        let (yv, w) = (load(y, r), load(weight, r));
        // η, and μ when it is R's `mustart` rather than g⁻¹(η).
        let (e_eta, start) = match eta {
            Some(eta) => (load(eta, r), None),
            None => {
                let mu = match kind {
                    Canonical::Logistic => (w * yv + c(0.5)) / (w + one),
                    Canonical::PoissonLog => yv + c(0.1),
                };
                let eta = match kind {
                    Canonical::Logistic => (mu / (one - mu)).ln(),
                    Canonical::PoissonLog => mu.ln(),
                };
                (eta, Some(mu))
            }
        };
        let e = e_eta.exp();
        let (mu, mu_eta, variance, at_boundary) = match kind {
            Canonical::Logistic => {
                // μ exactly as R's e/(1+e): log(1 − μ) near μ = 1 depends
                // on its last bit.
                let opexp = one + e;
                let mu = start.unwrap_or(e / opexp);
                // log μ or log(1 − μ), as R's binomial deviance has them.
                let log_p = yv.eq(one).select(mu, one - mu).ln();
                deviance += c(-2.0) * w * log_p;
                log_pmf += w * log_p;
                let edge = c(10.0 * f64::EPSILON);
                let at_boundary = mu.lt(edge) | mu.gt(one - edge);
                (mu, e / (opexp * opexp), mu * (one - mu), at_boundary)
            }
            Canonical::PoissonLog => {
                let eps = c(f64::EPSILON);
                let mu_eta = e.max(eps);
                let mu = start.unwrap_or(mu_eta);
                // log μ = η unless μ is clamped at eps.
                let log_mu = mu.gt(eps).select(e_eta, c(f64::EPSILON.ln()));
                // y log y and log y! (one table check per row).
                let ys = yv.to_array();
                let of = [
                    logs.of(ys[0]),
                    logs.of(ys[1]),
                    logs.of(ys[2]),
                    logs.of(ys[3]),
                ];
                let y_log_y: [f64; LANES] =
                    std::array::from_fn(|l| if ys[l] > 0.0 { ys[l] * of[l].0 } else { 0.0 });
                let y_log_y = Vec4::chunk(lanes, &y_log_y);
                let ln_y_factorial = Vec4::chunk(lanes, &[of[0].1, of[1].1, of[2].1, of[3].1]);
                deviance += c(2.0) * w * (y_log_y - yv * log_mu - (yv - mu));
                log_pmf += w * (yv * log_mu - mu - ln_y_factorial);
                let at_boundary = mu.lt(c(10.0 * f64::EPSILON));
                (mu, mu_eta, mu, at_boundary)
            }
        };
        n += one;
        sum_w += w;
        sum_wy += w * yv;
        let residual = yv - mu;
        // Pearson's term and the working weight share one division by V(μ).
        let over_variance = one / variance;
        pearson += w * residual * residual * over_variance;
        boundary += at_boundary.select(one, zero);
        let z = (e_eta - load(offset, r)) + residual / mu_eta;
        let weighted = w * mu_eta * mu_eta * over_variance;
        // A row whose weight cannot be formed does not enter X'WX.
        let usable = mu_eta.gt(zero) & variance.gt(zero) & variance.is_finite();
        let weighted = usable.select(weighted, zero);
        weighted.store(working, r);
        (weighted * z).store(wz, r);
    }
    RowSums {
        n: n.sum(),
        sum_w: sum_w.sum(),
        sum_wy: sum_wy.sum(),
        deviance: deviance.sum(),
        log_pmf: log_pmf.sum(),
        pearson: pearson.sum(),
        boundary: boundary.sum(),
    }
}

#[cfg(test)]
mod tests {
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

    fn check(kind: Canonical, y: &[f64], eta: Option<&[f64]>) {
        let rows = y.len();
        let weight: Vec<f64> = (0..rows).map(|i| 0.5 + (i % 3) as f64).collect();
        let offset: Vec<f64> = (0..rows).map(|i| 0.01 * i as f64).collect();
        let trials = vec![1.0; rows];
        assert!(kind.admits(y, &trials, &weight, eta));
        let given = CanonicalRows {
            y,
            offset: &offset,
            weight: &weight,
            eta,
        };
        let (mut working, mut wz) = (vec![0.0; rows], vec![0.0; rows]);
        let sums = kind.add_rows(
            CanonicalRows {
                y,
                offset: &offset,
                weight: &weight,
                eta,
            },
            &mut working,
            &mut wz,
        );
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

    #[test]
    fn poisson_rows_agree_with_the_general_formulas() {
        let eta: Vec<f64> = (0..64).map(|i| -20.0 + 0.5 * i as f64).collect();
        let y: Vec<f64> = (0..64).map(|i| ((i * 5) % 11) as f64).collect();
        check(Canonical::PoissonLog, &y, Some(&eta));
        check(Canonical::PoissonLog, &y, None);
    }

    #[test]
    fn rows_the_general_path_must_handle_are_not_admitted() {
        let ok = [0.0, 1.0, 1.0, 0.0];
        let one = [1.0; 4];
        let eta = [0.1, -0.2, 0.3, 0.0];
        assert!(Canonical::Logistic.admits(&ok, &one, &one, Some(&eta)));
        // A proportion, two trials, a zero weight, a clamped or NaN η.
        assert!(!Canonical::Logistic.admits(&[0.5, 1.0, 1.0, 0.0], &one, &one, Some(&eta)));
        assert!(!Canonical::Logistic.admits(&ok, &[2.0, 1.0, 1.0, 1.0], &one, Some(&eta)));
        assert!(!Canonical::Logistic.admits(&ok, &one, &[0.0, 1.0, 1.0, 1.0], Some(&eta)));
        assert!(!Canonical::Logistic.admits(&ok, &one, &one, Some(&[31.0, 0.0, 0.0, 0.0])));
        assert!(!Canonical::Logistic.admits(&ok, &one, &one, Some(&[f64::NAN, 0.0, 0.0, 0.0])));
        // A negative or infinite count, an overflowing η.
        assert!(!Canonical::PoissonLog.admits(&[-1.0, 1.0, 1.0, 0.0], &one, &one, Some(&eta)));
        assert!(!Canonical::PoissonLog.admits(
            &[f64::INFINITY, 1.0, 1.0, 0.0],
            &one,
            &one,
            Some(&eta)
        ));
        assert!(!Canonical::PoissonLog.admits(&ok, &one, &one, Some(&[800.0, 0.0, 0.0, 0.0])));
    }
}
