//! GLM families and links as R defines them (`stats::family`): link,
//! inverse link and its derivative (with R's clamps, so that iterates match
//! R's `glm.fit`), variance, deviance residuals, starting values and the
//! log-likelihood terms behind R's `aic`.
//!
//! The links are in `family/link.rs`, the log-probabilities behind the
//! `aic` terms in `family/log_pmf.rs`; both are re-exported here.

use std::fmt;
use std::str::FromStr;

mod link;
mod log_pmf;

pub use link::Link;
pub use log_pmf::{
    WholeLogs, ln_binomial_pmf, ln_factorial, ln_negative_binomial_pmf, ln_poisson_pmf, ln_whole,
    whole_count, whole_logs,
};

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

#[cfg(test)]
mod tests;
