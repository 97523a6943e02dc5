//! Link functions as R defines them (`stats::make.link`): the link, its
//! inverse and the inverse's derivative, with R's clamps so that iterates
//! match R's `glm.fit`.

use std::fmt;
use std::str::FromStr;

use statrs::distribution::{Continuous, Normal};

const EPS: f64 = f64::EPSILON;
/// R's logit clamps: |η| > 30 gives μ = eps or 1/eps-based limits.
const LOGIT_THRESH: f64 = 30.0;

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

fn standard_normal() -> Normal {
    Normal::standard()
}
