//! `kaplan_meier` and `logrank_test`: survival curves and their comparison
//! from life tables on a declared time grid, in one federated round.
//!
//! ```sql
//! SELECT * FROM kaplan_meier('lung', 'time', 'status', 'width=30, max=720, by=sex');
//! SELECT * FROM kaplan_meier('lung', 'time', 'status', 'breaks=0 90 180 365 730');
//! SELECT * FROM logrank_test('lung', 'time', 'status', 'sex', 'width=1, max=1022');
//! ```
//!
//! The grid is declared, never taken from the data (distinct event times
//! would be row values): `breaks` (increasing, separated by spaces) or
//! `width` with `max` (0, width, 2·width, ... up to max, and max). Each site
//! releases, per stratum (`by`) or group, one `life_table` state: for each
//! interval (time_lower, time_upper] its events and censorings, plus the
//! rows after the grid, a few counts for checks and whether the grid
//! groups distinct times — 6 + 2m numbers for m intervals. The number at risk at an interval's start is every row in
//! that interval or later, so the coordinator computes everything else.
//!
//! `kaplan_meier` returns per interval and stratum `stratum, time_lower,
//! time_upper, n_risk, n_event, n_censor, survival, std_err, conf_low,
//! conf_high`: the product-limit estimate at time_upper, Greenwood's
//! standard error of the survival (R's `summary(survfit)$std.err`) and R's
//! default `conf.type = "log"` interval (95%; `conf_level` changes it).
//! With a break at every distinct time this is R's `survfit` exactly; on a
//! grid that groups times it is the life-table estimate, with a notice
//! (see [`super::survival_grid`]). `logrank_test` returns `statistic,
//! parameter, p_value`, R's `survdiff` (exact, too, when the grid holds
//! every distinct time; a notice says when it does not).
//!
//! Rows with a NULL time, event (or `by`/group value) are dropped and a
//! notice says how many; a negative time or an event other than 0/1 (or
//! true/false) is refused.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::distribution::{chi_squared_sf, normal_quantile};
use fedsql_udfs::life_table::{LifeTable, encode_breaks};
use fedsql_udfs::linalg::inverse_spd;
use futures::FutureExt;
use nalgebra::{DMatrix, DVector};

use super::source::{ModelSource, string_arguments};
use super::survival_grid::{Estimate, LOGRANK_NOTICE, km_notice, step};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{missing_column, quote_ident};
use crate::table_function::arguments::{argument_error, invalid_argument};
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::query;

const KM_USAGE: &str = "kaplan_meier('table or SELECT query', 'time', 'event', 'breaks=0 30 60 90' | 'width=30, max=720' [, 'by=column, conf_level=0.95, method=auto|km|actuarial'])";
const LR_USAGE: &str = "logrank_test('table or SELECT query', 'time', 'event', 'group', 'breaks=0 30 60 90' | 'width=30, max=720')";

/// The declared time grid and the other options.
#[derive(Debug, Clone)]
pub(crate) struct SurvivalSpec {
    pub source: ModelSource,
    pub time: String,
    pub event: String,
    /// Strata (`by=`) for `kaplan_meier`, the group for `logrank_test`.
    pub group: Option<String>,
    pub breaks: Vec<f64>,
    pub conf_level: f64,
    /// Which estimate `kaplan_meier` gives (`method=`).
    pub estimate: Estimate,
}

impl SurvivalSpec {
    fn parse(
        function: &str,
        source: &str,
        time: &str,
        event: &str,
        group: Option<&str>,
        options: Option<&str>,
    ) -> Result<Self> {
        let allowed: &[&str] = if group.is_some() {
            &["breaks", "width", "max"]
        } else {
            &["breaks", "width", "max", "by", "conf_level", "method"]
        };
        let mut spec = SurvivalSpec {
            source: ModelSource::parse(source),
            time: time.trim().to_string(),
            event: event.trim().to_string(),
            group: group.map(|g| g.trim().to_string()),
            breaks: Vec::new(),
            conf_level: 0.95,
            estimate: Estimate::Auto,
        };
        let (mut breaks, mut width, mut max) = (None, None, None);
        let options = Options::parse(function, options, allowed)?;
        for option in &options {
            match option.key.as_str() {
                "breaks" => breaks = Some(option.numbers()?),
                "width" => width = Some(option.number()?),
                "max" => max = Some(option.number()?),
                "by" => spec.group = Some(option.value.clone()),
                "method" => spec.estimate = Estimate::parse(function, &option.value)?,
                _ => {
                    spec.conf_level = option.number()?;
                    if !(spec.conf_level > 0.0 && spec.conf_level < 1.0) {
                        return Err(FedError::InvalidArgument(format!(
                            "{function}: conf_level must be between 0 and 1"
                        )));
                    }
                }
            }
        }
        spec.breaks = match (breaks, width, max) {
            (Some(b), None, None) => b,
            (None, Some(w), Some(m)) => {
                if !(w > 0.0 && m > 0.0 && w.is_finite() && m.is_finite()) || m / w > 1e6 {
                    return Err(FedError::InvalidArgument(format!(
                        "{function}: width and max must be positive, with at most a million intervals"
                    )));
                }
                let mut grid: Vec<f64> =
                    (0..).map(|i| i as f64 * w).take_while(|b| *b < m).collect();
                grid.push(m);
                grid
            }
            _ => {
                return Err(FedError::InvalidArgument(format!(
                    "{function}: declare the time grid with breaks='0 30 60 ...' or with width and max (the grid is never taken from the data)"
                )));
            }
        };
        if spec.breaks.len() < 2 {
            return Err(FedError::InvalidArgument(format!(
                "{function}: the time grid needs at least two breaks"
            )));
        }
        if let Some(w) = spec
            .breaks
            .windows(2)
            .find(|w| w[0] >= w[1] || w[0].is_nan() || w[1].is_nan())
        {
            return Err(FedError::InvalidArgument(format!(
                "{function}: breaks must be increasing: {} is followed by {}",
                w[0], w[1]
            )));
        }
        Ok(spec)
    }
}

/// Which analysis a table function runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SurvivalOutput {
    KaplanMeier,
    LogRank,
}

/// The table functions `kaplan_meier` and `logrank_test`.
#[derive(Debug)]
pub(crate) struct SurvivalFunction {
    pub output: SurvivalOutput,
}

impl TableFunctionImpl for SurvivalFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let (name, usage, min) = match self.output {
            SurvivalOutput::KaplanMeier => ("kaplan_meier", KM_USAGE, 3),
            SurvivalOutput::LogRank => ("logrank_test", LR_USAGE, 4),
        };
        let s = string_arguments(name, usage, args.exprs(), min)?;
        if s.len() > min + 1 {
            return Err(invalid_argument(
                name,
                format!("{name} takes at most {} arguments; usage: {usage}", min + 1),
            ));
        }
        let (group, options) = match self.output {
            SurvivalOutput::KaplanMeier => (None, s.get(3)),
            SurvivalOutput::LogRank => (Some(s[3].as_str()), s.get(4)),
        };
        let spec = SurvivalSpec::parse(
            name,
            &s[0],
            &s[1],
            &s[2],
            group,
            options.map(String::as_str),
        )
        .map_err(|e| argument_error(name, e))?;
        let label = format!(
            "{name}('{}', {} intervals)",
            spec.source.given,
            spec.breaks.len() - 1
        );
        let output = self.output;
        let schema = match output {
            SurvivalOutput::KaplanMeier => km_schema(),
            SurvivalOutput::LogRank => logrank_schema(),
        };
        Ok(deferred_table(
            label,
            schema,
            Rounds::Iterative,
            None,
            move |ctx, _| {
                let spec = spec.clone();
                async move {
                    let tables = life_tables(&ctx, name, &spec).await?;
                    let grouped = tables.iter().any(|(_, t)| t.groups_times());
                    match output {
                        SurvivalOutput::KaplanMeier => {
                            let actuarial = spec.estimate.actuarial(grouped);
                            if grouped {
                                ctx.notice(km_notice(actuarial));
                            }
                            kaplan_meier(&spec, &tables, actuarial)
                        }
                        SurvivalOutput::LogRank => {
                            if grouped {
                                ctx.notice(LOGRANK_NOTICE.to_string());
                            }
                            logrank(&tables)
                        }
                    }
                }
                .boxed()
            },
        ))
    }
}

/// The columns of `kaplan_meier`.
pub(crate) fn km_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    let i = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("stratum", DataType::Utf8, true),
        f("time_lower"),
        f("time_upper"),
        i("n_risk"),
        i("n_event"),
        i("n_censor"),
        f("survival"),
        f("std_err"),
        f("conf_low"),
        f("conf_high"),
    ]))
}

/// The columns of `logrank_test`.
pub(crate) fn logrank_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("statistic", DataType::Float64, false),
        Field::new("parameter", DataType::Int64, false),
        Field::new("p_value", DataType::Float64, false),
    ]))
}

/// `CAST(col AS DOUBLE)` for a numeric or boolean column.
fn numeric_or_boolean(schema: &Schema, column: &str, role: &str) -> Result<String> {
    let t = schema
        .field_with_name(column)
        .map_err(|_| missing_column(column, schema))?
        .data_type();
    if !(t.is_numeric() || *t == DataType::Boolean) {
        return Err(FedError::InvalidArgument(format!(
            "the {role} `{column}` is {t}; it must be numeric"
        )));
    }
    Ok(format!("CAST({} AS DOUBLE)", quote_ident(column)))
}

/// One life table per stratum (sorted by the stratum's value; one
/// unnamed table without strata).
async fn life_tables(
    ctx: &FedContext,
    function: &str,
    spec: &SurvivalSpec,
) -> Result<Vec<(Option<String>, LifeTable)>> {
    let schema = spec.source.schema(ctx).await?;
    let time = numeric_or_boolean(&schema, &spec.time, "time column")?;
    let event = numeric_or_boolean(&schema, &spec.event, "event column")?;
    let call = format!(
        "life_table('{}', {time}, {event})",
        encode_breaks(&spec.breaks)
    );
    let sql = match &spec.group {
        Some(g) => {
            let g = quote_ident(
                &schema
                    .field_with_name(g)
                    .map_err(|_| missing_column(g, &schema))?
                    .name()
                    .clone(),
            );
            format!(
                "SELECT CAST({g} AS VARCHAR) AS stratum, count(*) AS total, {call} AS counts FROM {} GROUP BY {g} ORDER BY {g}",
                spec.source.from
            )
        }
        None => format!(
            "SELECT CAST(NULL AS VARCHAR) AS stratum, count(*) AS total, {call} AS counts FROM {}",
            spec.source.from
        ),
    };
    let batches = query(ctx, &sql).await?;
    let mut tables = Vec::new();
    let (mut total, mut used, mut null_group) = (0i64, 0.0, 0i64);
    let (mut negative, mut invalid) = (0.0, 0.0);
    for batch in &batches {
        let strata = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
        let strata = strata.as_string::<i32>();
        let totals = batch.column(1).as_primitive::<Int64Type>();
        let counts = batch.column(2).as_list::<i32>();
        for row in 0..batch.num_rows() {
            total += totals.value(row);
            if spec.group.is_some() && strata.is_null(row) {
                null_group += totals.value(row);
                continue;
            }
            let values = counts.value(row);
            let table = LifeTable::from_slice(values.as_primitive::<Float64Type>().values());
            used += table.rows;
            negative += table.negative;
            invalid += table.invalid_event;
            let stratum = (!strata.is_null(row)).then(|| strata.value(row).to_string());
            tables.push((stratum, table));
        }
    }
    if negative > 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "{function}: {negative} rows have a negative time in `{}`; times must be >= 0 (filter them out in a source query)",
            spec.time
        )));
    }
    if invalid > 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "{function}: {invalid} rows have an event `{}` other than 0 (censored) or 1 (event)",
            spec.event
        )));
    }
    let dropped = total - used as i64;
    if dropped > 0 {
        let what = if null_group > 0 {
            format!(
                "a NULL time, event or `{}`",
                spec.group.as_deref().unwrap_or("")
            )
        } else {
            "a NULL time or event".to_string()
        };
        ctx.notice(format!("{function}: {dropped} rows dropped ({what})"));
    }
    if used == 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "{function}: no rows left in '{}' (of {total}) after dropping NULL times and events",
            spec.source.given
        )));
    }
    Ok(tables)
}

/// The product-limit (or, `actuarial`, the life-table) estimate per
/// interval and stratum.
fn kaplan_meier(
    spec: &SurvivalSpec,
    tables: &[(Option<String>, LifeTable)],
    actuarial: bool,
) -> Result<RecordBatch> {
    let z = normal_quantile(0.5 + spec.conf_level / 2.0);
    let mut stratum = Vec::new();
    let (mut lower, mut upper) = (Vec::new(), Vec::new());
    let (mut n_risk, mut n_event, mut n_censor) = (Vec::new(), Vec::new(), Vec::new());
    let (mut survival, mut std_err) = (Vec::new(), Vec::new());
    let (mut conf_low, mut conf_high) = (Vec::new(), Vec::new());
    for (name, table) in tables {
        let risk = table.at_risk();
        let (mut s, mut greenwood) = (1.0f64, 0.0f64);
        for (i, &n) in risk.iter().enumerate() {
            let d = table.events[i];
            if let Some((factor, variance)) = step(n, d, table.censored[i], actuarial) {
                s *= factor;
                greenwood += variance;
            }
            let se_hazard = greenwood.sqrt();
            let se = s * se_hazard;
            stratum.push(name.clone());
            lower.push(spec.breaks[i]);
            upper.push(spec.breaks[i + 1]);
            n_risk.push(n as i64);
            n_event.push(d as i64);
            n_censor.push(table.censored[i] as i64);
            survival.push(s);
            std_err.push(se.is_finite().then_some(se));
            if s > 0.0 && se_hazard.is_finite() {
                conf_low.push(Some((s.ln() - z * se_hazard).exp()));
                conf_high.push(Some((s.ln() + z * se_hazard).exp().min(1.0)));
            } else {
                conf_low.push(None);
                conf_high.push(None);
            }
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(stratum)),
        Arc::new(Float64Array::from(lower)),
        Arc::new(Float64Array::from(upper)),
        Arc::new(Int64Array::from(n_risk)),
        Arc::new(Int64Array::from(n_event)),
        Arc::new(Int64Array::from(n_censor)),
        Arc::new(Float64Array::from(survival)),
        Arc::new(Float64Array::from(std_err)),
        Arc::new(Float64Array::from(conf_low)),
        Arc::new(Float64Array::from(conf_high)),
    ];
    Ok(RecordBatch::try_new(km_schema(), columns)?)
}

/// R's `survdiff` (rho = 0) from the groups' life tables.
fn logrank(tables: &[(Option<String>, LifeTable)]) -> Result<RecordBatch> {
    let groups = tables.len();
    if groups < 2 {
        return Err(FedError::InvalidArgument(format!(
            "logrank_test: the group column has {groups} value(s) in the rows used; it needs at least 2"
        )));
    }
    let risks: Vec<Vec<f64>> = tables.iter().map(|(_, t)| t.at_risk()).collect();
    let m = risks[0].len();
    let mut observed_minus_expected = DVector::<f64>::zeros(groups);
    let mut expected = vec![0.0; groups];
    let mut variance = DMatrix::<f64>::zeros(groups, groups);
    for i in 0..m {
        let n: f64 = risks.iter().map(|r| r[i]).sum();
        let d: f64 = tables.iter().map(|(_, t)| t.events[i]).sum();
        if n <= 0.0 || d <= 0.0 {
            continue;
        }
        for g in 0..groups {
            let share = risks[g][i] / n;
            expected[g] += d * share;
            observed_minus_expected[g] += tables[g].1.events[i] - d * share;
            if n > 1.0 {
                let factor = d * (n - d) / (n - 1.0);
                for h in 0..groups {
                    let delta = if g == h { 1.0 } else { 0.0 };
                    variance[(g, h)] += factor * share * (delta - risks[h][i] / n);
                }
            }
        }
    }
    // The groups with an expected count; the last one is implied by the rest.
    let kept: Vec<usize> = (0..groups).filter(|&g| expected[g] > 0.0).collect();
    if kept.len() < 2 {
        return Err(FedError::InvalidArgument(
            "logrank_test: fewer than two groups have rows at risk at an event time".into(),
        ));
    }
    let free = &kept[..kept.len() - 1];
    let v = DMatrix::from_fn(free.len(), free.len(), |a, b| variance[(free[a], free[b])]);
    let u = DVector::from_fn(free.len(), |a, _| observed_minus_expected[free[a]]);
    let inverse = inverse_spd(&v).ok_or_else(|| {
        FedError::InvalidArgument("logrank_test: the variance matrix is singular".into())
    })?;
    let statistic = u.dot(&(&inverse * &u));
    let df = free.len();
    let p = chi_squared_sf(statistic, df as f64);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(vec![statistic])),
        Arc::new(Int64Array::from(vec![df as i64])),
        Arc::new(Float64Array::from(vec![p])),
    ];
    Ok(RecordBatch::try_new(logrank_schema(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &str) -> Result<SurvivalSpec> {
        SurvivalSpec::parse("kaplan_meier", "t", "time", "event", None, Some(options))
    }

    #[test]
    fn the_grid_is_declared() {
        assert_eq!(parse("breaks=0 30 60").unwrap().breaks, [0.0, 30.0, 60.0]);
        assert_eq!(
            parse("width=30, max=70").unwrap().breaks,
            [0.0, 30.0, 60.0, 70.0]
        );
        assert!(parse("breaks=0 60 30").is_err());
        assert!(parse("breaks=0 30 30").is_err());
        assert!(parse("width=30").is_err());
        assert!(parse("by=sex").is_err());
        assert_eq!(
            parse("breaks=0 1, by=sex").unwrap().group.as_deref(),
            Some("sex")
        );
    }
}
