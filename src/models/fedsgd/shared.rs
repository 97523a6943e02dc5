//! What a FedSGD run learns before its first step, in one federated
//! round over the rows the model uses: the mean response (for the starting
//! intercept) and, to standardize, each column's mean and standard
//! deviation. A one-off query of the fit: the sites keep nothing for it.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use fedsql_udfs::normal_equations::INTERCEPT;
use fedsql_udfs::sgd_step::SgdModel;

use super::spec::{FedSgdSpec, Start};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::models::source::complete_cases;

/// The SQL of a run: the arguments of `sgd_gradient` after its config
/// (y, offset, x1, ..., xk) and the design column names.
pub(super) struct Design {
    pub(super) response: String,
    pub(super) offset: String,
    pub(super) columns: Vec<String>,
    pub(super) names: Vec<String>,
    /// The source columns the model reads (for complete cases).
    pub(super) used: Vec<String>,
}

/// Per design column: the centre and scale the model is fitted on
/// (x − centre) / scale. Without standardization, (0, 1).
pub(super) type Scaling = Vec<(f64, f64)>;

/// What a run learns before its first round, in one federated round over
/// the rows the model uses: the mean response (for the starting intercept)
/// and, to standardize, each column's mean and sample standard deviation.
/// The intercept, constant columns and (without an intercept) every centre
/// stay untouched.
pub(super) async fn learn_shared(
    ctx: &FedContext,
    spec: &FedSgdSpec,
    design: &Design,
) -> Result<(Scaling, f64)> {
    learn_shared_by(ctx, spec, design, by_moments(design)).await
}

/// [`learn_shared`], the columns' statistics from `centered_moments` or
/// (`moments` false) from `avg` and `stddev_samp`.
async fn learn_shared_by(
    ctx: &FedContext,
    spec: &FedSgdSpec,
    design: &Design,
    moments: bool,
) -> Result<(Scaling, f64)> {
    let intercept = design.names.iter().any(|n| n == INTERCEPT);
    let start = spec.start == Start::Mean && intercept;
    let k = design.names.len();
    if !start && !spec.standardize {
        return Ok((vec![(0.0, 1.0); k], 0.0));
    }
    let sql = shared_sql(spec, design, moments);
    // One-off: the steps read their own input, which the sites keep.
    let batches = ctx.one_off().sql(&sql).await?.collect().await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("the first round returned nothing".into()))?;
    let value = |i: usize| {
        let c = datafusion::arrow::compute::cast(batch.column(i), &DataType::Float64)?;
        let c = c.as_primitive::<Float64Type>();
        Ok::<_, FedError>(if c.is_null(0) { f64::NAN } else { c.value(0) })
    };
    let (mean_y, mean_offset, sum_y, sum_exp_offset) = (value(0)?, value(1)?, value(2)?, value(3)?);
    let intercept_start = if start {
        let eta = match spec.model {
            SgdModel::Linear => mean_y - mean_offset,
            SgdModel::Logistic => (mean_y / (1.0 - mean_y)).ln() - mean_offset,
            SgdModel::Poisson => (sum_y / sum_exp_offset).ln(),
        };
        // An all-0 (or all-1) response has no finite start: start from 0.
        if eta.is_finite() { eta } else { 0.0 }
    } else {
        0.0
    };
    if !spec.standardize {
        return Ok((vec![(0.0, 1.0); k], intercept_start));
    }
    let moments = match moments {
        true => {
            let result = batch.column(4).as_struct();
            let (_, state) = fedsql_udfs::centered_moments::read(result, 0)?;
            let n = state.n as f64;
            let sds: Vec<f64> = state
                .m2
                .diag()
                .iter()
                .map(|m2| (m2 / (n - 1.0)).sqrt())
                .collect();
            Some((state.mean.to_vec(), sds))
        }
        false => None,
    };
    let mut scaling = Vec::new();
    for (i, name) in design.names.iter().enumerate() {
        let (mean, sd) = match &moments {
            // Under two rows the deviation is not positive and finite
            // (0 / -1, 0 / 0): the column stays as it is, as below.
            Some((means, sds)) => (means[i], sds[i]),
            None => (value(4 + 2 * i)?, value(5 + 2 * i)?),
        };
        scaling.push(if name == INTERCEPT || !(sd > 0.0 && sd.is_finite()) {
            (0.0, 1.0)
        } else if intercept {
            (mean, sd)
        } else {
            (0.0, sd)
        });
    }
    Ok((scaling, intercept_start))
}

/// Up to this many design columns, the shared statistics take the
/// columns' means and standard deviations from one `centered_moments`
/// (a blocked pass, k² products per row); beyond it, from `avg` and
/// `stddev_samp` per column (k updates per row, each with a division).
const MOMENTS_MAX_COLUMNS: usize = 24;

/// Whether the shared statistics come from `centered_moments`.
pub(super) fn by_moments(design: &Design) -> bool {
    (1..=MOMENTS_MAX_COLUMNS).contains(&design.columns.len())
}

/// The query of the round before the first step: the mean response and
/// offset, and (to standardize) each design column's mean and standard
/// deviation.
pub(super) fn shared_sql(spec: &FedSgdSpec, design: &Design, moments: bool) -> String {
    let (y, offset) = (&design.response, &design.offset);
    let mut items = vec![format!(
        "avg({y}), avg({offset}), sum({y}), sum(exp({offset}))"
    )];
    // Without standardizing, only the starting intercept is needed.
    if spec.standardize && moments {
        items.push(format!("centered_moments({})", design.columns.join(", ")));
    } else if spec.standardize {
        for column in &design.columns {
            items.push(format!("avg({column}), stddev_samp({column})"));
        }
    }
    format!(
        "SELECT {} FROM {} WHERE {}",
        items.join(", "),
        spec.source.from,
        complete_cases(&design.used)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::demo::register_demo_with;
    use crate::models::fedsgd::design;

    #[tokio::test]
    async fn shared_statistics_agree_from_moments_and_per_column() {
        let ctx = FedContext::new();
        register_demo_with(&ctx, false).unwrap();
        let args = [
            "clinic",
            "event ~ age + bmi + smoker",
            "logistic",
            "standardize=true",
        ]
        .map(String::from);
        let spec = FedSgdSpec::parse(&args).unwrap();
        let design = design(&ctx, &spec).await.unwrap();
        assert!(by_moments(&design));
        let (moments, start) = learn_shared_by(&ctx, &spec, &design, true).await.unwrap();
        let (per_column, start_again) = learn_shared_by(&ctx, &spec, &design, false).await.unwrap();
        assert_eq!(start, start_again);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
        for ((m, s), (m2, s2)) in moments.iter().zip(&per_column) {
            assert!(
                close(*m, *m2) && close(*s, *s2),
                "{moments:?} {per_column:?}"
            );
        }
        // Every column but the intercept is standardized.
        let scaled = moments.iter().filter(|&&(_, s)| s != 1.0).count();
        assert_eq!(scaled, design.names.len() - 1);
    }
}
