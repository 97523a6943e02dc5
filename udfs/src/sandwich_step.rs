//! `sandwich_step(config, y, trials, offset, weight, x1, ..., xk)`: the sums
//! behind heteroskedasticity- and cluster-robust standard errors (R's
//! `sandwich::vcovHC` and `vcovCL`) of a fitted linear model or GLM, as a
//! mergeable aggregate.
//!
//! The shared input is `config`: the family and link, the estimate `beta`
//! (the residuals are taken there), `beta_w` (the coefficients the working
//! weights are taken at: R's `glm` keeps the weights of its last IRLS
//! iteration, computed before the estimate; absent: R's `mustart`), and
//! for HC2/HC3 the `bread` (X'WX)⁻¹ row-major with `power` 1 or 2, for the
//! leverages hᵢ = wᵢ xᵢ'(X'WX)⁻¹xᵢ. Per row, the score residual is
//! sᵢ = wᵢ (yᵢ − μᵢ)/μ'(ηᵢ) (R's working residual times working weight)
//! and ωᵢ = sᵢ² / (1 − hᵢ)^power. The state ([`SandwichSums`]) is n,
//! X'WX, Σ ωᵢ xᵢxᵢ' (the meat), Σ sᵢ xᵢ (the score, whose per-cluster
//! values a `GROUP BY cluster` query releases for `vcovCL`) and R's
//! working Pearson statistic (the dispersion of a quasi family): 2k² + k + 2
//! numbers whatever the rows. Rows with a NULL in any argument are dropped.

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use crate::family::{Family, Link, family_from_config};
use crate::flat_state;
use crate::function_doc::{DocOption, FunctionDoc, FunctionFamily};

/// Leading arguments before the regressors: config, y, trials, offset, weight.
const LEADING: usize = 5;

/// What the coordinator sends.
#[derive(Debug, Clone, PartialEq)]
pub struct SandwichConfig {
    pub family: Family,
    pub link: Link,
    /// The estimate: residuals are taken at its means.
    pub beta: Vec<f64>,
    /// Where the working weights are taken (`None`: R's `mustart`).
    pub beta_w: Option<Vec<f64>>,
    /// (X'WX)⁻¹, row-major, for the leverages of HC2 and HC3.
    pub bread: Option<Vec<f64>>,
    /// The power of (1 − h) dividing the squared score: 0, 1 (HC2) or 2 (HC3).
    pub power: u8,
}

fn numbers(value: &str, what: &str) -> std::result::Result<Vec<f64>, String> {
    value
        .split(',')
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<f64>()
                .map_err(|e| format!("bad {what} `{v}`: {e}"))
        })
        .collect()
}

fn joined(values: &[f64]) -> String {
    values
        .iter()
        .map(|b| format!("{b:?}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl SandwichConfig {
    /// The config string the aggregate reads (floats round-trip exactly).
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{};beta={}",
            self.family.config_entries(self.link),
            joined(&self.beta)
        );
        if let Some(w) = &self.beta_w {
            s.push_str(&format!(";beta_w={}", joined(w)));
        }
        if let Some(b) = &self.bread {
            s.push_str(&format!(";bread={};power={}", joined(b), self.power));
        }
        s
    }

    /// Reads a config string.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let (mut family, mut link, mut theta, mut beta, mut beta_w, mut bread, mut power) =
            (None, None, None, None, None, None, 0u8);
        for part in text.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("bad config entry `{part}`"))?;
            match key {
                "family" => family = Some(value.to_string()),
                "link" => link = Some(value.to_string()),
                "theta" => theta = Some(value.to_string()),
                "beta" => beta = Some(numbers(value, "coefficient")?),
                "beta_w" => beta_w = Some(numbers(value, "coefficient")?),
                "bread" => bread = Some(numbers(value, "bread entry")?),
                "power" => {
                    power = match value {
                        "0" => 0,
                        "1" => 1,
                        "2" => 2,
                        _ => return Err(format!("power is 0, 1 or 2, not `{value}`")),
                    }
                }
                other => return Err(format!("unknown config key `{other}`")),
            }
        }
        let (family, link) = family_from_config(family, link, theta)?;
        Ok(Self {
            family,
            link,
            beta: beta.ok_or("config needs beta=")?,
            beta_w,
            bread,
            power,
        })
    }
}

/// The merged sums: rows, X'WX, the meat Σ ω x x', the score Σ s x, and
/// Pearson's statistic as R's `summary.glm` takes it for the dispersion
/// (working weights times squared working residuals).
#[derive(Debug, Clone, PartialEq)]
pub struct SandwichSums {
    pub n: f64,
    pub xtwx: Vec<f64>,
    pub meat: Vec<f64>,
    pub score: Vec<f64>,
    pub pearson: f64,
}

impl SandwichSums {
    /// Zero sums for `k` regressors.
    pub fn new(k: usize) -> Self {
        Self {
            n: 0.0,
            xtwx: vec![0.0; k * k],
            meat: vec![0.0; k * k],
            score: vec![0.0; k],
            pearson: 0.0,
        }
    }

    /// The length of the flat layout for `k` regressors.
    pub fn flat_len(k: usize) -> usize {
        2 + 2 * k * k + k
    }

    /// Reads the flat layout (n, X'WX, meat, score, Pearson).
    pub fn from_slice(values: &[f64], k: usize) -> Self {
        Self {
            n: values[0],
            xtwx: values[1..1 + k * k].to_vec(),
            meat: values[1 + k * k..1 + 2 * k * k].to_vec(),
            score: values[1 + 2 * k * k..1 + 2 * k * k + k].to_vec(),
            pearson: values[1 + 2 * k * k + k],
        }
    }

    /// The flat layout.
    pub fn to_vec(&self) -> Vec<f64> {
        let mut v = vec![self.n];
        v.extend(&self.xtwx);
        v.extend(&self.meat);
        v.extend(&self.score);
        v.push(self.pearson);
        v
    }

    /// Adds complete rows.
    pub fn update(
        &mut self,
        config: &SandwichConfig,
        (y, trials, offset, weight): (&[f64], &[f64], &[f64], &[f64]),
        x: &[&[f64]],
    ) {
        let k = x.len();
        let (family, link) = (config.family, config.link);
        let mut row = vec![0.0; k];
        for i in 0..y.len() {
            for (r, column) in row.iter_mut().zip(x) {
                *r = column[i];
            }
            let eta_of =
                |beta: &[f64]| offset[i] + row.iter().zip(beta).map(|(a, b)| a * b).sum::<f64>();
            let prior = if family == Family::Binomial {
                weight[i] * trials[i]
            } else {
                weight[i]
            };
            self.n += 1.0;
            if prior <= 0.0 {
                continue;
            }
            let (mu, mu_eta) = link.inverse_and_derivative(eta_of(&config.beta));
            let (mu_w, mu_eta_w) = match &config.beta_w {
                Some(beta_w) => link.inverse_and_derivative(eta_of(beta_w)),
                None => {
                    let mu = family.start_mu(y[i], prior);
                    (mu, link.mu_eta(link.link(mu)))
                }
            };
            let variance_w = family.variance(mu_w);
            if mu_eta == 0.0 || mu_eta_w == 0.0 || variance_w.is_nan() || variance_w <= 0.0 {
                continue;
            }
            let working = prior * mu_eta_w * mu_eta_w / variance_w;
            let residual = (y[i] - mu) / mu_eta;
            let score = working * residual;
            self.pearson += working * residual * residual;
            let mut omega = score * score;
            if let (Some(bread), p @ 1..) = (&config.bread, config.power) {
                let mut quadratic = 0.0;
                for a in 0..k {
                    for b in 0..k {
                        quadratic += row[a] * bread[a * k + b] * row[b];
                    }
                }
                let h = working * quadratic;
                omega /= (1.0 - h).powi(i32::from(p));
            }
            for a in 0..k {
                self.score[a] += score * row[a];
                for b in 0..k {
                    self.xtwx[a * k + b] += working * row[a] * row[b];
                    self.meat[a * k + b] += omega * row[a] * row[b];
                }
            }
        }
    }
}

/// The aggregate `sandwich_step`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SandwichStep {
    signature: Signature,
}

impl Default for SandwichStep {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for SandwichStep {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        "sandwich_step"
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
        let k = args.input_fields.len() - LEADING;
        Ok(vec![flat_state::state_field(
            args.name,
            SandwichSums::flat_len(k),
        )])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let config =
            SandwichConfig::decode(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let k = args.exprs.len() - LEADING;
        let wrong = config.beta.len() != k
            || config.beta_w.as_ref().is_some_and(|b| b.len() != k)
            || config.bread.as_ref().is_some_and(|b| b.len() != k * k);
        if wrong {
            return plan_err!(
                "sandwich_step: the config's coefficients or bread do not fit {k} regressors"
            );
        }
        Ok(Box::new(SandwichAccumulator {
            config,
            sums: SandwichSums::new(k),
        }))
    }
}

#[derive(Debug)]
struct SandwichAccumulator {
    config: SandwichConfig,
    sums: SandwichSums,
}

impl Accumulator for SandwichAccumulator {
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
        let k = self.sums.score.len();
        let mut total = self.sums.to_vec();
        flat_state::merge_into("sandwich_step", &mut total, &states[0])?;
        self.sums = SandwichSums::from_slice(&total, k);
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![flat_state::state_value(self.sums.to_vec())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.sums.to_vec()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * (SandwichSums::flat_len(self.sums.score.len()) + 64)
    }
}

/// The documentation of `sandwich_step`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The sums behind robust (sandwich) standard errors of a fitted linear model or GLM (the round `lm` and `glm` run for `se=HC0..HC3` or `se=cluster`): X'WX, the meat Σ ω x x' and the score Σ s x.",
    syntax: "sandwich_step('family=binomial;link=logit;beta=b0,b1,...', y, trials, offset, weight, x1, ..., xk)",
    arguments: &[
        (
            "config",
            "a constant string of `key=value` entries separated by `;` (the options below)",
        ),
        ("y", "the response"),
        ("trials", "binomial trials per row (1 for a 0/1 response)"),
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
            name: "family",
            default: "required",
            meaning: "the fit's family (as irls_step)",
        },
        DocOption {
            name: "link",
            default: "the family's canonical link",
            meaning: "the link function",
        },
        DocOption {
            name: "beta",
            default: "required",
            meaning: "the estimate, separated by commas: residuals are taken there",
        },
        DocOption {
            name: "beta_w",
            default: "R's mustart",
            meaning: "the coefficients the working weights are taken at (the last IRLS iteration's)",
        },
        DocOption {
            name: "bread",
            default: "none",
            meaning: "(X'WX)⁻¹ row-major, for the leverages of HC2/HC3",
        },
        DocOption {
            name: "power",
            default: "0",
            meaning: "the squared score is divided by (1 − h)^power: 1 for HC2, 2 for HC3",
        },
    ],
    returns: "the merged sums as `list<float64>`: n, X'WX, the meat, the score and Pearson's statistic (Σ w r² in working terms)",
    releases: "2k² + k + 2 numbers, whatever its rows (per group when grouped by a cluster).",
    example: "SELECT sandwich_step('family=gaussian;beta=100,0.5', systolic, 1.0, 0.0, 1.0, 1.0, age) AS sums FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips() {
        let config = SandwichConfig {
            family: Family::Binomial,
            link: Link::Logit,
            beta: vec![0.1, -0.25],
            beta_w: Some(vec![0.1000001, -0.25]),
            bread: Some(vec![1.0, 0.5, 0.5, 2.0]),
            power: 2,
        };
        assert_eq!(SandwichConfig::decode(&config.encode()).unwrap(), config);
    }

    #[test]
    fn gaussian_meat_is_the_squared_residuals() {
        let config = SandwichConfig {
            family: Family::Gaussian,
            link: Link::Identity,
            beta: vec![1.0, 2.0],
            beta_w: None,
            bread: None,
            power: 0,
        };
        let (one, x) = ([1.0; 3], [0.0, 1.0, 2.0]);
        let y = [1.5, 2.0, 5.5];
        let mut sums = SandwichSums::new(2);
        sums.update(&config, (&y, &one, &[0.0; 3], &one), &[&one, &x]);
        // Residuals 0.5, -1, 0.5.
        assert_eq!(sums.meat, vec![1.5, 1.5, 1.5, 2.0]);
        assert_eq!(sums.score, vec![0.0, 0.0]);
        assert_eq!(sums.xtwx, vec![3.0, 3.0, 3.0, 5.0]);
    }
}
