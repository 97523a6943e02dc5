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
//! elementwise (logistic and poisson rows four at a time with vectorized
//! `exp` and `log`, [`crate::lanes`]), the gradient by one dot product per
//! column, and the curvature by one blocked pass of the symmetric kernel
//! ([`crate::gram`]).
//!
//! Why this file is over 600 lines: it holds the FedSGD round aggregates (gradient and Newton), which share their accumulator, which read together
//! (the style's one aggregate, one file); its tests are in the same file.

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use ndarray::{Array1, Array2, ArrayView1};

use crate::flat_state;
use crate::function_doc::{DocOption, FunctionDoc, FunctionFamily};
use crate::gram::{BLOCK, add_weighted_gram, linear_predictor};
use crate::lanes::{self, LANES, Lanes, Vec4, WithLanes};

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

    /// The length of the flat layout ([`SgdSums::to_vec`]).
    pub fn flat_len(&self) -> usize {
        3 + self.gradient.len() + self.curvature.as_ref().map_or(0, |c| c.len())
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

    /// Adds one batch of complete rows: η for the whole batch, the rows'
    /// losses and derivatives block by block (four rows at a time where
    /// [`vector_rows`] admits the block), then the gradient and curvature.
    fn update(&mut self, config: &SgdConfig, y: &[f64], offset: &[f64], x: &[&[f64]]) {
        let rows = y.len();
        let model = config.model;
        // η = Xθ + offset, one axpy per column.
        let mut eta = vec![0.0; rows];
        linear_predictor(&mut eta, offset, x, &config.theta);
        let mut residual = vec![0.0; rows];
        let mut weight = self.curvature.as_ref().map(|_| vec![0.0; rows]);
        let mut start = 0;
        while start < rows {
            let end = (start + BLOCK).min(rows);
            let whole = start + (end - start) / LANES * LANES;
            let block_weight = weight.as_mut().map(|w| &mut w[start..whole]);
            let vectorized = vector_rows(
                model,
                &y[start..whole],
                &eta[start..whole],
                &mut residual[start..whole],
                block_weight,
            );
            let scalar_from = match vectorized {
                Some((n, loss)) => {
                    self.n += n;
                    self.loss += loss;
                    whole
                }
                None => start,
            };
            for i in scalar_from..end {
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
            start = end;
        }
        let residual = ArrayView1::from(&residual);
        for (g, column) in self.gradient.iter_mut().zip(x) {
            *g += ArrayView1::from(*column).dot(&residual);
        }
        if let (Some(curvature), Some(weight)) = (self.curvature.as_mut(), weight) {
            let gram = curvature.as_slice_mut().expect("standard layout");
            add_weighted_gram(gram, &mut [], x, &weight, None);
        }
    }
}

/// Beyond this |η| the vectorized `exp` leaves its range: such rows take
/// the row-by-row path.
const VECTOR_ETA_LIMIT: f64 = 700.0;

/// The losses and derivatives of a block of rows (a multiple of four) of
/// the logistic or poisson model, four at a time with the vectorized `exp`
/// and `log` of [`crate::lanes`]: the rows' count and loss sum, with each
/// row's ∂ℓ/∂η in `residual` and ∂²ℓ/∂η² in `weight`. `None` (nothing
/// written) for the linear model, whose rows need no transcendental, and
/// for a block with a response outside the model's range or |η| beyond
/// [`VECTOR_ETA_LIMIT`]: the row loop takes those.
fn vector_rows(
    model: SgdModel,
    y: &[f64],
    eta: &[f64],
    residual: &mut [f64],
    weight: Option<&mut [f64]>,
) -> Option<(f64, f64)> {
    if y.is_empty() || model == SgdModel::Linear {
        return None;
    }
    // `&` rather than `&&`: no branch per row, so the checks vectorize.
    let eta_inside = eta
        .iter()
        .fold(true, |all, e| all & (e.abs() <= VECTOR_ETA_LIMIT));
    let y_inside = y.iter().fold(true, |all, &y| {
        all & match model {
            SgdModel::Logistic => (0.0..=1.0).contains(&y),
            _ => (0.0..f64::INFINITY).contains(&y),
        }
    });
    if !(eta_inside && y_inside) {
        return None;
    }
    let loss = lanes::dispatch(SgdRows {
        model,
        y,
        eta,
        residual,
        weight,
    });
    Some((y.len() as f64, loss))
}

/// The arguments of [`vector_rows`], run over the lanes chosen.
struct SgdRows<'a> {
    model: SgdModel,
    y: &'a [f64],
    eta: &'a [f64],
    residual: &'a mut [f64],
    weight: Option<&'a mut [f64]>,
}

impl WithLanes for SgdRows<'_> {
    type Output = f64;

    #[inline(always)]
    fn run<L: Lanes>(self, lanes: L) -> f64 {
        let SgdRows {
            model,
            y,
            eta,
            residual,
            mut weight,
        } = self;
        let c = |v: f64| Vec4::splat(lanes, v);
        let (zero, one) = (c(0.0), c(1.0));
        let mut loss = zero;
        for r in (0..y.len()).step_by(LANES) {
            let (yv, e) = (Vec4::load(lanes, y, r), Vec4::load(lanes, eta, r));
            let (row_loss, d1, d2) = match model {
                SgdModel::Logistic => {
                    // With t = e^−|η|: softplus(η) = max(η, 0) + log1p(t),
                    // p = 1 / (1 + t) for η ≥ 0 and t / (1 + t) below, as
                    // the row loop has them.
                    let t = (zero - e.max(zero - e)).exp();
                    let u = one + t;
                    // log1p(t) from log(1 + t), corrected for the rounding
                    // of 1 + t (exact to an ulp; t itself when 1 + t = 1).
                    let log1p = u.ln() - ((u - one) - t) / u;
                    let softplus = e.max(zero) + log1p;
                    let p = e.lt(zero).select(t, one) / u;
                    (softplus - yv * e, p - yv, p * (one - p))
                }
                _ => {
                    let mu = e.exp();
                    (mu - yv * e, mu - yv, mu)
                }
            };
            loss += row_loss;
            d1.store(residual, r);
            if let Some(w) = weight.as_deref_mut() {
                d2.store(w, r);
            }
        }
        loss.sum()
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
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

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
        size_of_val(self) + 8 * (self.config.theta.len() + self.sums.flat_len())
    }
}

/// The documentation of `sgd_gradient`.
pub const GRADIENT_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "One round of federated gradient descent (the round `fedsgd` runs): the example count, the loss sum and the gradient sum Σ ∇ℓᵢ(θ) at the parameters θ of the config.",
    syntax: "sgd_gradient('model=logistic;theta=t1,...,tk', y, offset, x1, ..., xk)",
    arguments: &[
        (
            "config",
            "a constant string of `key=value` entries separated by `;` (the options below)",
        ),
        ("y", "the response"),
        (
            "offset",
            "a known term of the linear predictor (0 for none)",
        ),
        (
            "x1, ..., xk",
            "the design columns (an intercept is a column of 1)",
        ),
    ],
    options: &[
        DocOption {
            name: "model",
            default: "required",
            meaning: "linear, logistic or poisson",
        },
        DocOption {
            name: "theta",
            default: "required",
            meaning: "the current parameters, k numbers separated by commas",
        },
    ],
    returns: "the merged sums as `list<float64>`: count, loss sum, rows out of range, then the k gradient sums",
    releases: "k + 3 numbers, whatever its rows: the example count, the loss sum, the rows out of the model's range and the gradient sum.",
    example: "SELECT sgd_gradient('model=logistic;theta=-3,0.04', event, 0.0, 1.0, age) AS sums FROM clinic",
};

/// The documentation of `sgd_newton`.
pub const NEWTON_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "One round of federated Newton descent (the round of `fedsgd` with `optimizer=newton`): the sums of `sgd_gradient` and the curvature block Σ ℓ''ᵢ xᵢxᵢ'.",
    syntax: "sgd_newton('model=logistic;theta=t1,...,tk', y, offset, x1, ..., xk)",
    arguments: &[
        (
            "config",
            "a constant string of `key=value` entries separated by `;` (the options below)",
        ),
        ("y", "the response"),
        (
            "offset",
            "a known term of the linear predictor (0 for none)",
        ),
        (
            "x1, ..., xk",
            "the design columns (an intercept is a column of 1)",
        ),
    ],
    options: &[
        DocOption {
            name: "model",
            default: "required",
            meaning: "linear, logistic or poisson",
        },
        DocOption {
            name: "theta",
            default: "required",
            meaning: "the current parameters, k numbers separated by commas",
        },
    ],
    returns: "the merged sums as `list<float64>`: those of `sgd_gradient`, then the k × k curvature block",
    releases: "k² + k + 3 numbers, whatever its rows: those of `sgd_gradient` and the k × k curvature block.",
    example: "SELECT sgd_newton('model=logistic;theta=-3,0.04', event, 0.0, 1.0, age) AS sums FROM clinic",
};

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

    /// Deterministic values in [0, 1).
    fn uniform(n: usize, seed: u64) -> Vec<f64> {
        crate::testing::values(n, seed)
            .iter()
            .map(|v| (v + 1.0) / 2.0)
            .collect()
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn vectorized_rows_agree_with_the_row_formulas() {
        let rows = 4 * 64;
        // η over the whole admitted range, tails included.
        let eta: Vec<f64> = uniform(rows, 3)
            .iter()
            .enumerate()
            .map(|(i, u)| match i % 4 {
                0 => 1400.0 * u - 700.0,
                1 => 60.0 * u - 30.0,
                _ => 8.0 * u - 4.0,
            })
            .collect();
        let cases = [
            (SgdModel::Logistic, uniform(rows, 5)),
            (
                SgdModel::Logistic,
                uniform(rows, 6).iter().map(|u| u.round()).collect(),
            ),
            (
                SgdModel::Poisson,
                uniform(rows, 7)
                    .iter()
                    .map(|u| (u * 20.0).floor())
                    .collect(),
            ),
        ];
        for (model, y) in cases {
            let mut residual = vec![0.0; rows];
            let mut weight = vec![0.0; rows];
            let (n, loss) = vector_rows(model, &y, &eta, &mut residual, Some(&mut weight)).unwrap();
            assert_eq!(n, rows as f64);
            let mut expected_loss = 0.0;
            for i in 0..rows {
                let (l, d1, d2) = model.loss(y[i], eta[i]);
                expected_loss += l;
                assert!(close(residual[i], d1, 1e-14), "{model:?} row {i}");
                assert!(close(weight[i], d2, 1e-14), "{model:?} row {i}");
            }
            assert!(close(loss, expected_loss, 1e-13), "{model:?}");
        }
    }

    #[test]
    fn blocks_the_vectorized_rows_cannot_take_go_row_by_row() {
        let (y, eta) = ([0.0, 1.0, 1.0, 0.0], [0.1, -0.2, 0.3, 0.0]);
        let mut out = [0.0; 4];
        assert!(vector_rows(SgdModel::Logistic, &y, &eta, &mut out, None).is_some());
        // The linear model, a response out of range, an η beyond the limit.
        assert!(vector_rows(SgdModel::Linear, &y, &eta, &mut out, None).is_none());
        let bad_y = [0.0, 2.0, 1.0, 0.0];
        assert!(vector_rows(SgdModel::Logistic, &bad_y, &eta, &mut out, None).is_none());
        let negative = [0.0, -1.0, 1.0, 0.0];
        assert!(vector_rows(SgdModel::Poisson, &negative, &eta, &mut out, None).is_none());
        let far = [0.1, 701.0, 0.3, 0.0];
        assert!(vector_rows(SgdModel::Poisson, &y, &far, &mut out, None).is_none());
        // A batch with such a block still counts every row as before.
        let config = SgdConfig {
            model: SgdModel::Logistic,
            theta: vec![1.0],
        };
        let x: Vec<f64> = (0..9).map(|i| i as f64 / 4.0 - 1.0).collect();
        let mut y: Vec<f64> = (0..9).map(|i| (i % 2) as f64).collect();
        y[2] = 3.0;
        let offset = vec![0.0; 9];
        let mut sums = SgdSums::new(1, true);
        sums.update(&config, &y, &offset, &[&x]);
        assert_eq!((sums.n, sums.invalid), (8.0, 1.0));
        assert_eq!(sums.flat_len(), sums.to_vec().len());
        assert_eq!(SgdSums::new(3, false).flat_len(), 3 + 3);
        let (mut loss, mut gradient, mut curvature) = (0.0, 0.0, 0.0);
        for i in (0..9).filter(|&i| i != 2) {
            let (l, d1, d2) = config.model.loss(y[i], x[i]);
            loss += l;
            gradient += d1 * x[i];
            curvature += d2 * x[i] * x[i];
        }
        assert!(close(sums.loss, loss, 1e-14));
        assert!(close(sums.gradient[0], gradient, 1e-14));
        assert!(close(sums.curvature.unwrap()[[0, 0]], curvature, 1e-14));
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
