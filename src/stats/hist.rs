//! `hist(source, column [, 'bins=k, lower=..., upper=...'])`: a histogram
//! of a numeric column, one row per bin: `bin, lower, upper, count, density`
//! (density = count / (counts in all bins × bin width), as R's `hist()`).
//!
//! ```sql
//! SELECT * FROM hist('clinic', 'systolic', 'bins=12, lower=80, upper=200');
//! SELECT * FROM hist('clinic', 'bmi');            -- R's breaks: Sturges, pretty()
//! ```
//!
//! One round of the `histogram(x, lower, upper, bins)` aggregate (bin counts,
//! `bins + 3` integers per client) with the counts of values below and above
//! the range. Without `lower` and `upper`, a first round of `count`, `min`
//! and `max` gives R's default breaks: `pretty(range(x), n = bins)`, with
//! `bins` by default Sturges' `ceiling(log2(n) + 1)` ([`super::pretty`]), so
//! every value is counted. Where a site's policy refuses exact extremes, the
//! range is the t-digest's 0.5% to 99.5% instead, so about 1% of the values
//! fall outside the bins; a notice says how many (give `lower=` and
//! `upper=` to cover them). Bins are closed as R's `hist()` closes them:
//! (a, b], the first [lower, b]. In the REPL, `\chart` after a `hist` draws
//! it as a bar chart.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::histogram::Bins;
use futures::FutureExt;

use super::pretty::{pretty, sturges};
use super::round_values::{count_at, empty_source, float_at, float_literal, one_row};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::models::source::{ModelSource, numeric_argument, string_arguments};
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;

const USAGE: &str = "hist('table or SELECT query', 'column' [, 'bins=k, lower=..., upper=...'])";

/// The table function `hist`.
#[derive(Debug)]
pub(crate) struct HistFunction;

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistSpec {
    pub source: ModelSource,
    pub column: String,
    /// `None`: Sturges' rule, as R's `hist()`.
    pub bins: Option<i64>,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
}

impl HistSpec {
    /// Parses the string arguments of `hist(source, column [, options])`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        if !(2..=3).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "hist takes 2 or 3 arguments; usage: {USAGE}"
            )));
        }
        let mut spec = HistSpec {
            source: ModelSource::parse(&args[0]),
            column: args[1].trim().to_string(),
            bins: None,
            lower: None,
            upper: None,
        };
        let options = Options::parse(
            "hist",
            args.get(2).map(String::as_str),
            &["bins", "lower", "upper"],
        )?;
        for option in &options {
            match option.key.as_str() {
                "bins" => {
                    let bins = option.integer()?;
                    if bins <= 0 {
                        return Err(option.bad("bins must be at least 1"));
                    }
                    spec.bins = Some(bins);
                }
                "lower" => spec.lower = Some(option.number()?),
                _ => spec.upper = Some(option.number()?),
            }
        }
        if let (Some(lower), Some(upper)) = (spec.lower, spec.upper)
            && lower >= upper
        {
            return Err(FedError::InvalidArgument(format!(
                "hist: lower ({lower}) must be less than upper ({upper})"
            )));
        }
        Ok(spec)
    }
}

impl TableFunctionImpl for HistFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let strings = string_arguments("hist", USAGE, args.exprs(), 2)?;
        let spec = HistSpec::parse(&strings).map_err(|e| argument_error("hist", e))?;
        let label = format!("hist('{}', '{}')", spec.source.given, spec.column);
        Ok(deferred_table(
            label,
            schema(),
            Rounds::Independent,
            None,
            move |ctx, _| {
                let spec = spec.clone();
                async move { run(&ctx, &spec).await }.boxed()
            },
        ))
    }
}

/// The columns of `hist`.
pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("bin", DataType::Int64, false),
        Field::new("lower", DataType::Float64, false),
        Field::new("upper", DataType::Float64, false),
        Field::new("count", DataType::Int64, false),
        Field::new("density", DataType::Float64, true),
    ]))
}

/// Whether a result has the columns of a `hist` result (for `\chart`).
pub(crate) fn is_histogram(schema: &Schema) -> bool {
    ["bin", "lower", "upper", "count"]
        .iter()
        .all(|c| schema.column_with_name(c).is_some())
}

async fn run(ctx: &FedContext, spec: &HistSpec) -> Result<RecordBatch> {
    let schema = spec.source.schema(ctx).await?;
    let v = numeric_argument(&schema, &spec.column, "column")?;
    let values = format!("(SELECT {v} AS v FROM {}) AS __hist", spec.source.from);
    // A declared range and bins need no first round.
    let (lower, upper, bins) = match (spec.lower, spec.upper, spec.bins) {
        (Some(lower), Some(upper), Some(bins)) => (lower, upper, bins),
        _ => default_bins(ctx, spec, &values).await?,
    };
    count_bins(ctx, spec, &values, lower, upper, bins).await
}

/// The bins R's `hist()` would take (see the module doc), from a first
/// round over the values.
async fn default_bins(ctx: &FedContext, spec: &HistSpec, values: &str) -> Result<(f64, f64, i64)> {
    let range = one_row(
        ctx,
        &format!(
            "SELECT count(*) AS total, count(v) AS n, min(v) AS lo, max(v) AS hi FROM {values}"
        ),
    )
    .await;
    // A site whose policy refuses exact extremes: the t-digest's range.
    let (range, exact) = match range {
        Err(e) if e.to_string().contains("extremes=refuse") => {
            let range = one_row(
                ctx,
                &format!(
                    "SELECT count(*) AS total, count(v) AS n, approx_percentile_cont(v, 0.005) AS lo, \
                     approx_percentile_cont(v, 0.995) AS hi FROM {values}"
                ),
            )
            .await?;
            (range, false)
        }
        other => (other?, true),
    };
    if count_at(&range, "total", 0)? == 0 {
        return Err(empty_source("hist", &spec.source.given));
    }
    let (Some(lo), Some(hi)) = (float_at(&range, "lo", 0)?, float_at(&range, "hi", 0)?) else {
        return Err(FedError::InvalidArgument(format!(
            "hist: `{}` has no values (all NULL)",
            spec.column
        )));
    };
    let wanted = spec
        .bins
        .unwrap_or_else(|| sturges(count_at(&range, "n", 0).unwrap_or(1)));
    let (lower, upper, bins) = match (spec.lower, spec.upper) {
        (None, None) if exact => pretty(lo, hi, wanted, 1),
        (lower, upper) => (lower.unwrap_or(lo), upper.unwrap_or(hi), wanted),
    };
    if lower >= upper {
        return Err(FedError::InvalidArgument(format!(
            "hist: the range of `{}` is [{lower}, {upper}], which is empty (data essentially constant?); give lower= and upper=",
            spec.column
        )));
    }
    Ok((lower, upper, bins))
}

/// The round of the `histogram` aggregate over `bins` bins of [lower, upper].
async fn count_bins(
    ctx: &FedContext,
    spec: &HistSpec,
    values: &str,
    lower: f64,
    upper: f64,
    bins: i64,
) -> Result<RecordBatch> {
    let sql = format!(
        "SELECT count(*) AS total, histogram(v, {}, {}, {bins}) AS h, count(v) AS n FROM {values}",
        float_literal(lower),
        float_literal(upper),
    );
    let bins = Bins::new(lower, upper, bins)?;
    let batch = one_row(ctx, &sql).await?;
    if count_at(&batch, "total", 0)? == 0 {
        return Err(empty_source("hist", &spec.source.given));
    }
    let h = batch.column(1).as_list::<i32>();
    let counts: Vec<i64> = if h.is_null(0) {
        vec![0; bins.len()]
    } else {
        h.value(0).as_primitive::<Int64Type>().values().to_vec()
    };
    // Values outside [lower, upper] are in no bin (a site under a
    // disclosure policy folds them into the end bins instead).
    let outside = count_at(&batch, "n", 0)? - counts.iter().sum::<i64>();
    if outside > 0 {
        ctx.notice(format!(
                "hist: {outside} value(s) of `{}` outside [{lower}, {upper}] are in no bin; give lower= and upper= to include them",
                spec.column
            ),
        );
    }
    histogram_batch(&bins, &counts)
}

/// One row per bin.
pub(crate) fn histogram_batch(bins: &Bins, counts: &[i64]) -> Result<RecordBatch> {
    let total: i64 = counts.iter().sum();
    let k = bins.len();
    let lower: Vec<f64> = bins.breaks[..k].to_vec();
    let upper: Vec<f64> = bins.breaks[1..].to_vec();
    let density: Vec<Option<f64>> = (0..k)
        .map(|i| (total > 0).then(|| counts[i] as f64 / (total as f64 * (upper[i] - lower[i]))))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(1..=k as i64)),
        Arc::new(Float64Array::from(lower)),
        Arc::new(Float64Array::from(upper)),
        Arc::new(Int64Array::from(counts.to_vec())),
        Arc::new(Float64Array::from(density)),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HistSpec> {
        HistSpec::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options_and_their_errors() {
        let spec = parse(&["clinic", "bmi", "bins=7, lower=10, upper=50"]).unwrap();
        assert_eq!(
            (spec.bins, spec.lower, spec.upper),
            (Some(7), Some(10.0), Some(50.0))
        );
        let err = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(err(&["t", "x", "bins=0"]).contains("at least 1"));
        assert!(err(&["t", "x", "bins=-2"]).contains("at least 1"));
        assert!(err(&["t", "x", "lower=5, upper=5"]).contains("must be less than upper"));
        assert!(err(&["t", "x", "width=2"]).contains("unknown option `width`"));
    }
}
