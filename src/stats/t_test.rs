//! `t_test`: Student's and Welch's t-tests, as R's `t.test`.
//!
//! ```sql
//! SELECT * FROM t_test('clinic', 'systolic', 'mu=120');              -- one sample
//! SELECT * FROM t_test('clinic', 'systolic ~ smoker');                -- Welch two-sample
//! SELECT * FROM t_test('clinic', 'systolic ~ smoker', 'var_equal=true');
//! SELECT * FROM t_test('trial', 'after - before');                   -- paired
//! ```
//!
//! One round: `count`, `avg` and `var_samp` of the values (per level of the
//! grouping column for two samples, which is how its levels are learned
//! too): three numbers per group and client. The decoder is R's `t.test`
//! (Welch–Satterthwaite degrees of freedom, pooled variance with
//! `var_equal=true`, R's "data are essentially constant" check).
//! Rows with a NULL value (or group) are left out, as R's formula interface
//! leaves out NA.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use fedsql_udfs::distribution::{t_cdf, t_quantile, t_sf};
use futures::FutureExt;

use super::hypothesis::Alternative;
use super::round_values::{as_double, count_at, empty_source, float_at, one_row};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{missing_column, quote_ident};
use crate::models::source::{ModelSource, string_arguments};
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::query;

const USAGE: &str = "t_test('table or SELECT query', 'x' | 'x ~ group' | 'after - before' [, 'mu=0, alternative=two.sided, conf_level=0.95, var_equal=false'])";

/// The table function `t_test`.
#[derive(Debug)]
pub(crate) struct TTestFunction;

/// What is tested.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Samples {
    /// The mean of an expression of the source's columns.
    One(String),
    /// The difference of the means of `value` between the two levels of `group`.
    Two { value: String, group: String },
}

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TTestSpec {
    pub source: ModelSource,
    pub samples: Samples,
    pub mu: f64,
    pub alternative: Alternative,
    pub conf_level: f64,
    pub var_equal: bool,
}

impl TTestSpec {
    /// Parses the string arguments of `t_test(source, spec [, options])`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        if !(2..=3).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "t_test takes 2 or 3 arguments; usage: {USAGE}"
            )));
        }
        let samples = match args[1].split_once('~') {
            Some((value, group)) => {
                let (value, group) = (value.trim(), group.trim());
                if value.is_empty() || group.is_empty() || group.contains(['+', '*', ':', '~']) {
                    return Err(FedError::InvalidArgument(format!(
                        "t_test: '{}': a two-sample test is 'value ~ group', with one grouping column",
                        args[1]
                    )));
                }
                Samples::Two {
                    value: value.to_string(),
                    group: group.to_string(),
                }
            }
            None if args[1].trim().is_empty() => {
                return Err(FedError::InvalidArgument(format!(
                    "t_test: the value to test is empty; usage: {USAGE}"
                )));
            }
            None => Samples::One(args[1].trim().to_string()),
        };
        let mut spec = TTestSpec {
            source: ModelSource::parse(&args[0]),
            samples,
            mu: 0.0,
            alternative: Alternative::TwoSided,
            conf_level: 0.95,
            var_equal: false,
        };
        let options = Options::parse(
            "t_test",
            args.get(2).map(String::as_str),
            &["mu", "alternative", "conf_level", "var_equal"],
        )?;
        for option in &options {
            match option.key.as_str() {
                "mu" => spec.mu = option.number()?,
                "alternative" => spec.alternative = Alternative::parse(&option.value)?,
                "conf_level" => spec.conf_level = option.conf_level()?,
                _ => {
                    spec.var_equal = option.boolean()?;
                    if matches!(spec.samples, Samples::One(_)) {
                        return Err(FedError::InvalidArgument(
                            "t_test: var_equal is an option of two-sample tests ('value ~ group')"
                                .into(),
                        ));
                    }
                }
            }
        }
        Ok(spec)
    }
}

impl TableFunctionImpl for TTestFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let strings = string_arguments("t_test", USAGE, args.exprs(), 2)?;
        let spec = TTestSpec::parse(&strings).map_err(|e| argument_error("t_test", e))?;
        let label = format!("t_test('{}', '{}')", spec.source.given, strings[1]);
        Ok(deferred_table(
            label,
            schema(),
            Rounds::Independent,
            None,
            move |ctx, _| {
                let spec = spec.clone();
                async move { run(&ctx, &spec).await?.to_batch() }.boxed()
            },
        ))
    }
}

/// The columns of `t_test`: broom's `tidy()` of an `htest`.
pub(crate) fn schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        f("estimate"),
        f("estimate1"),
        f("estimate2"),
        f("statistic"),
        f("parameter"),
        f("p_value"),
        f("conf_low"),
        f("conf_high"),
        Field::new("method", DataType::Utf8, false),
        Field::new("alternative", DataType::Utf8, false),
    ]))
}

/// A t-test's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TTestResult {
    pub estimate: f64,
    pub estimates: Option<(f64, f64)>,
    pub statistic: f64,
    pub df: f64,
    pub p_value: f64,
    pub conf_int: (f64, f64),
    pub method: &'static str,
    pub alternative: Alternative,
}

impl TTestResult {
    /// The one-row result table.
    pub(crate) fn to_batch(&self) -> Result<RecordBatch> {
        let floats = [
            Some(self.estimate),
            self.estimates.map(|e| e.0),
            self.estimates.map(|e| e.1),
            Some(self.statistic),
            Some(self.df),
            Some(self.p_value),
            Some(self.conf_int.0),
            Some(self.conf_int.1),
        ];
        let mut columns: Vec<ArrayRef> = floats
            .into_iter()
            .map(|v| Arc::new(Float64Array::from(vec![v])) as ArrayRef)
            .collect();
        columns.push(Arc::new(StringArray::from(vec![self.method])));
        columns.push(Arc::new(StringArray::from(vec![self.alternative.name()])));
        Ok(RecordBatch::try_new(schema(), columns)?)
    }
}

/// The sufficient statistics of one sample.
#[derive(Debug, Clone, Copy)]
struct Moments {
    n: f64,
    mean: f64,
    var: f64,
}

/// A column of the source by name (quoted), or else an SQL expression of its columns.
async fn value_expression(ctx: &FedContext, spec: &TTestSpec, value: &str) -> Result<String> {
    let schema = spec.source.schema(ctx).await?;
    Ok(match schema.field_with_name(value) {
        Ok(field) if !field.data_type().is_numeric() => {
            return Err(FedError::InvalidArgument(format!(
                "t_test: `{value}` is {}; it must be numeric",
                field.data_type()
            )));
        }
        Ok(_) => as_double(&quote_ident(value)),
        Err(_) => as_double(value),
    })
}

/// Runs the round and the test.
pub(crate) async fn run(ctx: &FedContext, spec: &TTestSpec) -> Result<TTestResult> {
    match &spec.samples {
        Samples::One(value) => {
            let v = value_expression(ctx, spec, value).await?;
            let sql = format!(
                "SELECT count(*) AS total, count(v) AS n, avg(v) AS mean, var_samp(v) AS var \
                 FROM (SELECT {v} AS v FROM {}) AS __t_test",
                spec.source.from
            );
            let batch = one_row(ctx, &sql).await?;
            if count_at(&batch, "total", 0)? == 0 {
                return Err(empty_source("t_test", &spec.source.given));
            }
            let n = count_at(&batch, "n", 0)?;
            if n < 2 {
                return Err(FedError::InvalidArgument(format!(
                    "t_test: not enough observations of `{value}` ({n} non-NULL); a t-test needs at least 2"
                )));
            }
            let x = Moments {
                n: n as f64,
                mean: float_at(&batch, "mean", 0)?.unwrap_or(f64::NAN),
                var: float_at(&batch, "var", 0)?.unwrap_or(f64::NAN),
            };
            one_sample(x, spec)
        }
        Samples::Two { value, group } => {
            let schema = spec.source.schema(ctx).await?;
            schema
                .field_with_name(group)
                .map_err(|_| missing_column(group, &schema))?;
            let v = value_expression(ctx, spec, value).await?;
            let sql = format!(
                "SELECT g, count(*) AS n, avg(v) AS mean, var_samp(v) AS var \
                 FROM (SELECT {v} AS v, {} AS g FROM {}) AS __t_test \
                 WHERE v IS NOT NULL AND g IS NOT NULL GROUP BY g",
                quote_ident(group),
                spec.source.from
            );
            let batches = query(ctx, &sql).await?;
            let mut groups: Vec<(ScalarValue, Moments)> = Vec::new();
            for batch in &batches {
                for row in 0..batch.num_rows() {
                    let level = ScalarValue::try_from_array(batch.column(0), row)?;
                    groups.push((
                        level,
                        Moments {
                            n: count_at(batch, "n", row)? as f64,
                            mean: float_at(batch, "mean", row)?.unwrap_or(f64::NAN),
                            var: float_at(batch, "var", row)?.unwrap_or(f64::NAN),
                        },
                    ));
                }
            }
            groups.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
            if groups.is_empty() {
                return Err(empty_source("t_test", &spec.source.given));
            }
            if groups.len() != 2 {
                let levels: Vec<String> = groups.iter().map(|(l, _)| l.to_string()).collect();
                return Err(FedError::InvalidArgument(format!(
                    "t_test: the grouping column `{group}` has {} level{} ({}) in the rows used; a two-sample test needs exactly 2 (filter the source to two groups)",
                    groups.len(),
                    if groups.len() == 1 { "" } else { "s" },
                    levels.join(", ")
                )));
            }
            two_sample(groups[0].1, groups[1].1, spec)
        }
    }
}

/// R's `t.test(x, mu = mu)`.
fn one_sample(x: Moments, spec: &TTestSpec) -> Result<TTestResult> {
    let df = x.n - 1.0;
    let stderr = (x.var / x.n).sqrt();
    if !(stderr > 0.0 && stderr >= 10.0 * f64::EPSILON * x.mean.abs()) {
        return Err(essentially_constant());
    }
    let t = (x.mean - spec.mu) / stderr;
    finish(t, df, stderr, spec, x.mean, None, "One Sample t-test")
}

/// R's `t.test(x, y, mu = mu, var.equal = var_equal)`.
fn two_sample(x: Moments, y: Moments, spec: &TTestSpec) -> Result<TTestResult> {
    let too_few = |m: Moments| m.n < 1.0 || (!spec.var_equal && m.n < 2.0);
    if too_few(x) || too_few(y) || x.n + y.n < 3.0 {
        return Err(FedError::InvalidArgument(
            "t_test: not enough observations: each group needs at least 2 values (1 with var_equal=true, 3 in all)".into(),
        ));
    }
    let var = |m: Moments| if m.n < 2.0 { 0.0 } else { m.var };
    let (vx, vy) = (var(x), var(y));
    let (df, stderr, method) = if spec.var_equal {
        let df = x.n + y.n - 2.0;
        let pooled = ((x.n - 1.0) * vx + (y.n - 1.0) * vy) / df;
        (
            df,
            (pooled * (1.0 / x.n + 1.0 / y.n)).sqrt(),
            "Two Sample t-test",
        )
    } else {
        let (sx, sy) = (vx / x.n, vy / y.n);
        let stderr = (sx + sy).sqrt();
        let df = (sx + sy).powi(2) / (sx.powi(2) / (x.n - 1.0) + sy.powi(2) / (y.n - 1.0));
        (df, stderr, "Welch Two Sample t-test")
    };
    if !(stderr > 0.0 && stderr >= 10.0 * f64::EPSILON * x.mean.abs().max(y.mean.abs())) {
        return Err(essentially_constant());
    }
    let t = (x.mean - y.mean - spec.mu) / stderr;
    finish(
        t,
        df,
        stderr,
        spec,
        x.mean - y.mean,
        Some((x.mean, y.mean)),
        method,
    )
}

fn essentially_constant() -> FedError {
    FedError::InvalidArgument(
        "t_test: data are essentially constant (the standard error is 0)".into(),
    )
}

/// p-value and confidence interval, as R computes them from t.
fn finish(
    t: f64,
    df: f64,
    stderr: f64,
    spec: &TTestSpec,
    estimate: f64,
    estimates: Option<(f64, f64)>,
    method: &'static str,
) -> Result<TTestResult> {
    if df.is_nan() || df <= 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "t_test: t distribution with {df} df: degrees of freedom must be positive"
        )));
    }
    let level = spec.conf_level;
    let (p_value, (low, high)) = match spec.alternative {
        Alternative::TwoSided => {
            let q = t_quantile(1.0 - (1.0 - level) / 2.0, df);
            (2.0 * t_cdf(-t.abs(), df), (t - q, t + q))
        }
        Alternative::Less => (t_cdf(t, df), (f64::NEG_INFINITY, t + t_quantile(level, df))),
        Alternative::Greater => (t_sf(t, df), (t - t_quantile(level, df), f64::INFINITY)),
    };
    Ok(TTestResult {
        estimate,
        estimates,
        statistic: t,
        df,
        p_value,
        conf_int: (spec.mu + low * stderr, spec.mu + high * stderr),
        method,
        alternative: spec.alternative,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<TTestSpec> {
        TTestSpec::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_the_three_forms_and_options() {
        let one = parse(&["clinic", "systolic", "mu=120, alternative=less"]).unwrap();
        assert_eq!(one.samples, Samples::One("systolic".into()));
        assert_eq!((one.mu, one.alternative), (120.0, Alternative::Less));
        let two = parse(&["clinic", "systolic ~ smoker", "var_equal=true"]).unwrap();
        assert!(two.var_equal);
        assert_eq!(
            two.samples,
            Samples::Two {
                value: "systolic".into(),
                group: "smoker".into()
            }
        );
        let paired = parse(&["trial", "after - before"]).unwrap();
        assert_eq!(paired.samples, Samples::One("after - before".into()));
    }

    #[test]
    fn refuses_bad_options() {
        let err = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(err(&["t", "x", "conf_level=1.5"]).contains("between 0 and 1"));
        assert!(err(&["t", "x", "alternative=both"]).contains("two.sided, less or greater"));
        assert!(err(&["t", "x", "paired=true"]).contains("unknown option `paired`"));
        assert!(err(&["t", "x", "var_equal=true"]).contains("two-sample"));
        assert!(err(&["t", "y ~ a + b"]).contains("one grouping column"));
    }

    #[test]
    fn welch_matches_r_on_a_small_example() {
        // R: t.test(c(1, 2, 3, 5), c(2, 4, 6, 9, 11)): t = -1.98265158378,
        // df = 5.90220717229, p = 0.09546777697
        let x = Moments {
            n: 4.0,
            mean: 2.75,
            var: 2.916_666_666_666_667,
        };
        let y = Moments {
            n: 5.0,
            mean: 6.4,
            var: 13.3,
        };
        let spec = parse(&["t", "v ~ g"]).unwrap();
        let r = two_sample(x, y, &spec).unwrap();
        assert!((r.statistic - -1.982_651_583_78).abs() < 1e-10, "{r:?}");
        assert!((r.df - 5.902_207_172_29).abs() < 1e-10, "{r:?}");
        assert!((r.p_value - 0.095_467_776_97).abs() < 1e-10, "{r:?}");
    }
}
