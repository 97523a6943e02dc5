//! `sgd_gradient(config, y, offset, x1, ..., xk)` and
//! `sgd_newton(config, y, offset, x1, ..., xk)`: one round of federated
//! gradient descent (FedSGD) as a mergeable aggregate.
//!
//! The only shared input is `config`, a constant string naming the model and
//! the current parameters: `model=logistic;theta=0.1,-0.2,0.03` (floats
//! written so that they round-trip exactly). Each client returns sums of a
//! fixed size whatever its rows ([`SgdSums`]): the example count, the loss
//! sum, the number of rows whose response is outside the model's range, and
//! the gradient sum Σ ∇ℓᵢ(θ) (k values). `sgd_newton` also returns the
//! curvature block Σ ℓ''ᵢ xᵢxᵢ' (k × k) for a Newton step; `sgd_gradient`
//! does no k² work per row. Rows with a NULL in any argument are dropped.
//!
//! Per-record losses, with η = x'θ + offset:
//! - `linear`: ½ (y − η)²
//! - `logistic`: log(1 + e^η) − y η (y in [0, 1])
//! - `poisson`: e^η − y η (y ≥ 0; the negative log-likelihood without its
//!   constant log y!)
//!
//! Per record batch: η by one axpy per column, the residuals ∂ℓ/∂η
//! elementwise, the gradient by one dot product per column, and the
//! curvature by one blocked pass of the symmetric kernel ([`crate::gram`]).

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use ndarray::{Array1, Array2, ArrayView1};

use crate::flat_state;
use crate::gram::{add_weighted_gram, linear_predictor};

/// Leading arguments before the regressors: config, y, offset.
const LEADING: usize = 3;
/// Scalar sums before the gradient in the state: n, loss, invalid.
const SCALARS: usize = 3;

/// The models FedSGD fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SgdModel {
    /// Squared loss, identity link.
    Linear,
    /// Log loss, logit link.
    Logistic,
    /// Poisson negative log-likelihood, log link.
    Poisson,
}

impl SgdModel {
    pub const NAMES: &'static str = "linear, logistic, poisson";

    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "linear" => Ok(Self::Linear),
            "logistic" => Ok(Self::Logistic),
            "poisson" => Ok(Self::Poisson),
            other => Err(format!(
                "unknown model `{other}`: fedsgd fits {}",
                Self::NAMES
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::Logistic => "logistic",
            Self::Poisson => "poisson",
        }
    }

    /// Why `y` is outside the model's range, if it is.
    pub fn check_response(self, y: f64) -> Option<&'static str> {
        match self {
            Self::Linear if !y.is_finite() => Some("linear responses must be finite"),
            Self::Logistic if !(0.0..=1.0).contains(&y) => {
                Some("logistic responses must be in [0, 1]")
            }
            Self::Poisson if !(y >= 0.0 && y.is_finite()) => {
                Some("poisson responses must be non-negative")
            }
            _ => None,
        }
    }

    /// The loss of one record, its derivative and second derivative in η.
    #[inline]
    pub fn loss(self, y: f64, eta: f64) -> (f64, f64, f64) {
        match self {
            Self::Linear => (0.5 * (y - eta) * (y - eta), eta - y, 1.0),
            Self::Logistic => {
                let softplus = eta.max(0.0) + (-eta.abs()).exp().ln_1p();
                let p = if eta >= 0.0 {
                    1.0 / (1.0 + (-eta).exp())
                } else {
                    let e = eta.exp();
                    e / (1.0 + e)
                };
                (softplus - y * eta, p - y, p * (1.0 - p))
            }
            Self::Poisson => {
                let mu = eta.exp();
                (mu - y * eta, mu - y, mu)
            }
        }
    }
}

/// What the coordinator sends for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct SgdConfig {
    pub model: SgdModel,
    pub theta: Vec<f64>,
}

impl SgdConfig {
    /// The config string the aggregate reads (floats round-trip exactly).
    pub fn encode(&self) -> String {
        let theta: Vec<String> = self.theta.iter().map(|t| format!("{t:?}")).collect();
        format!("model={};theta={}", self.model.name(), theta.join(","))
    }

    /// Reads a config string.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let mut model = None;
        let mut theta = Vec::new();
        for part in text.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("bad config entry `{part}`"))?;
            match key {
                "model" => model = Some(SgdModel::parse(value)?),
                "theta" => {
                    theta = value
                        .split(',')
                        .filter(|v| !v.is_empty())
                        .map(|v| {
                            v.parse::<f64>()
                                .map_err(|e| format!("bad theta `{v}`: {e}"))
                        })
                        .collect::<std::result::Result<_, _>>()?
                }
                other => return Err(format!("unknown config key `{other}`")),
            }
        }
        Ok(Self {
            model: model.ok_or("config needs model=")?,
            theta,
        })
    }
}

/// The merged sums of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct SgdSums {
    /// Rows used.
    pub n: f64,
    /// Σ ℓᵢ(θ).
    pub loss: f64,
    /// Rows whose response is outside the model's range (not used).
    pub invalid: f64,
    /// Σ ∇ℓᵢ(θ).
    pub gradient: Array1<f64>,
    /// Σ ℓ''ᵢ xᵢxᵢ', for `sgd_newton`.
    pub curvature: Option<Array2<f64>>,
}

impl SgdSums {
    fn new(k: usize, curvature: bool) -> Self {
        Self::from_slice(&vec![0.0; state_len(k, curvature)], k)
    }

    /// Reads the flat layout (n, loss, invalid, gradient, curvature
    /// row-major if present).
    pub fn from_slice(values: &[f64], k: usize) -> Self {
        let curvature = (values.len() == state_len(k, true)).then(|| {
            Array2::from_shape_vec((k, k), values[SCALARS + k..].to_vec()).expect("k × k")
        });
        Self {
            n: values[0],
            loss: values[1],
            invalid: values[2],
            gradient: Array1::from_vec(values[SCALARS..SCALARS + k].to_vec()),
            curvature,
        }
    }

    /// The flat layout.
    pub fn to_vec(&self) -> Vec<f64> {
        let mut v = vec![self.n, self.loss, self.invalid];
        v.extend(self.gradient.iter());
        if let Some(c) = &self.curvature {
            v.extend(c.iter());
        }
        v
    }

    /// Adds one batch of complete rows.
    fn update(&mut self, config: &SgdConfig, y: &[f64], offset: &[f64], x: &[&[f64]]) {
        let rows = y.len();
        let model = config.model;
        // η = Xθ + offset, one axpy per column.
        let mut eta = vec![0.0; rows];
        linear_predictor(&mut eta, offset, x, &config.theta);
        let mut residual = Array1::<f64>::zeros(rows);
        let mut weight = self.curvature.as_ref().map(|_| vec![0.0; rows]);
        for i in 0..rows {
            if model.check_response(y[i]).is_some() {
                self.invalid += 1.0;
                continue;
            }
            let (loss, d1, d2) = model.loss(y[i], eta[i]);
            self.n += 1.0;
            self.loss += loss;
            residual[i] = d1;
            if let Some(w) = weight.as_mut() {
                w[i] = d2;
            }
        }
        for (g, column) in self.gradient.iter_mut().zip(x) {
            *g += ArrayView1::from(*column).dot(&residual);
        }
        if let (Some(curvature), Some(weight)) = (self.curvature.as_mut(), weight) {
            let gram = curvature.as_slice_mut().expect("standard layout");
            add_weighted_gram(gram, &mut [], x, &weight, None);
        }
    }
}

fn state_len(k: usize, curvature: bool) -> usize {
    SCALARS + k + if curvature { k * k } else { 0 }
}

/// The aggregate `sgd_gradient`, or with the curvature block `sgd_newton`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SgdStep {
    signature: Signature,
    curvature: bool,
}

impl SgdStep {
    fn new(curvature: bool) -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
            curvature,
        }
    }
}

/// `sgd_gradient(config, y, offset, x1, ..., xk)`.
pub fn sgd_gradient() -> AggregateUDF {
    AggregateUDF::from(SgdStep::new(false))
}

/// `sgd_newton(config, y, offset, x1, ..., xk)`.
pub fn sgd_newton() -> AggregateUDF {
    AggregateUDF::from(SgdStep::new(true))
}

impl AggregateUDFImpl for SgdStep {
    fn name(&self) -> &str {
        if self.curvature {
            "sgd_newton"
        } else {
            "sgd_gradient"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        flat_state::coerce_step_arguments(
            self.name(),
            "config, y, offset, x1, ..., xk",
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
            state_len(k, self.curvature),
        )])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let config =
            SgdConfig::decode(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let k = args.exprs.len() - LEADING;
        if config.theta.len() != k {
            return plan_err!(
                "{}: {} parameters for {k} regressors",
                self.name(),
                config.theta.len()
            );
        }
        Ok(Box::new(SgdAccumulator {
            name: self.name().to_string(),
            config,
            sums: SgdSums::new(k, self.curvature),
        }))
    }
}

#[derive(Debug)]
struct SgdAccumulator {
    name: String,
    config: SgdConfig,
    sums: SgdSums,
}

impl Accumulator for SgdAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let columns = crate::comoments::complete_rows(&values[1..])?;
        let slices: Vec<&[f64]> = columns
            .iter()
            .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
            .collect();
        self.sums
            .update(&self.config, slices[0], slices[1], &slices[2..]);
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let k = self.sums.gradient.len();
        let mut total = self.sums.to_vec();
        flat_state::merge_into(&self.name, &mut total, &states[0])?;
        self.sums = SgdSums::from_slice(&total, k);
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![flat_state::state_value(self.sums.to_vec())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.sums.to_vec()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * (self.config.theta.len() + self.sums.to_vec().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_exactly() {
        let config = SgdConfig {
            model: SgdModel::Poisson,
            theta: vec![0.1, -1.0 / 3.0, 1e-300, 0.0],
        };
        assert_eq!(SgdConfig::decode(&config.encode()).unwrap(), config);
        assert!(SgdConfig::decode("model=probit;theta=1").is_err());
    }

    #[test]
    fn derivatives_match_finite_differences() {
        for model in [SgdModel::Linear, SgdModel::Logistic, SgdModel::Poisson] {
            for (y, eta) in [(1.0, 0.3), (0.0, -2.0), (1.0, 4.0), (0.0, 30.0)] {
                let h = 1e-6;
                let (l, d1, d2) = model.loss(y, eta);
                let (lp, d1p, _) = model.loss(y, eta + h);
                let (lm, d1m, _) = model.loss(y, eta - h);
                let scale = 1.0 + l.abs();
                assert!(
                    ((lp - lm) / (2.0 * h) - d1).abs() < 1e-6 * scale,
                    "{model:?} {eta}"
                );
                assert!(
                    ((d1p - d1m) / (2.0 * h) - d2).abs() < 1e-5 * scale,
                    "{model:?} {eta}"
                );
            }
        }
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        crate::testing::assert_split_invariant(
            "sgd_gradient('model=logistic;theta=0.5,-0.01,0.02', CASE WHEN b > 0 THEN 1.0 ELSE 0.0 END, 0.0, 1.0, a, c)",
        )
        .await;
        crate::testing::assert_split_invariant(
            "sgd_newton('model=poisson;theta=0.1,0.001', abs(b) * 100, 0.0, 1.0, a)",
        )
        .await;
    }
}
