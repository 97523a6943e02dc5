//! The row-wise part of an IRLS round for the two fits most analyses run,
//! logistic regression on 0/1 responses (binomial, logit link) and poisson
//! regression (log link), four rows at a time with vectorized `exp` and
//! `log` ([`crate::lanes`]) instead of a libm call and a branch per row.
//!
//! A block of rows takes this path only when every row is one the path
//! handles as the general code would: a positive finite weight, a
//! response in the family's range (and one trial for the binomial), and η
//! where R's clamps do not apply (|η| ≤ 30 for the logit, |η| ≤ 700 for
//! the log link), which the pass checks as it goes. Any other block, and
//! the last rows of a block that do not fill four lanes, go through the
//! general row loop. The values agree with it to a few units in the last
//! place; the order of the additions depends only on the rows, never on
//! threads.
//!
//! A logistic block whose prior weights are all 1 (a fit without
//! weights) takes the log-likelihood's logarithm once per
//! [`FACTORS_PER_LOG`] rows of a lane: Σ ln p is ln Π p, and the
//! product of that many probabilities of admitted rows cannot underflow.

use crate::family::{Family, Link, WholeLogs, whole_logs};
pub use crate::lanes::LANES;
use crate::lanes::{self, Lanes, Vec4, WithLanes};
/// R's logit threshold: beyond it μ is clamped (the general path).
const LOGIT_THRESH: f64 = 30.0;
/// Beyond this |η| the log link's exp over- or underflows towards its clamp.
const LOG_THRESH: f64 = 700.0;
/// Rows of a lane whose probabilities are multiplied before one
/// logarithm of their product (logistic rows of unit weight). An admitted
/// row's probability is at least 1/(1 + e³⁰) > 9.3e-14 (|η| ≤ 30; from
/// R's `mustart` at unit weight it is 1/4 or 3/4), so a product of 16 is
/// above 3e-209, far from the smallest normal double (2.2e-308).
pub const FACTORS_PER_LOG: usize = 16;

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
    pub trials: &'a [f64],
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

    /// The row-wise part: the rows' sums, and each row's working weight
    /// and weighted working response; over the lanes [`lanes::dispatch`]
    /// picks (the same operations either way). `None` when a row is not
    /// one this pass admits (see the module's comment; checked in the
    /// same pass): the caller then takes the general loop for the block,
    /// and `working` and `wz` hold nothing of use.
    pub fn add_rows(
        self,
        rows: CanonicalRows,
        working: &mut [f64],
        wz: &mut [f64],
    ) -> Option<RowSums> {
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
    type Output = Option<RowSums>;

    #[inline(always)]
    fn run<L: Lanes>(self, lanes: L) -> Option<RowSums> {
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
) -> Option<RowSums> {
    debug_assert_eq!(rows.y.len() % LANES, 0);
    // One loop for each family and start, each compiled with its own
    // constants (no tests of either inside the loop). Whether logarithms
    // come from products is the same for every row of the block: a branch
    // the processor predicts (and no more copies of the loop, whose
    // frames an unoptimized build keeps apart on the stack).
    use Canonical::{Logistic, PoissonLog};
    let products = kind == Logistic && rows.weight.iter().all(|&w| w == 1.0);
    let from_start = CanonicalRows { eta: None, ..rows };
    match (kind, rows.eta) {
        (Logistic, Some(eta)) => {
            let rows = CanonicalRows {
                eta: Some(eta),
                ..rows
            };
            add_groups(lanes, Logistic, products, rows, working, wz)
        }
        (PoissonLog, Some(eta)) => {
            let rows = CanonicalRows {
                eta: Some(eta),
                ..rows
            };
            add_groups(lanes, PoissonLog, false, rows, working, wz)
        }
        (Logistic, None) => add_groups(lanes, Logistic, products, from_start, working, wz),
        (PoissonLog, None) => add_groups(lanes, PoissonLog, false, from_start, working, wz),
    }
}

/// [`add_rows_with`] for one family and start; with `products` (logistic
/// rows of unit weight) the log-likelihood is the sum of the logarithms
/// of [`Products`] instead of a logarithm per row.
#[inline(always)]
fn add_groups<L: Lanes>(
    lanes: L,
    kind: Canonical,
    products: bool,
    rows: CanonicalRows,
    working: &mut [f64],
    wz: &mut [f64],
) -> Option<RowSums> {
    let logs = whole_logs();
    let zero = Vec4::splat(lanes, 0.0);
    let mut sums = [zero; 8];
    let mut product = Products::new(lanes);
    // Two groups of four rows at a time: their long chains of dependent
    // operations (exp, divisions, ln) interleave; each group's terms are
    // still added in row order.
    let groups = rows.y.len() / LANES;
    let mut g = 0;
    while g + 2 <= groups {
        let (r0, r1) = (g * LANES, (g + 1) * LANES);
        let (a, b) = (
            row_terms(lanes, kind, products, logs, &rows, r0),
            row_terms(lanes, kind, products, logs, &rows, r1),
        );
        a.add_to(&mut sums, working, wz, r0);
        b.add_to(&mut sums, working, wz, r1);
        if products {
            product.take(a.p);
            product.take(b.p);
        }
        g += 2;
    }
    if g < groups {
        let r = g * LANES;
        let a = row_terms(lanes, kind, products, logs, &rows, r);
        a.add_to(&mut sums, working, wz, r);
        if products {
            product.take(a.p);
        }
    }
    if products {
        // Unit weights: the log-likelihood is Σ ln p, the deviance −2 times
        // it (exactly: the lanes of both sums are zero).
        let log_p = product.logs();
        sums[3] = Vec4::splat(lanes, -2.0) * log_p;
        sums[4] = log_p;
    }
    let [
        n,
        sum_w,
        sum_wy,
        deviance,
        log_pmf,
        pearson,
        boundary,
        rejected,
    ] = sums.map(|s| s.sum());
    (rejected == 0.0).then_some(RowSums {
        n,
        sum_w,
        sum_wy,
        deviance,
        log_pmf,
        pearson,
        boundary,
    })
}

/// Σ ln p over a lane's rows as the logarithms of products of
/// [`FACTORS_PER_LOG`] rows each, in row order.
struct Products<L: Lanes> {
    product: Vec4<L>,
    factors: usize,
    logs: Vec4<L>,
}

impl<L: Lanes> Products<L> {
    #[inline(always)]
    fn new(lanes: L) -> Self {
        Self {
            product: Vec4::splat(lanes, 1.0),
            factors: 0,
            logs: Vec4::splat(lanes, 0.0),
        }
    }

    /// Multiplies in the next row of each lane.
    #[inline(always)]
    fn take(&mut self, p: Vec4<L>) {
        self.product = self.product * p;
        self.factors += 1;
        if self.factors == FACTORS_PER_LOG {
            self.logs += self.product.ln();
            self.product = Vec4::splat(p.lanes(), 1.0);
            self.factors = 0;
        }
    }

    /// Σ ln p of every row taken, per lane.
    #[inline(always)]
    fn logs(self) -> Vec4<L> {
        match self.factors {
            0 => self.logs,
            _ => self.logs + self.product.ln(),
        }
    }
}

/// One group of four rows' terms of the sums, working weights and
/// weighted working responses.
#[derive(Clone, Copy)]
struct Terms<L: Lanes> {
    w: Vec4<L>,
    wy: Vec4<L>,
    deviance: Vec4<L>,
    log_pmf: Vec4<L>,
    pearson: Vec4<L>,
    boundary: Vec4<L>,
    /// 1 in the lanes of rows this pass does not admit.
    rejected: Vec4<L>,
    weighted: Vec4<L>,
    wz: Vec4<L>,
    /// The logistic rows' probability of their response, μ or 1 − μ,
    /// when their logarithms are taken from products (`deviance` and
    /// `log_pmf` are then zero).
    p: Vec4<L>,
}

impl<L: Lanes> Terms<L> {
    /// Adds the terms to `sums` (n, Σw, Σwy, deviance, log-likelihood,
    /// Pearson, boundary, rows not admitted) and writes the group's
    /// working weights and weighted working responses from row `r` on.
    #[inline(always)]
    fn add_to(&self, sums: &mut [Vec4<L>; 8], working: &mut [f64], wz: &mut [f64], r: usize) {
        let one = Vec4::splat(self.w.lanes(), 1.0);
        let terms = [
            one,
            self.w,
            self.wy,
            self.deviance,
            self.log_pmf,
            self.pearson,
            self.boundary,
            self.rejected,
        ];
        for (sum, term) in sums.iter_mut().zip(terms) {
            *sum += term;
        }
        self.weighted.store(working, r);
        self.wz.store(wz, r);
    }
}

#[inline(always)]
fn row_terms<L: Lanes>(
    lanes: L,
    kind: Canonical,
    products: bool,
    logs: &WholeLogs,
    rows: &CanonicalRows,
    r: usize,
) -> Terms<L> {
    let c = |v: f64| Vec4::splat(lanes, v);
    let load = |values: &[f64], r: usize| Vec4::load(lanes, values, r);
    let (zero, one) = (c(0.0), c(1.0));
    let (yv, w) = (load(rows.y, r), load(rows.weight, r));
    // The rows this pass handles as the general loop would (see the
    // module's comment); a start from `mustart` keeps η inside the clamps.
    let weighted_row = w.gt(zero) & w.lt(c(f64::INFINITY));
    let admitted = match kind {
        Canonical::Logistic => {
            let (y_01, one_trial) = (yv.eq(zero) | yv.eq(one), load(rows.trials, r).eq(one));
            weighted_row & y_01 & one_trial
        }
        Canonical::PoissonLog => weighted_row & zero.le(yv) & yv.lt(c(f64::INFINITY)),
    };
    let admitted = match rows.eta {
        Some(eta) => {
            let (eta, threshold) = (
                load(eta, r),
                match kind {
                    Canonical::Logistic => LOGIT_THRESH,
                    Canonical::PoissonLog => LOG_THRESH,
                },
            );
            admitted & eta.le(c(threshold)) & c(-threshold).le(eta)
        }
        None => admitted,
    };
    // η, and μ when it is R's `mustart` rather than g⁻¹(η).
    let (e_eta, start) = match rows.eta {
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
    let mut p = one;
    let (mu, mu_eta, variance, at_boundary, deviance, log_pmf) = match kind {
        Canonical::Logistic => {
            // μ exactly as R's e/(1+e): log(1 − μ) near μ = 1 depends
            // on its last bit.
            let opexp = one + e;
            let mu = start.unwrap_or(e / opexp);
            // μ or 1 − μ, whose logarithm R's binomial deviance has.
            p = yv.eq(one).select(mu, one - mu);
            let edge = c(10.0 * f64::EPSILON);
            let at_boundary = mu.lt(edge) | mu.gt(one - edge);
            let (deviance, log_pmf) = if products {
                (zero, zero)
            } else {
                let log_p = p.ln();
                (c(-2.0) * w * log_p, w * log_p)
            };
            (
                mu,
                e / (opexp * opexp),
                mu * (one - mu),
                at_boundary,
                deviance,
                log_pmf,
            )
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
            // y log y is 0 at y = 0 (where log y is −∞).
            let ln_y = Vec4::chunk(lanes, &[of[0].0, of[1].0, of[2].0, of[3].0]);
            let y_log_y = yv.gt(zero).select(yv * ln_y, zero);
            let ln_y_factorial = Vec4::chunk(lanes, &[of[0].1, of[1].1, of[2].1, of[3].1]);
            let at_boundary = mu.lt(c(10.0 * f64::EPSILON));
            (
                mu,
                mu_eta,
                mu,
                at_boundary,
                c(2.0) * w * (y_log_y - yv * log_mu - (yv - mu)),
                w * (yv * log_mu - mu - ln_y_factorial),
            )
        }
    };
    let residual = yv - mu;
    // Pearson's term and the working weight share one division by V(μ).
    let over_variance = one / variance;
    let z = (e_eta - load(rows.offset, r)) + residual / mu_eta;
    let weighted = w * mu_eta * mu_eta * over_variance;
    // A row whose weight cannot be formed does not enter X'WX.
    let usable = mu_eta.gt(zero) & variance.gt(zero) & variance.is_finite();
    let weighted = usable.select(weighted, zero);
    Terms {
        w,
        wy: w * yv,
        deviance,
        log_pmf,
        pearson: w * residual * residual * over_variance,
        boundary: at_boundary.select(one, zero),
        rejected: admitted.select(zero, one),
        weighted,
        wz: weighted * z,
        p,
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
}
