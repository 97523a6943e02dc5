//! `irls_step(config, y, trials, offset, weight, x1, ..., xk)`: one round of
//! iteratively reweighted least squares for a GLM, as a mergeable aggregate.
//!
//! The only shared input is `config`, a constant string naming the family,
//! the link, the current coefficients and the null model's mean:
//! `family=binomial;link=logit;beta=0.1,-0.2;null_mu=0.3` (no `beta`: start
//! from R's `mustart`; `null_mu=offset`: the null mean is the inverse link
//! of each row's offset; `xtwx=no`: the round's X'WX and X'Wz are not
//! wanted, and are left zero). Each client returns sums of fixed size whatever
//! its rows ([`IrlsSums`]): X'WX, X'Wz, the deviance, Pearson's χ², the null
//! deviance, the log-likelihood terms of R's `aic`, and counts. Rows with a
//! NULL in any argument are dropped; rows with a response outside the
//! family's range are counted (the coordinator refuses the fit).
//!
//! Per record batch: η by one pass per column (axpy), the working weights
//! and responses elementwise, then X'WX and X'Wz by one blocked pass of
//! the symmetric kernel ([`crate::gram`]). Logistic and poisson rounds
//! compute the row-wise part four rows at a time ([`crate::irls_canonical`]).
//!
//! Why this file is over 600 lines: it holds the IRLS round's aggregate and its accumulator, which read together
//! (the style's one aggregate, one file); its tests are in a file of their own.

use datafusion::arrow::array::{ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use ndarray::{Array1, Array2};

use crate::family::{
    Family, Link, family_from_config, ln_binomial_pmf, ln_factorial, ln_negative_binomial_pmf,
    ln_whole, whole_count,
};
use crate::flat_state;
use crate::function_doc::{DocOption, FunctionDoc, FunctionFamily};
use crate::gram::{BLOCK, GramLanes, linear_predictor, masked_where_unweighted, mirror_upper};
use crate::irls_canonical::{Canonical, CanonicalRows, LANES, RowSums};

/// Leading arguments before the regressors: config, y, trials, offset, weight.
const LEADING: usize = 5;
/// Scalar sums before X'WX and X'Wz in the state.
const SCALARS: usize = 12;

/// What the coordinator sends for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct IrlsConfig {
    pub family: Family,
    pub link: Link,
    /// Current coefficients; `None` in the first round (start from `mustart`).
    pub beta: Option<Vec<f64>>,
    pub null_mu: NullMean,
    /// Whether the round computes X'WX and X'Wz. A round whose estimate
    /// ends the fit needs only its deviance and the other scalars, and
    /// skips the weighted cross-products, about a third of a round.
    pub xtwx: bool,
}

/// The mean of the null model, for the null deviance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NullMean {
    /// Not computed this round.
    None,
    /// One value for every row (the weighted mean of y, with an intercept).
    Value(f64),
    /// The inverse link of each row's offset (no intercept).
    Offset,
}

impl IrlsConfig {
    /// The config string the aggregate reads (floats round-trip exactly).
    pub fn encode(&self) -> String {
        let mut s = self.family.config_entries(self.link);
        if let Some(beta) = &self.beta {
            let values: Vec<String> = beta.iter().map(|b| format!("{b:?}")).collect();
            s.push_str(&format!(";beta={}", values.join(",")));
        }
        match self.null_mu {
            NullMean::None => {}
            NullMean::Value(v) => s.push_str(&format!(";null_mu={v:?}")),
            NullMean::Offset => s.push_str(";null_mu=offset"),
        }
        if !self.xtwx {
            s.push_str(";xtwx=no");
        }
        s
    }

    /// Reads a config string.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let mut family = None;
        let mut link = None;
        let mut theta = None;
        let mut beta = None;
        let mut null_mu = NullMean::None;
        let mut xtwx = true;
        for part in text.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("bad config entry `{part}`"))?;
            match key {
                "family" => family = Some(value.to_string()),
                "link" => link = Some(value.to_string()),
                "theta" => theta = Some(value.to_string()),
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
                "null_mu" if value == "offset" => null_mu = NullMean::Offset,
                "xtwx" if value == "no" => xtwx = false,
                "null_mu" => {
                    null_mu =
                        NullMean::Value(value.parse().map_err(|e| format!("bad null_mu: {e}"))?)
                }
                other => return Err(format!("unknown config key `{other}`")),
            }
        }
        let (family, link) = family_from_config(family, link, theta)?;
        Ok(Self {
            family,
            link,
            beta,
            null_mu,
            xtwx,
        })
    }
}

/// The merged sums of one IRLS round.
#[derive(Debug, Clone, PartialEq)]
pub struct IrlsSums {
    /// Rows used.
    pub n: f64,
    /// Σ w (w: prior weight × trials).
    pub sum_w: f64,
    /// Σ w y.
    pub sum_wy: f64,
    /// Deviance at the round's μ.
    pub deviance: f64,
    /// Pearson's χ², Σ w (y − μ)² / V(μ).
    pub pearson: f64,
    /// Deviance of the null model (if the round computed it).
    pub null_deviance: f64,
    /// Σ prior weight × log-probability (binomial, poisson).
    pub log_pmf: f64,
    /// Σ w log y, Σ w log μ, Σ w y/μ (continuous families' log-likelihood).
    pub sum_w_log_y: f64,
    pub sum_w_log_mu: f64,
    pub sum_w_y_over_mu: f64,
    /// Rows whose response is outside the family's range.
    pub invalid: f64,
    /// Rows whose fitted mean is numerically at the boundary (0 or 1).
    pub boundary: f64,
    /// X'WX (k × k) and X'Wz (k), W the working weights.
    pub xtwx: Array2<f64>,
    pub xtwz: Array1<f64>,
}

impl IrlsSums {
    fn new(k: usize) -> Self {
        Self::from_slice(&vec![0.0; SCALARS + k * k + k], k)
    }

    /// Reads the flat layout (scalars, X'WX row-major, X'Wz).
    pub fn from_slice(values: &[f64], k: usize) -> Self {
        let s = |i: usize| values[i];
        Self {
            n: s(0),
            sum_w: s(1),
            sum_wy: s(2),
            deviance: s(3),
            pearson: s(4),
            null_deviance: s(5),
            log_pmf: s(6),
            sum_w_log_y: s(7),
            sum_w_log_mu: s(8),
            sum_w_y_over_mu: s(9),
            invalid: s(10),
            boundary: s(11),
            xtwx: Array2::from_shape_vec((k, k), values[SCALARS..SCALARS + k * k].to_vec())
                .expect("k × k"),
            xtwz: Array1::from_vec(values[SCALARS + k * k..SCALARS + k * k + k].to_vec()),
        }
    }

    /// The length of the flat layout ([`IrlsSums::to_vec`]).
    pub fn flat_len(&self) -> usize {
        SCALARS + self.xtwx.len() + self.xtwz.len()
    }

    /// The flat layout.
    pub fn to_vec(&self) -> Vec<f64> {
        let mut v = vec![
            self.n,
            self.sum_w,
            self.sum_wy,
            self.deviance,
            self.pearson,
            self.null_deviance,
            self.log_pmf,
            self.sum_w_log_y,
            self.sum_w_log_mu,
            self.sum_w_y_over_mu,
            self.invalid,
            self.boundary,
        ];
        v.extend(self.xtwx.iter());
        v.extend(self.xtwz.iter());
        v
    }

    /// Adds one batch of complete rows, in blocks of [`BLOCK`] rows that
    /// stay in the L2 cache: per block η, the working weights and
    /// responses, then the block's part of X'WX and X'Wz.
    #[cfg(test)]
    fn update(
        &mut self,
        config: &IrlsConfig,
        y: &[f64],
        trials: &[f64],
        offset: &[f64],
        weight: &[f64],
        x: &[&[f64]],
    ) {
        let mut scratch = Scratch::default();
        self.update_in(&mut scratch, config, (y, trials, offset, weight), x);
    }

    /// [`IrlsSums::update`] in buffers kept from batch to batch.
    fn update_in(
        &mut self,
        scratch: &mut Scratch,
        config: &IrlsConfig,
        (y, trials, offset, weight): (&[f64], &[f64], &[f64], &[f64]),
        x: &[&[f64]],
    ) {
        let rows = y.len();
        let Scratch {
            eta,
            working,
            wz,
            gram,
        } = scratch;
        // Every buffer is written before it is read (η by the linear
        // predictor, the working weights and responses by `add_rows`).
        for buffer in [&mut *eta, &mut *working, &mut *wz] {
            if buffer.len() < BLOCK.min(rows) {
                buffer.resize(BLOCK.min(rows), 0.0);
            }
        }
        let mut block: Vec<&[f64]> = Vec::with_capacity(x.len());
        // The batch's X'WX and X'Wz, added out once at its end.
        let gram = match gram {
            Some(gram) if gram.columns() == x.len() => {
                gram.clear();
                gram
            }
            _ => gram.insert(GramLanes::new(x.len())),
        };
        let mut start = 0;
        while start < rows {
            let end = (start + BLOCK).min(rows);
            let n = end - start;
            block.clear();
            block.extend(x.iter().map(|column| &column[start..end]));
            let eta = match &config.beta {
                Some(beta) => {
                    linear_predictor(&mut eta[..n], &offset[start..end], &block, beta);
                    Some(&eta[..n])
                }
                None => None,
            };
            self.add_rows(
                config,
                Rows {
                    y: &y[start..end],
                    trials: &trials[start..end],
                    offset: &offset[start..end],
                    weight: &weight[start..end],
                    eta,
                },
                &mut working[..n],
                &mut wz[..n],
            );
            start = end;
            if !config.xtwx {
                continue;
            }
            let masked = masked_where_unweighted(&block, &working[..n]);
            let masked: Option<Vec<&[f64]>> = masked
                .as_ref()
                .map(|m| m.iter().map(|c| c.as_slice()).collect());
            gram.add(
                masked.as_deref().unwrap_or(&block),
                &working[..n],
                Some(&wz[..n]),
            );
        }
        let xtwx = self.xtwx.as_slice_mut().expect("standard layout");
        gram.add_upper_to(xtwx, self.xtwz.as_slice_mut().expect("contiguous"));
        mirror_upper(xtwx, x.len());
    }

    /// The row-wise part of one block: the sums, and each row's working
    /// weight and weighted working response (0 for a row that does not
    /// enter X'WX; whatever the buffers held before is overwritten).
    /// Logistic and poisson rounds take the vectorized pass
    /// ([`crate::irls_canonical`]) for the rows it admits, four at a time;
    /// the rest go row by row.
    fn add_rows(&mut self, config: &IrlsConfig, rows: Rows, working: &mut [f64], wz: &mut [f64]) {
        let whole = rows.y.len() / LANES * LANES;
        let vectorized = Canonical::of(config.family, config.link)
            .filter(|_| whole > 0)
            .and_then(|kind| {
                kind.add_rows(
                    CanonicalRows {
                        y: &rows.y[..whole],
                        trials: &rows.trials[..whole],
                        offset: &rows.offset[..whole],
                        weight: &rows.weight[..whole],
                        eta: rows.eta.map(|eta| &eta[..whole]),
                    },
                    &mut working[..whole],
                    &mut wz[..whole],
                )
            });
        // The general loop sets only the rows that enter X'WX, so its rows
        // start from zero (the vectorized pass, when it gives up, has
        // written a weight for every row, those it does not admit too).
        let Some(sums) = vectorized else {
            working.fill(0.0);
            wz.fill(0.0);
            return self.add_general_rows(config, rows, working, wz);
        };
        working[whole..].fill(0.0);
        wz[whole..].fill(0.0);
        self.add_canonical(sums);
        // Every admitted row has weight = prior weight (one trial).
        self.add_null_deviance(
            config,
            &rows.y[..whole],
            &rows.weight[..whole],
            &rows.offset[..whole],
        );
        let rest = Rows {
            y: &rows.y[whole..],
            trials: &rows.trials[whole..],
            offset: &rows.offset[whole..],
            weight: &rows.weight[whole..],
            eta: rows.eta.map(|eta| &eta[whole..]),
        };
        self.add_general_rows(config, rest, &mut working[whole..], &mut wz[whole..]);
    }

    /// Adds the sums of the vectorized pass.
    fn add_canonical(&mut self, sums: RowSums) {
        self.n += sums.n;
        self.sum_w += sums.sum_w;
        self.sum_wy += sums.sum_wy;
        self.deviance += sums.deviance;
        self.log_pmf += sums.log_pmf;
        self.pearson += sums.pearson;
        self.boundary += sums.boundary;
    }

    /// The null deviance of rows the vectorized pass took (weight w each).
    fn add_null_deviance(&mut self, config: &IrlsConfig, y: &[f64], w: &[f64], offset: &[f64]) {
        let (family, link) = (config.family, config.link);
        match config.null_mu {
            NullMean::None => {}
            // Admitted binomial rows have y = 0 or 1: the two residuals at
            // unit weight, times w (w · 2a is 2 · w · a exactly), instead
            // of a logarithm per row.
            NullMean::Value(m) if family == Family::Binomial => {
                let (one, zero) = (
                    family.deviance_residual(1.0, m, 1.0),
                    family.deviance_residual(0.0, m, 1.0),
                );
                for (&yi, &wi) in y.iter().zip(w) {
                    self.null_deviance += wi * if yi == 1.0 { one } else { zero };
                }
            }
            // A poisson row's residual at unit weight depends on its count
            // alone: computed once per count met in the batch (a logarithm
            // per count, not per row), times w as for binomial rows.
            NullMean::Value(m) if family == Family::Poisson => {
                let mut unit = [f64::NAN; NULL_COUNTS];
                for (&yi, &wi) in y.iter().zip(w) {
                    self.null_deviance += match whole_count(yi, NULL_COUNTS) {
                        Some(k) => {
                            if unit[k].is_nan() {
                                unit[k] = family.deviance_residual(yi, m, 1.0);
                            }
                            wi * unit[k]
                        }
                        None => family.deviance_residual(yi, m, wi),
                    };
                }
            }
            NullMean::Value(m) => {
                for (&yi, &wi) in y.iter().zip(w) {
                    self.null_deviance += family.deviance_residual(yi, m, wi);
                }
            }
            NullMean::Offset => {
                for ((&yi, &wi), &o) in y.iter().zip(w).zip(offset) {
                    self.null_deviance += family.deviance_residual(yi, link.inverse(o), wi);
                }
            }
        }
    }

    /// The row-wise part, one row at a time, for every family and link.
    fn add_general_rows(
        &mut self,
        config: &IrlsConfig,
        rows: Rows,
        working: &mut [f64],
        wz: &mut [f64],
    ) {
        let Rows {
            y,
            trials,
            offset,
            weight,
            eta,
        } = rows;
        let (family, link) = (config.family, config.link);
        for i in 0..y.len() {
            let (yi, prior) = (y[i], weight[i]);
            let w = if family == Family::Binomial {
                prior * trials[i]
            } else {
                prior
            };
            if w <= 0.0 {
                continue;
            }
            if family.check_response(yi).is_some() {
                self.invalid += 1.0;
                continue;
            }
            let (eta_i, mu, mu_eta) = match &eta {
                Some(eta) => {
                    let (mu, mu_eta) = link.inverse_and_derivative(eta[i]);
                    (eta[i], mu, mu_eta)
                }
                None => {
                    let mu = family.start_mu(yi, w);
                    let eta_i = link.link(mu);
                    (eta_i, mu, link.mu_eta(eta_i))
                }
            };
            let variance = family.variance(mu);
            self.n += 1.0;
            self.sum_w += w;
            self.sum_wy += w * yi;
            // Deviance and log-likelihood terms. The common cases share
            // their one logarithm: a 0/1 response in one trial, and the
            // poisson log link (log μ = η).
            let (deviance, log_pmf) = match family {
                Family::Binomial if trials[i] == 1.0 && (yi == 0.0 || yi == 1.0) => {
                    let log_p = if yi == 1.0 { mu.ln() } else { (1.0 - mu).ln() };
                    (-2.0 * w * log_p, prior * log_p)
                }
                Family::Binomial => (
                    family.deviance_residual(yi, mu, w),
                    prior * ln_binomial_pmf(yi * trials[i], trials[i], mu),
                ),
                Family::Poisson => {
                    let log_mu = if link == Link::Log && mu > f64::EPSILON {
                        eta_i
                    } else {
                        mu.ln()
                    };
                    let y_log_y = if yi > 0.0 { yi * ln_whole(yi) } else { 0.0 };
                    (
                        2.0 * w * (y_log_y - yi * log_mu - (yi - mu)),
                        prior * (yi * log_mu - mu - ln_factorial(yi)),
                    )
                }
                Family::NegativeBinomial(theta) => (
                    family.deviance_residual(yi, mu, w),
                    prior * ln_negative_binomial_pmf(yi, mu, theta.value()),
                ),
                _ => {
                    self.sum_w_log_y += w * yi.ln();
                    self.sum_w_log_mu += w * mu.ln();
                    self.sum_w_y_over_mu += w * yi / mu;
                    (family.deviance_residual(yi, mu, w), 0.0)
                }
            };
            self.deviance += deviance;
            self.log_pmf += log_pmf;
            self.pearson += w * (yi - mu) * (yi - mu) / variance;
            match config.null_mu {
                NullMean::None => {}
                NullMean::Value(m) => self.null_deviance += family.deviance_residual(yi, m, w),
                NullMean::Offset => {
                    self.null_deviance += family.deviance_residual(yi, link.inverse(offset[i]), w)
                }
            }
            let at_boundary = match family {
                Family::Binomial => {
                    !(10.0 * f64::EPSILON..=1.0 - 10.0 * f64::EPSILON).contains(&mu)
                }
                Family::Poisson => mu < 10.0 * f64::EPSILON,
                _ => false,
            };
            self.boundary += f64::from(u8::from(at_boundary));
            if mu_eta == 0.0 || !variance.is_finite() || variance <= 0.0 {
                continue;
            }
            let z = (eta_i - offset[i]) + (yi - mu) / mu_eta;
            working[i] = w * mu_eta * mu_eta / variance;
            wz[i] = working[i] * z;
        }
    }
}

/// One block's rows: the response, trials, offset and prior weight, and
/// η when there are coefficients.
struct Rows<'a> {
    y: &'a [f64],
    trials: &'a [f64],
    offset: &'a [f64],
    weight: &'a [f64],
    eta: Option<&'a [f64]>,
}

/// The aggregate `irls_step`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IrlsStep {
    signature: Signature,
}

impl Default for IrlsStep {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for IrlsStep {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        "irls_step"
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
            SCALARS + k * k + k,
        )])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let config =
            IrlsConfig::decode(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let k = args.exprs.len() - LEADING;
        if config.beta.as_ref().is_some_and(|b| b.len() != k) {
            return plan_err!(
                "irls_step: {} coefficients for {k} regressors",
                config.beta.as_ref().map_or(0, |b| b.len())
            );
        }
        Ok(Box::new(IrlsAccumulator {
            config,
            sums: IrlsSums::new(k),
            scratch: Scratch::default(),
        }))
    }
}

#[derive(Debug)]
struct IrlsAccumulator {
    config: IrlsConfig,
    sums: IrlsSums,
    scratch: Scratch,
}

/// The buffers a batch's rows are worked in: η, the working weights and
/// weighted working responses of a block (0 where a row does not enter
/// X'WX), and the batch's X'WX and X'Wz as lane sums. An accumulator keeps
/// them from batch to batch instead of allocating and zeroing them anew.
#[derive(Debug, Default)]
struct Scratch {
    eta: Vec<f64>,
    working: Vec<f64>,
    wz: Vec<f64>,
    gram: Option<GramLanes>,
}

impl Scratch {
    /// The bytes the buffers hold, for the accumulator's size.
    fn bytes(&self) -> usize {
        let lanes = self
            .gram
            .as_ref()
            .map_or(0, |g| g.columns() * (g.columns() + 1));
        8 * (self.eta.capacity() + self.working.capacity() + self.wz.capacity())
            + size_of::<[f64; LANES]>() * lanes
    }
}

impl Accumulator for IrlsAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let numeric = &values[1..];
        let columns = crate::comoments::complete_rows(numeric)?;
        let slices: Vec<&[f64]> = columns
            .iter()
            .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
            .collect();
        let (y, trials, offset, weight, x) =
            (slices[0], slices[1], slices[2], slices[3], &slices[4..]);
        self.sums.update_in(
            &mut self.scratch,
            &self.config,
            (y, trials, offset, weight),
            x,
        );
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let k = self.sums.xtwz.len();
        let mut total = self.sums.to_vec();
        flat_state::merge_into("irls_step", &mut total, &states[0])?;
        self.sums = IrlsSums::from_slice(&total, k);
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![flat_state::state_value(self.sums.to_vec())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.sums.to_vec()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * self.sums.flat_len() + self.scratch.bytes()
    }
}

/// Counts below this have their poisson null deviance residual computed
/// once per batch ([`IrlsSums::add_null_deviance`]).
const NULL_COUNTS: usize = 256;

/// The documentation of `irls_step`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "One round of iteratively reweighted least squares for a GLM (the round `glm` runs): the sums from which the coordinator solves for the next coefficients.",
    syntax: "irls_step('family=binomial;link=logit;beta=b0,b1,...', y, trials, offset, weight, x1, ..., xk)",
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
            meaning: "gaussian, binomial, poisson, gamma or inverse_gaussian",
        },
        DocOption {
            name: "link",
            default: "the family's canonical link",
            meaning: "the link function",
        },
        DocOption {
            name: "beta",
            default: "none: start from R's mustart",
            meaning: "the current coefficients, separated by commas",
        },
        DocOption {
            name: "null_mu",
            default: "none",
            meaning: "the null model's mean (a number, or `offset`: the inverse link of each row's offset)",
        },
        DocOption {
            name: "xtwx",
            default: "yes",
            meaning: "`no` leaves X'WX and X'Wz zero (a round whose solution is not wanted)",
        },
    ],
    returns: "the merged sums as `list<float64>`: X'WX, X'Wz, the deviance, Pearson's χ², the null deviance, the log-likelihood terms and counts",
    releases: "k² + k + 12 numbers, whatever its rows: X'WX, X'Wz, its deviance, Pearson χ², log-likelihood terms and counts.",
    example: "SELECT irls_step('family=binomial;link=logit;beta=-3,0.04', event, 1.0, 0.0, 1.0, 1.0, age) AS sums FROM clinic",
};

#[cfg(test)]
mod tests;
