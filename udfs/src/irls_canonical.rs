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
//!
//! Why this file is over 600 lines: it holds the canonical-link IRLS round's aggregate and its accumulator, which read together
//! (the style's one aggregate, one file); its tests are in a file of their own.

use crate::family::{Family, Link, WholeLogs, whole_count, whole_logs};
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
    let unit = || rows.weight.iter().all(|&w| w == 1.0);
    let products = kind == Logistic && unit();
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
        (Logistic, None) if products => add_logistic_start_groups(lanes, from_start, working, wz),
        (Logistic, None) => add_groups(lanes, Logistic, products, from_start, working, wz),
        (PoissonLog, None)
            if unit()
                && rows
                    .y
                    .iter()
                    .all(|&y| whole_count(y, START_COUNTS).is_some()) =>
        {
            add_poisson_start_groups(lanes, from_start, working, wz)
        }
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
    row_sums(lanes, sums, products.then_some(product))
}

/// The block's [`RowSums`] from its lane sums (n, Σw, Σwy, deviance,
/// log-likelihood, Pearson, boundary, rows not admitted), the deviance and
/// log-likelihood taken from `product` when the logarithms came from
/// products; `None` when a row was not admitted.
#[inline(always)]
fn row_sums<L: Lanes>(
    lanes: L,
    mut sums: [Vec4<L>; 8],
    product: Option<Products<L>>,
) -> Option<RowSums> {
    if let Some(product) = product {
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

/// [`add_groups`] for the first round of a logistic fit whose weights are
/// all 1. From R's `mustart` an admitted row's terms depend on its
/// response alone (0 or 1), but for z's offset: [`row_terms`] computes
/// the two sets once, for a group of rows with responses 0 and 1, and
/// each group of the block selects its lanes' terms and forms z from its
/// offsets as [`row_terms`] does. The same values to the bit, and the
/// same order of additions, without a logarithm, an exponential or a
/// division per row.
#[inline(always)]
fn add_logistic_start_groups<L: Lanes>(
    lanes: L,
    rows: CanonicalRows,
    working: &mut [f64],
    wz: &mut [f64],
) -> Option<RowSums> {
    let c = |v: f64| Vec4::splat(lanes, v);
    let (zero, one) = (c(0.0), c(1.0));
    let both = CanonicalRows {
        y: &[0.0, 1.0, 0.0, 1.0],
        trials: &[1.0; LANES],
        offset: &[0.0; LANES],
        weight: &[1.0; LANES],
        eta: None,
    };
    let terms = row_terms(lanes, Canonical::Logistic, true, whole_logs(), &both, 0);
    // A term's value for the responses 0 and 1.
    let pair = |v: Vec4<L>| {
        let v = v.to_array();
        (c(v[0]), c(v[1]))
    };
    let [eta, step, pearson, boundary, weighted, p] = [
        terms.eta,
        terms.step,
        terms.pearson,
        terms.boundary,
        terms.weighted,
        terms.p,
    ]
    .map(pair);
    let mut sums = [zero; 8];
    let mut product = Products::new(lanes);
    for r in (0..rows.y.len()).step_by(LANES) {
        let load = |values: &[f64]| Vec4::load(lanes, values, r);
        let (yv, w) = (load(rows.y), load(rows.weight));
        let admitted = (w.gt(zero) & w.lt(c(f64::INFINITY)))
            & (yv.eq(zero) | yv.eq(one))
            & load(rows.trials).eq(one);
        let of = |(at_0, at_1): (Vec4<L>, Vec4<L>)| yv.eq(one).select(at_1, at_0);
        let (eta, weighted) = (of(eta), of(weighted));
        let z = (eta - load(rows.offset)) + of(step);
        let terms = Terms {
            w,
            wy: w * yv,
            deviance: zero,
            log_pmf: zero,
            pearson: of(pearson),
            boundary: of(boundary),
            rejected: admitted.select(zero, one),
            weighted,
            wz: weighted * z,
            p: of(p),
            eta,
            step: zero,
        };
        terms.add_to(&mut sums, working, wz, r);
        product.take(terms.p);
    }
    row_sums(lanes, sums, Some(product))
}

/// Counts below this have their poisson start's terms in a table.
const START_COUNTS: usize = 256;

/// A poisson round's terms from R's `mustart` (μ = y + 0.1) at unit
/// weight for each count below [`START_COUNTS`], as [`row_terms`] computes
/// them: η, the step (y − μ) / μ'(η), the working weight, Pearson's term,
/// the boundary flag, the deviance and the log-likelihood.
type StartTerms = [[f64; 8]; START_COUNTS];

/// [`StartTerms`], computed once (the lanes of either unit give the same
/// bits, so one table serves both).
fn poisson_start_terms<L: Lanes>(lanes: L) -> &'static StartTerms {
    static TABLE: std::sync::OnceLock<Box<StartTerms>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = Box::new([[0.0; 8]; START_COUNTS]);
        for first in (0..START_COUNTS).step_by(LANES) {
            let y: [f64; LANES] = std::array::from_fn(|i| (first + i) as f64);
            let rows = CanonicalRows {
                y: &y,
                trials: &[1.0; LANES],
                offset: &[0.0; LANES],
                weight: &[1.0; LANES],
                eta: None,
            };
            let t = row_terms(lanes, Canonical::PoissonLog, false, whole_logs(), &rows, 0);
            let terms = [
                t.eta, t.step, t.weighted, t.pearson, t.boundary, t.deviance, t.log_pmf,
            ]
            .map(Vec4::to_array);
            for (i, row) in table[first..first + LANES].iter_mut().enumerate() {
                for (entry, term) in row.iter_mut().zip(&terms) {
                    *entry = term[i];
                }
            }
        }
        table
    })
}

/// [`add_groups`] for the first round of a poisson fit whose weights are
/// all 1 and whose responses are whole counts below [`START_COUNTS`]: from
/// R's `mustart` a row's terms depend on its count alone, but for z's
/// offset, so each group looks its rows' terms up in
/// [`poisson_start_terms`] and forms z as [`row_terms`] does. The same
/// values to the bit, and the same order of additions, without a
/// logarithm, an exponential or a division per row.
#[inline(always)]
fn add_poisson_start_groups<L: Lanes>(
    lanes: L,
    rows: CanonicalRows,
    working: &mut [f64],
    wz: &mut [f64],
) -> Option<RowSums> {
    let table = poisson_start_terms(lanes);
    let c = |v: f64| Vec4::splat(lanes, v);
    let (zero, one) = (c(0.0), c(1.0));
    let mut sums = [zero; 8];
    for r in (0..rows.y.len()).step_by(LANES) {
        let load = |values: &[f64]| Vec4::load(lanes, values, r);
        let (yv, w) = (load(rows.y), load(rows.weight));
        let admitted =
            (w.gt(zero) & w.lt(c(f64::INFINITY))) & zero.le(yv) & yv.lt(c(f64::INFINITY));
        // The caller checked that every count is in the table; the bound
        // only keeps an unchecked row from reading past its end.
        let row = |y: f64| (y as u32 as usize).min(START_COUNTS - 1);
        let of: [&[f64; 8]; LANES] = std::array::from_fn(|i| &table[row(rows.y[r + i])]);
        let term = |j: usize| Vec4::of(lanes, &[of[0][j], of[1][j], of[2][j], of[3][j]]);
        let (eta, weighted) = (term(0), term(2));
        let z = (eta - load(rows.offset)) + term(1);
        let terms = Terms {
            w,
            wy: w * yv,
            deviance: term(5),
            log_pmf: term(6),
            pearson: term(3),
            boundary: term(4),
            rejected: admitted.select(zero, one),
            weighted,
            wz: weighted * z,
            p: one,
            eta,
            step: zero,
        };
        terms.add_to(&mut sums, working, wz, r);
    }
    row_sums(lanes, sums, None)
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
    /// η, and (y − μ) / μ'(η): z is (η − offset) + this step.
    eta: Vec4<L>,
    step: Vec4<L>,
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
    let step = residual / mu_eta;
    let z = (e_eta - load(rows.offset, r)) + step;
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
        eta: e_eta,
        step,
    }
}

#[cfg(test)]
mod tests;
