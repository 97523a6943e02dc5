//! GLM families and links as R defines them (`stats::family`): link,
//! inverse link and its derivative (with R's clamps, so that iterates match
//! R's `glm.fit`), variance, deviance residuals, starting values and the
//! log-likelihood terms behind R's `aic`.

use std::fmt;
use std::str::FromStr;

use statrs::distribution::{Continuous, Normal};
use statrs::function::gamma::ln_gamma;

const EPS: f64 = f64::EPSILON;
/// R's logit clamps: |η| > 30 gives μ = eps or 1/eps-based limits.
const LOGIT_THRESH: f64 = 30.0;

/// An error family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Gaussian,
    Binomial,
    Poisson,
    Gamma,
    InverseGaussian,
    /// MASS's `negative.binomial(theta)`: V(μ) = μ + μ²/θ, θ known.
    NegativeBinomial(Theta),
}

/// The θ of a negative binomial family, held as its bits so that a family
/// stays `Eq` and `Hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Theta(u64);

impl Theta {
    /// A θ (positive and finite; [`parse_family`] checks it).
    pub fn new(theta: f64) -> Self {
        Self(theta.to_bits())
    }

    /// Its value.
    pub fn value(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// A link function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    Identity,
    Log,
    Logit,
    Probit,
    Cloglog,
    Sqrt,
    Inverse,
    InverseSquare,
}

impl Family {
    /// R's name (`Gamma` capitalized as R has it).
    pub fn name(self) -> &'static str {
        match self {
            Family::Gaussian => "gaussian",
            Family::Binomial => "binomial",
            Family::Poisson => "poisson",
            Family::Gamma => "Gamma",
            Family::InverseGaussian => "inverse.gaussian",
            Family::NegativeBinomial(_) => "negative.binomial",
        }
    }

    /// The family as R's `family()$family` names it (`Negative
    /// Binomial(2.5)`, θ rounded to 4 decimals as MASS prints it).
    pub fn r_name(self) -> String {
        match self {
            Family::NegativeBinomial(t) => {
                format!("Negative Binomial({})", (t.value() * 1e4).round() / 1e4)
            }
            other => other.name().to_string(),
        }
    }

    /// The `family=...;link=...` entries of a round's config (with
    /// `theta=` for the negative binomial); [`family_from_config`] reads them.
    pub fn config_entries(self, link: Link) -> String {
        let mut s = format!("family={};link={}", self.name(), link.name());
        if let Family::NegativeBinomial(t) = self {
            s.push_str(&format!(";theta={:?}", t.value()));
        }
        s
    }

    /// The canonical (default) link.
    pub fn default_link(self) -> Link {
        match self {
            Family::Gaussian => Link::Identity,
            Family::Binomial => Link::Logit,
            Family::Poisson => Link::Log,
            Family::Gamma => Link::Inverse,
            Family::InverseGaussian => Link::InverseSquare,
            Family::NegativeBinomial(_) => Link::Log,
        }
    }

    /// The links this family accepts.
    pub fn links(self) -> &'static [Link] {
        match self {
            Family::Gaussian => &[Link::Identity, Link::Log, Link::Inverse],
            Family::Binomial => &[Link::Logit, Link::Probit, Link::Cloglog, Link::Log],
            Family::Poisson => &[Link::Log, Link::Identity, Link::Sqrt],
            Family::Gamma => &[Link::Inverse, Link::Log, Link::Identity],
            Family::InverseGaussian => &[
                Link::InverseSquare,
                Link::Log,
                Link::Inverse,
                Link::Identity,
            ],
            Family::NegativeBinomial(_) => &[Link::Log, Link::Sqrt, Link::Identity],
        }
    }

    /// Whether the dispersion is estimated (t statistics) rather than 1
    /// (z). R's `summary.glm` fixes it only for binomial and poisson, so a
    /// `negative.binomial(θ)` fit estimates it too.
    pub fn estimates_dispersion(self) -> bool {
        matches!(
            self,
            Family::Gaussian
                | Family::Gamma
                | Family::InverseGaussian
                | Family::NegativeBinomial(_)
        )
    }

    /// Whether R's `logLik.glm` counts the dispersion as a parameter.
    pub fn counts_dispersion(self) -> bool {
        matches!(
            self,
            Family::Gaussian | Family::Gamma | Family::InverseGaussian
        )
    }

    /// The variance function V(μ).
    pub fn variance(self, mu: f64) -> f64 {
        match self {
            Family::Gaussian => 1.0,
            Family::Binomial => mu * (1.0 - mu),
            Family::Poisson => mu,
            Family::Gamma => mu * mu,
            Family::InverseGaussian => mu * mu * mu,
            Family::NegativeBinomial(t) => mu + mu * mu / t.value(),
        }
    }

    /// One row's deviance residual (times its prior weight `w`).
    pub fn deviance_residual(self, y: f64, mu: f64, w: f64) -> f64 {
        let ylogy = |y: f64, mu: f64| if y > 0.0 { y * (y / mu).ln() } else { 0.0 };
        match self {
            Family::Gaussian => w * (y - mu) * (y - mu),
            Family::Binomial => 2.0 * w * (ylogy(y, mu) + ylogy(1.0 - y, 1.0 - mu)),
            Family::Poisson => 2.0 * w * (ylogy(y, mu) - (y - mu)),
            Family::Gamma => {
                let ratio = if y == 0.0 { 1.0 } else { y / mu };
                -2.0 * w * (ratio.ln() - (y - mu) / mu)
            }
            Family::InverseGaussian => w * (y - mu) * (y - mu) / (y * mu * mu),
            Family::NegativeBinomial(t) => {
                let theta = t.value();
                2.0 * w
                    * (y * (y.max(1.0) / mu).ln() - (y + theta) * ((y + theta) / (mu + theta)).ln())
            }
        }
    }

    /// R's starting mean (`mustart`) for a response `y` with weight `w`
    /// (for binomial, `w` is the number of trials times the prior weight).
    pub fn start_mu(self, y: f64, w: f64) -> f64 {
        match self {
            Family::Binomial => (w * y + 0.5) / (w + 1.0),
            Family::Poisson => y + 0.1,
            Family::NegativeBinomial(_) => y + if y == 0.0 { 1.0 / 6.0 } else { 0.0 },
            Family::Gaussian | Family::Gamma | Family::InverseGaussian => y,
        }
    }

    /// Whether `y` is a valid response; `None` when it is, else the rule broken.
    pub fn check_response(self, y: f64) -> Option<&'static str> {
        match self {
            Family::Binomial if !(0.0..=1.0).contains(&y) => Some(
                "binomial responses must be in [0, 1] (or counts given as cbind(successes, failures))",
            ),
            Family::Poisson if y < 0.0 => Some("poisson responses must be non-negative counts"),
            Family::NegativeBinomial(_) if y < 0.0 => {
                Some("negative binomial responses must be non-negative counts")
            }
            Family::Gamma if y <= 0.0 => Some("Gamma responses must be positive"),
            Family::InverseGaussian if y <= 0.0 => {
                Some("inverse.gaussian responses must be positive")
            }
            _ if !y.is_finite() => Some("responses must be finite"),
            _ => None,
        }
    }
}

impl FromStr for Family {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s
            .trim()
            .to_ascii_lowercase()
            .replace(['_', ' '], ".")
            .as_str()
        {
            "gaussian" | "normal" => Ok(Family::Gaussian),
            "binomial" | "logistic" => Ok(Family::Binomial),
            "poisson" => Ok(Family::Poisson),
            "gamma" => Ok(Family::Gamma),
            "inverse.gaussian" | "inversegaussian" => Ok(Family::InverseGaussian),
            "negative.binomial" | "negbin" => Err(
                "the negative binomial family needs θ: negative.binomial(theta) or negative.binomial(theta, link); to estimate θ use glm_nb".into(),
            ),
            other => Err(format!(
                "unknown family `{other}`: use gaussian, binomial, poisson, gamma, inverse_gaussian, quasibinomial, quasipoisson or negative.binomial(theta), optionally with a link, e.g. 'binomial(probit)'"
            )),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Link {
    /// R's name.
    pub fn name(self) -> &'static str {
        match self {
            Link::Identity => "identity",
            Link::Log => "log",
            Link::Logit => "logit",
            Link::Probit => "probit",
            Link::Cloglog => "cloglog",
            Link::Sqrt => "sqrt",
            Link::Inverse => "inverse",
            Link::InverseSquare => "1/mu^2",
        }
    }

    /// η = g(μ).
    pub fn link(self, mu: f64) -> f64 {
        match self {
            Link::Identity => mu,
            Link::Log => mu.ln(),
            Link::Logit => (mu / (1.0 - mu)).ln(),
            Link::Probit => crate::distribution::normal_quantile(mu),
            Link::Cloglog => (-(1.0 - mu).ln()).ln(),
            Link::Sqrt => mu.sqrt(),
            Link::Inverse => 1.0 / mu,
            Link::InverseSquare => 1.0 / (mu * mu),
        }
    }

    /// μ = g⁻¹(η), with R's clamps.
    pub fn inverse(self, eta: f64) -> f64 {
        match self {
            Link::Identity => eta,
            Link::Log => eta.exp().max(EPS),
            Link::Logit => {
                let e = if eta < -LOGIT_THRESH {
                    EPS
                } else if eta > LOGIT_THRESH {
                    1.0 / EPS
                } else {
                    eta.exp()
                };
                e / (1.0 + e)
            }
            Link::Probit => {
                let thresh = -crate::distribution::normal_quantile(EPS);
                crate::distribution::normal_cdf(eta.clamp(-thresh, thresh))
            }
            Link::Cloglog => (-(-eta.exp()).exp_m1()).clamp(EPS, 1.0 - EPS),
            Link::Sqrt => eta * eta,
            Link::Inverse => 1.0 / eta,
            Link::InverseSquare => 1.0 / eta.sqrt(),
        }
    }

    /// dμ/dη, with R's clamps.
    pub fn mu_eta(self, eta: f64) -> f64 {
        match self {
            Link::Identity => 1.0,
            Link::Log => eta.exp().max(EPS),
            Link::Logit => {
                if eta.abs() > LOGIT_THRESH {
                    EPS
                } else {
                    let e = eta.exp();
                    e / ((1.0 + e) * (1.0 + e))
                }
            }
            Link::Probit => standard_normal().pdf(eta).max(EPS),
            Link::Cloglog => {
                let eta = eta.min(700.0);
                (eta.exp() * (-eta.exp()).exp()).max(EPS)
            }
            Link::Sqrt => 2.0 * eta,
            Link::Inverse => -1.0 / (eta * eta),
            Link::InverseSquare => -1.0 / (2.0 * eta.powf(1.5)),
        }
    }
}

impl Link {
    /// μ and dμ/dη together, sharing the exponential where the link has one.
    pub fn inverse_and_derivative(self, eta: f64) -> (f64, f64) {
        match self {
            Link::Logit => {
                if eta.abs() > LOGIT_THRESH {
                    (self.inverse(eta), EPS)
                } else {
                    let e = eta.exp();
                    let opexp = 1.0 + e;
                    (e / opexp, e / (opexp * opexp))
                }
            }
            Link::Log => {
                let e = eta.exp().max(EPS);
                (e, e)
            }
            _ => (self.inverse(eta), self.mu_eta(eta)),
        }
    }
}

impl FromStr for Link {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "identity" => Ok(Link::Identity),
            "log" => Ok(Link::Log),
            "logit" => Ok(Link::Logit),
            "probit" => Ok(Link::Probit),
            "cloglog" => Ok(Link::Cloglog),
            "sqrt" => Ok(Link::Sqrt),
            "inverse" => Ok(Link::Inverse),
            "1/mu^2" | "inverse_square" => Ok(Link::InverseSquare),
            other => Err(format!(
                "unknown link `{other}`: use identity, log, logit, probit, cloglog, sqrt, inverse or 1/mu^2"
            )),
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses `family` or `family(link)`, checking the link belongs to the family.
pub fn parse_family(text: &str) -> Result<(Family, Link), String> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase().replace('_', ".");
    if let Some(args) = lower
        .strip_prefix("negative.binomial")
        .map(str::trim_start)
        .and_then(|a| a.strip_prefix('('))
    {
        let args = args.strip_suffix(')').ok_or_else(|| {
            format!("cannot read family `{text}`: expected negative.binomial(theta)")
        })?;
        let (theta, link) = match args.split_once(',') {
            Some((t, l)) => (
                t,
                Some(
                    l.trim()
                        .trim_start_matches("link")
                        .trim_start_matches([' ', '='])
                        .trim_matches(['"', '\'']),
                ),
            ),
            None => (args, None),
        };
        let theta = theta
            .trim()
            .trim_start_matches("theta")
            .trim_start_matches([' ', '='])
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t > 0.0)
            .ok_or_else(|| {
                format!("`{text}`: θ must be a positive number, e.g. negative.binomial(2)")
            })?;
        let family = Family::NegativeBinomial(Theta::new(theta));
        let link = match link {
            Some(l) => l.parse::<Link>()?,
            None => family.default_link(),
        };
        if !family.links().contains(&link) {
            return Err(format!(
                "the negative binomial family has no `{link}` link; its links: log, sqrt, identity"
            ));
        }
        return Ok((family, link));
    }
    let (family, link) = match text.split_once('(') {
        Some((f, rest)) => {
            let link = rest
                .strip_suffix(')')
                .ok_or_else(|| format!("cannot read family `{text}`: expected family(link)"))?;
            (f.parse::<Family>()?, Some(link.parse::<Link>()?))
        }
        None => (text.parse::<Family>()?, None),
    };
    let link = link.unwrap_or(family.default_link());
    if !family.links().contains(&link) {
        let allowed: Vec<&str> = family.links().iter().map(|l| l.name()).collect();
        return Err(format!(
            "the {family} family has no `{link}` link; its links: {}",
            allowed.join(", ")
        ));
    }
    Ok((family, link))
}

/// The family and link of a round's config entries (`family=`, `link=`,
/// `theta=`; see [`Family::config_entries`]).
pub fn family_from_config(
    family: Option<String>,
    link: Option<String>,
    theta: Option<String>,
) -> Result<(Family, Link), String> {
    let family = family.ok_or("config needs family=")?;
    let spec = match (theta, link) {
        (Some(theta), Some(link)) => format!("{family}({theta}, {link})"),
        (Some(theta), None) => format!("{family}({theta})"),
        (None, Some(link)) => format!("{family}({link})"),
        (None, None) => family,
    };
    parse_family(&spec)
}

/// log of the negative binomial probability of `y` at mean `mu` and θ (the
/// term of MASS's `negative.binomial()$aic`).
pub fn ln_negative_binomial_pmf(y: f64, mu: f64, theta: f64) -> f64 {
    ln_gamma(theta + y) - ln_gamma(theta) - ln_gamma(y + 1.0)
        + theta * theta.ln()
        + y * (mu + if y == 0.0 { 1.0 } else { 0.0 }).ln()
        - (theta + y) * (theta + mu).ln()
}

fn standard_normal() -> Normal {
    Normal::standard()
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
const FACTORIAL_TABLE: usize = 1024;

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
    fn row(x: f64) -> Option<usize> {
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

#[cfg(test)]
mod tests {
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
}
