//! Coefficient tables: estimates with standard errors, test statistics,
//! p-values and 95% intervals, against a t distribution (estimated
//! dispersion: `lm`, gaussian/Gamma/inverse-gaussian GLMs) or the standard
//! normal (binomial and poisson GLMs), as R's `summary` reports them; and
//! the covariance matrix of the estimates in long form (`lm_vcov`, `glm_vcov`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use fedsql_udfs::distribution::{normal_quantile, normal_sf, t_quantile, t_sf};

use crate::error::Result;

/// The reference distribution of the statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Reference {
    /// Student's t with these degrees of freedom.
    T(f64),
    /// The standard normal (z).
    Z,
}

/// A two-sided p-value function and the 97.5% quantile.
type TailAndQuantile = (Box<dyn Fn(f64) -> f64>, f64);

impl Reference {
    /// Two-sided p-value and the 97.5% quantile; `None` without degrees of freedom.
    fn tail_and_quantile(self) -> Option<TailAndQuantile> {
        match self {
            Reference::T(df) if df > 0.0 => {
                let q = t_quantile(0.975, df);
                Some((Box::new(move |s: f64| 2.0 * t_sf(s.abs(), df)), q))
            }
            Reference::T(_) => None,
            Reference::Z => {
                let q = normal_quantile(0.975);
                Some((Box::new(|s: f64| 2.0 * normal_sf(s.abs())), q))
            }
        }
    }
}

/// The columns of a coefficient table.
pub(crate) fn coefficients_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        f("estimate"),
        f("std_error"),
        f("statistic"),
        f("p_value"),
        f("conf_low"),
        f("conf_high"),
    ]))
}

/// One row per term; aliased terms (no estimate) are all NULL.
pub(crate) fn coefficients_batch(
    terms: &[String],
    estimates: &[Option<f64>],
    std_errors: &[Option<f64>],
    reference: Reference,
) -> Result<RecordBatch> {
    let inference = reference.tail_and_quantile();
    let mut columns: [Vec<Option<f64>>; 6] = Default::default();
    for (estimate, se) in estimates.iter().zip(std_errors) {
        let stat = estimate.zip(*se).map(|(b, s)| b / s);
        let p = stat.zip(inference.as_ref()).map(|(s, (tail, _))| tail(s));
        let half = se.zip(inference.as_ref()).map(|(s, (_, q))| s * q);
        let values = [
            *estimate,
            *se,
            stat,
            p,
            estimate.zip(half).map(|(b, h)| b - h),
            estimate.zip(half).map(|(b, h)| b + h),
        ];
        for (column, value) in columns.iter_mut().zip(values) {
            column.push(value);
        }
    }
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(StringArray::from(terms.to_vec()))];
    arrays.extend(
        columns
            .into_iter()
            .map(|c| Arc::new(Float64Array::from(c)) as ArrayRef),
    );
    Ok(RecordBatch::try_new(coefficients_schema(), arrays)?)
}

/// The columns of `lm_vcov` and `glm_vcov`: one row per pair of terms.
pub(crate) fn vcov_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("term1", DataType::Utf8, false),
        Field::new("term2", DataType::Utf8, false),
        Field::new("covariance", DataType::Float64, true),
    ]))
}

/// The covariance matrix in long form, row-major in the order of `terms`
/// (NULL for aliased terms, as R's `vcov()` has NA).
pub(crate) fn vcov_batch(terms: &[String], covariance: &[Vec<Option<f64>>]) -> Result<RecordBatch> {
    let (mut first, mut second, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for (i, a) in terms.iter().enumerate() {
        for (j, b) in terms.iter().enumerate() {
            first.push(a.as_str());
            second.push(b.as_str());
            values.push(
                covariance
                    .get(i)
                    .and_then(|row| row.get(j))
                    .copied()
                    .flatten(),
            );
        }
    }
    Ok(RecordBatch::try_new(
        vcov_schema(),
        vec![
            Arc::new(StringArray::from(first)) as ArrayRef,
            Arc::new(StringArray::from(second)),
            Arc::new(Float64Array::from(values)),
        ],
    )?)
}
