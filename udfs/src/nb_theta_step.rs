//! `nb_theta_step(config, y, trials, offset, weight, x1, ..., xk)`: the sums
//! behind one step of MASS's `theta.ml`, the maximum-likelihood θ of a
//! negative binomial model at fixed means, as a mergeable aggregate.
//!
//! The shared input is `config`: the link, the coefficients `beta` (the
//! means are μᵢ = g⁻¹(xᵢ'β + offsetᵢ), R's fitted values) and the θ the
//! score and information are taken at. Each client returns six sums,
//! whatever its rows ([`ThetaSums`]): the rows, Σ w, Σ w (y/μ − 1)² (the
//! moment estimate `theta.ml` starts from), the score and the information
//! of θ (digamma and trigamma terms, exactly MASS's `score` and `info`)
//! and the log-likelihood (MASS's `loglik` of `glm.nb`). `glm_nb`
//! alternates IRLS rounds (`irls_step` with the θ fixed) with rounds of
//! this aggregate, as `MASS::glm.nb` alternates `glm.fitter` and
//! `theta.ml`. Rows with a NULL in any argument are dropped; `trials`
//! multiplies the prior weight (it is 1 for a count response).

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use statrs::function::gamma::ln_gamma;

use crate::family::Link;
use crate::flat_state;
use crate::function_doc::{DocOption, FunctionDoc, FunctionFamily};

/// Leading arguments before the regressors: config, y, trials, offset, weight.
const LEADING: usize = 5;
/// The length of the state.
const SUMS: usize = 6;

/// What the coordinator sends for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct ThetaConfig {
    pub link: Link,
    /// The coefficients the means are taken at.
    pub beta: Vec<f64>,
    /// The θ the score, information and log-likelihood are taken at.
    pub theta: f64,
}

impl ThetaConfig {
    /// The config string the aggregate reads (floats round-trip exactly).
    pub fn encode(&self) -> String {
        let beta: Vec<String> = self.beta.iter().map(|b| format!("{b:?}")).collect();
        format!(
            "link={};theta={:?};beta={}",
            self.link.name(),
            self.theta,
            beta.join(",")
        )
    }

    /// Reads a config string.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let (mut link, mut beta, mut theta) = (Link::Log, None, None);
        for part in text.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("bad config entry `{part}`"))?;
            match key {
                "link" => link = value.parse()?,
                "theta" => {
                    let t: f64 = value.parse().map_err(|e| format!("bad theta: {e}"))?;
                    if !(t.is_finite() && t > 0.0) {
                        return Err(format!("theta must be positive and finite, not {t}"));
                    }
                    theta = Some(t);
                }
                "beta" => {
                    let parsed = value
                        .split(',')
                        .filter(|v| !v.is_empty())
                        .map(|v| {
                            v.parse::<f64>()
                                .map_err(|e| format!("bad coefficient `{v}`: {e}"))
                        })
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    beta = Some(parsed);
                }
                other => return Err(format!("unknown config key `{other}`")),
            }
        }
        if !matches!(link, Link::Log | Link::Sqrt | Link::Identity) {
            return Err(format!(
                "the negative binomial family has no `{link}` link; its links: log, sqrt, identity"
            ));
        }
        Ok(Self {
            link,
            beta: beta.ok_or("config needs beta=")?,
            theta: theta.ok_or("config needs theta=")?,
        })
    }
}

/// The merged sums of one round, at the config's β and θ.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ThetaSums {
    /// Rows used.
    pub n: f64,
    /// Σ w.
    pub sum_w: f64,
    /// Σ w (y/μ − 1)²: `theta.ml` starts from Σ w / this.
    pub moment: f64,
    /// The score of θ: Σ w (ψ(θ + y) − ψ(θ) + log θ + 1 − log(θ + μ) − (y + θ)/(μ + θ)).
    pub score: f64,
    /// The information of θ: Σ w (−ψ′(θ + y) + ψ′(θ) − 1/θ + 2/(μ + θ) − (y + θ)/(μ + θ)²).
    pub info: f64,
    /// The log-likelihood, Σ w log P(y; μ, θ) (MASS's `loglik`).
    pub loglik: f64,
}

impl ThetaSums {
    /// Reads the flat layout.
    pub fn from_slice(v: &[f64]) -> Self {
        Self {
            n: v[0],
            sum_w: v[1],
            moment: v[2],
            score: v[3],
            info: v[4],
            loglik: v[5],
        }
    }

    /// The flat layout.
    pub fn to_vec(self) -> Vec<f64> {
        vec![
            self.n,
            self.sum_w,
            self.moment,
            self.score,
            self.info,
            self.loglik,
        ]
    }

    /// Adds complete rows.
    pub fn update(
        &mut self,
        config: &ThetaConfig,
        (y, trials, offset, weight): (&[f64], &[f64], &[f64], &[f64]),
        x: &[&[f64]],
    ) {
        let th = config.theta;
        let (digamma_th, trigamma_th, ln_gamma_th) = (digamma(th), trigamma(th), ln_gamma(th));
        for i in 0..y.len() {
            let eta = offset[i]
                + x.iter()
                    .zip(&config.beta)
                    .map(|(c, b)| c[i] * b)
                    .sum::<f64>();
            let mu = config.link.inverse(eta);
            let (y, w) = (y[i], weight[i] * trials[i]);
            self.n += 1.0;
            self.sum_w += w;
            self.moment += w * (y / mu - 1.0).powi(2);
            self.score += w
                * (digamma(th + y) - digamma_th + th.ln() + 1.0
                    - (th + mu).ln()
                    - (y + th) / (mu + th));
            self.info += w
                * (-trigamma(th + y) + trigamma_th - 1.0 / th + 2.0 / (mu + th)
                    - (y + th) / ((mu + th) * (mu + th)));
            self.loglik += w
                * (ln_gamma(th + y) - ln_gamma_th - ln_gamma(y + 1.0)
                    + th * th.ln()
                    + y * (mu + if y == 0.0 { 1.0 } else { 0.0 }).ln()
                    - (th + y) * (th + mu).ln());
        }
    }
}

/// Below this, ψ and ψ′ are shifted up by their recurrences before the
/// asymptotic series (whose terms then fall below 1e-16).
const SERIES_FROM: f64 = 10.0;

/// The digamma function ψ(x) = Γ′(x)/Γ(x), x > 0.
pub fn digamma(mut x: f64) -> f64 {
    let mut shifted = 0.0;
    while x < SERIES_FROM {
        shifted += 1.0 / x;
        x += 1.0;
    }
    let r = 1.0 / (x * x);
    // Bernoulli numbers: B₂ₖ / 2k.
    let series = r
        * (1.0 / 12.0
            - r * (1.0 / 120.0
                - r * (1.0 / 252.0
                    - r * (1.0 / 240.0 - r * (1.0 / 132.0 - r * (691.0 / 32760.0 - r / 12.0))))));
    x.ln() - 0.5 / x - series - shifted
}

/// The trigamma function ψ′(x), x > 0.
pub fn trigamma(mut x: f64) -> f64 {
    let mut shifted = 0.0;
    while x < SERIES_FROM {
        shifted += 1.0 / (x * x);
        x += 1.0;
    }
    let r = 1.0 / (x * x);
    // 1/x + 1/(2x²) + Σ B₂ₖ / x^(2k+1).
    let series = r
        * (1.0 / 6.0
            - r * (1.0 / 30.0
                - r * (1.0 / 42.0
                    - r * (1.0 / 30.0 - r * (5.0 / 66.0 - r * (691.0 / 2730.0 - r * 7.0 / 6.0))))));
    (1.0 + 0.5 / x + series) / x + shifted
}

/// The aggregate `nb_theta_step`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NbThetaStep {
    signature: Signature,
}

impl Default for NbThetaStep {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for NbThetaStep {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        "nb_theta_step"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        flat_state::coerce_step_arguments(
            self.name(),
            "config, y, trials, offset, weight, x1, ..., xk",
            LEADING,
            arg_types,
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(flat_state::result_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![flat_state::state_field(args.name, SUMS)])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let config =
            ThetaConfig::decode(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let k = args.exprs.len() - LEADING;
        if config.beta.len() != k {
            return plan_err!(
                "nb_theta_step: the config has {} coefficients for {k} regressors",
                config.beta.len()
            );
        }
        Ok(Box::new(ThetaAccumulator {
            config,
            sums: ThetaSums::default(),
        }))
    }
}

#[derive(Debug)]
struct ThetaAccumulator {
    config: ThetaConfig,
    sums: ThetaSums,
}

impl Accumulator for ThetaAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let columns = crate::comoments::complete_rows(&values[1..])?;
        let slices: Vec<&[f64]> = columns
            .iter()
            .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
            .collect();
        self.sums.update(
            &self.config,
            (slices[0], slices[1], slices[2], slices[3]),
            &slices[4..],
        );
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let mut total = self.sums.to_vec();
        flat_state::merge_into("nb_theta_step", &mut total, &states[0])?;
        self.sums = ThetaSums::from_slice(&total);
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![flat_state::state_value(self.sums.to_vec())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.sums.to_vec()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * (SUMS + self.config.beta.len())
    }
}

/// The documentation of `nb_theta_step`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The sums behind one Newton step of the negative binomial θ at fixed means (MASS's `theta.ml`; the round `glm_nb` alternates with its IRLS rounds): the score and information of θ, the log-likelihood and the moment θ starts from.",
    syntax: "nb_theta_step('link=log;theta=2.5;beta=b0,b1,...', y, trials, offset, weight, x1, ..., xk)",
    arguments: &[
        (
            "config",
            "a constant string of `key=value` entries separated by `;` (the options below)",
        ),
        ("y", "the count response"),
        ("trials", "1 (a multiplier of the prior weight)"),
        (
            "offset",
            "a known term of the linear predictor (0 for none)",
        ),
        ("weight", "the prior weight (1 for none)"),
        (
            "x1, ..., xk",
            "the design columns (an intercept is a column of 1)",
        ),
    ],
    options: &[
        DocOption {
            name: "link",
            default: "log",
            meaning: "the link function: log, sqrt or identity",
        },
        DocOption {
            name: "theta",
            default: "required",
            meaning: "the θ the score, information and log-likelihood are taken at",
        },
        DocOption {
            name: "beta",
            default: "required",
            meaning: "the coefficients, separated by commas: the means are taken there",
        },
    ],
    returns: "the merged sums as `list<float64>`: n, Σw, Σw(y/μ − 1)², the score and information of θ, the log-likelihood",
    releases: "6 numbers, whatever its rows.",
    example: "SELECT nb_theta_step('link=log;theta=2.5;beta=0.1,0.02', visits, 1.0, 0.0, 1.0, 1.0, age) AS sums FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polygammas_equal_r() {
        // R 4.2.2: digamma(x), trigamma(x).
        for (x, psi, psi1) in [
            (0.001, -1000.5755719318104, 1000001.6425331959),
            (0.5, -1.963510026021423, 4.934802200544679),
            (2.522320675466197, 0.7140433288398005, 0.48514072287805965),
            (7.3, 1.9178203356379862, 0.1467957681314271),
            (12.5, 2.4851956512749123, 0.08328522460157835),
            (1003.25, 6.910501546088597, 0.0009972574591105912),
        ] {
            assert!(
                (digamma(x) - psi).abs() <= 4e-15 * psi.abs().max(1.0),
                "{x}"
            );
            assert!((trigamma(x) - psi1).abs() <= 4e-15 * psi1.abs(), "{x}");
        }
    }

    #[test]
    fn config_round_trips() {
        let config = ThetaConfig {
            link: Link::Sqrt,
            beta: vec![0.1, -0.25000000000000006],
            theta: 2.522320675466197,
        };
        assert_eq!(ThetaConfig::decode(&config.encode()).unwrap(), config);
        assert!(ThetaConfig::decode("link=logit;theta=1;beta=1").is_err());
        assert!(ThetaConfig::decode("theta=-1;beta=1").is_err());
    }

    #[test]
    fn the_score_vanishes_at_the_maximum_likelihood() {
        // A few counts at a common mean: the score is the log-likelihood's
        // derivative in θ, the information minus its second derivative.
        let y = [0.0, 1.0, 4.0, 2.0, 9.0, 0.0, 3.0];
        let one = [1.0; 7];
        let sums = |theta: f64| {
            let config = ThetaConfig {
                link: Link::Log,
                beta: vec![3f64.ln()],
                theta,
            };
            let mut s = ThetaSums::default();
            s.update(&config, (&y, &one, &[0.0; 7], &one), &[&one]);
            s
        };
        let (t, h) = (1.3, 1e-5);
        let numeric = (sums(t + h).loglik - sums(t - h).loglik) / (2.0 * h);
        assert!((sums(t).score - numeric).abs() < 1e-7, "{numeric}");
        let second = (sums(t + h).score - sums(t - h).score) / (2.0 * h);
        assert!((sums(t).info + second).abs() < 1e-6, "{second}");
        let moment: f64 = y.iter().map(|y| (y / 3.0 - 1.0).powi(2)).sum();
        assert!((sums(t).moment - moment).abs() < 1e-14);
    }
}
