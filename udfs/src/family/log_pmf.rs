//! Log-probabilities of the discrete families (the terms of R's family
//! `aic` functions), and tables of log(x) and log(x!) for small counts.

use statrs::function::gamma::ln_gamma;

/// log of the negative binomial probability of `y` at mean `mu` and θ (the
/// term of MASS's `negative.binomial()$aic`).
pub fn ln_negative_binomial_pmf(y: f64, mu: f64, theta: f64) -> f64 {
    ln_gamma(theta + y) - ln_gamma(theta) - ln_gamma(y + 1.0)
        + theta * theta.ln()
        + y * (mu + if y == 0.0 { 1.0 } else { 0.0 }).ln()
        - (theta + y) * (theta + mu).ln()
}

/// log of the binomial probability of `s` successes in `m` trials.
pub fn ln_binomial_pmf(s: f64, m: f64, mu: f64) -> f64 {
    let (s, m) = (s.round(), m.round());
    let ln_choose = if m == 1.0 {
        0.0
    } else {
        ln_factorial(m) - ln_factorial(s) - ln_factorial(m - s)
    };
    let term = |k: f64, p: f64| if k > 0.0 { k * p.ln() } else { 0.0 };
    ln_choose + term(s, mu) + term(m - s, 1.0 - mu)
}

/// log of the Poisson probability of `y` at mean `mu`.
pub fn ln_poisson_pmf(y: f64, mu: f64) -> f64 {
    let term = if y > 0.0 { y * mu.ln() } else { 0.0 };
    term - mu - ln_factorial(y)
}

/// Whole numbers below this have their log-factorial tabulated.
pub(super) const FACTORIAL_TABLE: usize = 1024;

/// log(x) and log(x!) of the whole numbers below [`FACTORIAL_TABLE`], in
/// arrays of that length (an index below it needs no bounds check).
pub struct WholeLogs {
    ln: Box<[f64; FACTORIAL_TABLE]>,
    ln_factorial: Box<[f64; FACTORIAL_TABLE]>,
}

/// The tables of [`WholeLogs`], made once.
pub fn whole_logs() -> &'static WholeLogs {
    static TABLES: std::sync::OnceLock<WholeLogs> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| WholeLogs {
        ln: Box::new(std::array::from_fn(|k| (k as f64).ln())),
        ln_factorial: Box::new(std::array::from_fn(|k| ln_gamma(k as f64 + 1.0))),
    })
}

impl WholeLogs {
    /// The table row of `x`, if it is a whole number below the tables' end.
    #[inline]
    pub(super) fn row(x: f64) -> Option<usize> {
        // `as` saturates (and takes NaN to 0), so a whole number below the
        // end is one that converts to an index and back unchanged.
        let k = x as u32 as usize;
        (k < FACTORIAL_TABLE && k as f64 == x).then_some(k)
    }

    /// (log x, log x!), from the tables for small whole numbers (counts).
    #[inline]
    pub fn of(&self, x: f64) -> (f64, f64) {
        match Self::row(x) {
            Some(k) => (self.ln[k], self.ln_factorial[k]),
            None => (x.ln(), ln_gamma(x + 1.0)),
        }
    }
}

/// The index of a response that is a whole count below `end` (not −0,
/// whose terms could differ in a zero's sign): the row of a table of
/// terms computed once per count.
#[inline(always)]
pub fn whole_count(y: f64, end: usize) -> Option<usize> {
    // `as` saturates and takes NaN to 0: a whole number in range is one
    // that converts to an index and back to the same bits.
    let k = y as u32 as usize;
    (k < end && (k as f64).to_bits() == y.to_bits()).then_some(k)
}

/// log(x), from a table for small whole numbers (counts).
pub fn ln_whole(x: f64) -> f64 {
    WholeLogs::row(x).map_or_else(|| x.ln(), |k| whole_logs().ln[k])
}

/// log(x!) = lgamma(x + 1), from a table for small whole numbers.
pub fn ln_factorial(x: f64) -> f64 {
    WholeLogs::row(x).map_or_else(|| ln_gamma(x + 1.0), |k| whole_logs().ln_factorial[k])
}
