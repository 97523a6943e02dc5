//! A fitted GLM ([`GlmFit`]): what `glm`, `glm_stats` and `glm_vcov`
//! return, R's `summary.glm` lines, and the log-likelihood of the fit as
//! R's families define it.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use fedsql_udfs::family::{Family, Link};
use fedsql_udfs::irls_step::IrlsSums;
use statrs::function::gamma::ln_gamma;

use super::inference::{Reference, coefficients_batch};
use crate::error::Result;
use crate::notices::printed_summary::{FitLines, ModelSummary};

/// The columns of `glm_stats`.
pub(crate) fn stats_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    let i = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("family", DataType::Utf8, false),
        Field::new("link", DataType::Utf8, false),
        i("nobs"),
        i("rows_dropped"),
        i("df_null"),
        i("df_residual"),
        f("null_deviance"),
        f("deviance"),
        f("dispersion"),
        f("log_likelihood"),
        f("aic"),
        f("bic"),
        i("iterations"),
        Field::new("converged", DataType::Boolean, false),
    ]))
}

/// The columns of `glm_nb_stats`: those of `glm_stats`, then θ, its
/// standard error and MASS's 2 × log-likelihood.
pub(crate) fn nb_stats_schema() -> SchemaRef {
    let mut fields: Vec<Field> = stats_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for name in ["theta", "se_theta", "twologlik"] {
        fields.push(Field::new(name, DataType::Float64, true));
    }
    Arc::new(Schema::new(fields))
}

/// The θ of a negative binomial fit by `glm_nb` (MASS's `glm.nb`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NbTheta {
    /// The maximum-likelihood θ.
    pub theta: f64,
    /// Its standard error, 1/√information (MASS's `SE.theta`).
    pub se: f64,
    /// 2 × the log-likelihood at θ and the fitted means (`twologlik`).
    pub twologlik: f64,
    /// MASS's `th.warn`: a warning while fitting θ.
    pub warning: Option<String>,
}

/// A fitted GLM.
#[derive(Debug, Clone)]
pub(crate) struct GlmFit {
    pub family: Family,
    /// A quasi family (`quasibinomial`, `quasipoisson`): the dispersion
    /// is estimated and there is no likelihood.
    pub quasi: bool,
    pub link: Link,
    pub terms: Vec<String>,
    pub estimate: Vec<Option<f64>>,
    pub std_error: Vec<Option<f64>>,
    pub nobs: i64,
    pub rows_dropped: i64,
    pub rank: usize,
    pub intercept: bool,
    pub deviance: f64,
    pub null_deviance: f64,
    pub dispersion: f64,
    pub log_likelihood: f64,
    pub iterations: usize,
    pub converged: bool,
    pub warnings: Vec<String>,
    /// The covariance matrix of the estimates (R's `vcov()`): the
    /// dispersion times the inverse information; `None` for aliased terms.
    pub covariance: Vec<Vec<Option<f64>>>,
    /// The estimated θ of a `glm_nb` fit (`None` for `glm`).
    pub theta: Option<NbTheta>,
}

impl GlmFit {
    pub(crate) fn df_residual(&self) -> i64 {
        self.nobs - self.rank as i64
    }

    /// R's name of the family (`quasipoisson` for a quasi family).
    pub(crate) fn family_name(&self) -> String {
        if self.quasi {
            format!("quasi{}", self.family.name())
        } else {
            self.family.r_name()
        }
    }

    /// Whether the dispersion is estimated (t statistics) rather than 1.
    pub(crate) fn estimates_dispersion(&self) -> bool {
        self.theta.is_none() && (self.quasi || self.family.estimates_dispersion())
    }

    pub(crate) fn df_null(&self) -> i64 {
        self.nobs - i64::from(self.intercept)
    }

    /// Parameters counted by AIC/BIC: coefficients, plus the dispersion
    /// where the family estimates one (R's `logLik.glm`), and θ where
    /// `glm_nb` estimates it (MASS's `logLik.negbin`).
    fn parameters(&self) -> f64 {
        self.rank as f64
            + f64::from(u8::from(self.family.counts_dispersion()))
            + f64::from(u8::from(self.theta.is_some()))
    }

    pub(crate) fn aic(&self) -> f64 {
        -2.0 * self.log_likelihood + 2.0 * self.parameters()
    }

    pub(crate) fn bic(&self) -> f64 {
        -2.0 * self.log_likelihood + (self.nobs as f64).ln() * self.parameters()
    }

    /// What R's `summary.glm` prints around the coefficients.
    pub(crate) fn printed_summary(&self, call: String) -> ModelSummary {
        ModelSummary {
            call,
            aliased: self.estimate.iter().filter(|e| e.is_none()).count(),
            rows_dropped: self.rows_dropped,
            fit: FitLines::Glm {
                family: self.family_name(),
                estimated_dispersion: self.estimates_dispersion(),
                dispersion: self.dispersion,
                null_deviance: self.null_deviance,
                df_null: self.df_null(),
                deviance: self.deviance,
                df_residual: self.df_residual(),
                aic: self.aic(),
                iterations: self.iterations,
                theta: self
                    .theta
                    .as_ref()
                    .map(|t| (t.theta, t.se, t.twologlik, t.warning.clone())),
            },
        }
    }

    /// One row per term.
    pub(crate) fn coefficients(&self) -> Result<RecordBatch> {
        let reference = if self.estimates_dispersion() {
            Reference::T(self.df_residual() as f64)
        } else {
            Reference::Z
        };
        coefficients_batch(&self.terms, &self.estimate, &self.std_error, reference)
    }

    /// The one row of `glm_stats`.
    pub(crate) fn stats(&self) -> Result<RecordBatch> {
        let float = |v: f64| Arc::new(Float64Array::from(vec![v])) as ArrayRef;
        let int = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![self.family_name()])),
            Arc::new(StringArray::from(vec![self.link.name()])),
            int(self.nobs),
            int(self.rows_dropped),
            int(self.df_null()),
            int(self.df_residual()),
            float(self.null_deviance),
            float(self.deviance),
            float(self.dispersion),
            float(self.log_likelihood),
            float(self.aic()),
            float(self.bic()),
            int(self.iterations as i64),
            Arc::new(BooleanArray::from(vec![self.converged])),
        ];
        match &self.theta {
            None => Ok(RecordBatch::try_new(stats_schema(), columns)?),
            Some(t) => {
                let mut columns = columns;
                columns.extend([float(t.theta), float(t.se), float(t.twologlik)]);
                Ok(RecordBatch::try_new(nb_stats_schema(), columns)?)
            }
        }
    }
}

/// The log-likelihood at the fit, as R's family `aic` functions define it.
pub(super) fn log_likelihood(family: Family, s: &IrlsSums) -> f64 {
    match family {
        Family::Binomial | Family::Poisson | Family::NegativeBinomial(_) => s.log_pmf,
        // R: n (log(2π dev / n) + 1) + 2 is the gaussian aic term.
        Family::Gaussian => {
            -0.5 * s.n * ((2.0 * std::f64::consts::PI * s.deviance / s.n).ln() + 1.0)
        }
        Family::Gamma => {
            // Σ w log dgamma(y; shape 1/φ, scale μφ), φ = deviance / Σw.
            let phi = s.deviance / s.sum_w;
            let shape = 1.0 / phi;
            -s.sum_w * ln_gamma(shape) - shape * (s.sum_w_log_mu + s.sum_w * phi.ln())
                + (shape - 1.0) * s.sum_w_log_y
                - s.sum_w_y_over_mu / phi
        }
        Family::InverseGaussian => {
            let phi = s.deviance / s.sum_w;
            -0.5 * (s.sum_w * ((2.0 * std::f64::consts::PI * phi).ln() + 1.0) + 3.0 * s.sum_w_log_y)
        }
    }
}
