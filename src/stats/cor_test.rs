//! `cor_test(source, 'x', 'y' [, options])`: the test of Pearson's
//! correlation, as R's `cor.test` — t = r √(n − 2) / √(1 − r²) on n − 2
//! degrees of freedom, and the confidence interval by Fisher's z
//! (tanh(atanh r ± z_q / √(n − 3)), only when n > 3).
//!
//! ```sql
//! SELECT * FROM cor_test('clinic', 'age', 'systolic');
//! SELECT * FROM cor_test('clinic', 'bmi', 'systolic', 'alternative=greater, conf_level=0.9');
//! ```
//!
//! One round: `centered_moments(x, y)` over the rows where both are present
//! (n, two means and the 2 × 2 centered cross products per client).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::distribution::{normal_quantile, t_cdf, t_sf};
use futures::FutureExt;

use super::hypothesis::Alternative;
use super::round_values::{empty_source, one_row};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::models::source::{ModelSource, numeric_argument, string_arguments};
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;

const USAGE: &str =
    "cor_test('table or SELECT query', 'x', 'y' [, 'alternative=two.sided, conf_level=0.95'])";

/// The table function `cor_test`.
#[derive(Debug)]
pub(crate) struct CorTestFunction;

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
struct CorTestSpec {
    source: ModelSource,
    x: String,
    y: String,
    alternative: Alternative,
    conf_level: f64,
}

impl TableFunctionImpl for CorTestFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let strings = string_arguments("cor_test", USAGE, args.exprs(), 3)?;
        let spec = CorTestSpec::parse(&strings).map_err(|e| argument_error("cor_test", e))?;
        let label = format!(
            "cor_test('{}', '{}', '{}')",
            spec.source.given, spec.x, spec.y
        );
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

impl CorTestSpec {
    /// Parses the string arguments of `cor_test(source, x, y [, options])`.
    fn parse(strings: &[String]) -> Result<Self> {
        if strings.len() > 4 {
            return Err(FedError::InvalidArgument(format!(
                "cor_test takes 3 or 4 arguments; usage: {USAGE}"
            )));
        }
        let mut spec = CorTestSpec {
            source: ModelSource::parse(&strings[0]),
            x: strings[1].trim().to_string(),
            y: strings[2].trim().to_string(),
            alternative: Alternative::TwoSided,
            conf_level: 0.95,
        };
        let options = Options::parse(
            "cor_test",
            strings.get(3).map(String::as_str),
            &["alternative", "conf_level", "method"],
        )?;
        for option in &options {
            match option.key.as_str() {
                "alternative" => spec.alternative = Alternative::parse(&option.value)?,
                "conf_level" => spec.conf_level = option.conf_level()?,
                _ if option.value.eq_ignore_ascii_case("pearson") => {}
                _ => {
                    return Err(option.bad(
                        "only pearson is available (its state is fixed-size; rank correlations would need every value)",
                    ));
                }
            }
        }
        Ok(spec)
    }
}

/// The columns of `cor_test`: broom's `tidy()` of `cor.test`.
pub(crate) fn schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        f("estimate"),
        f("statistic"),
        f("parameter"),
        f("p_value"),
        f("conf_low"),
        f("conf_high"),
        Field::new("method", DataType::Utf8, false),
        Field::new("alternative", DataType::Utf8, false),
    ]))
}

async fn run(ctx: &FedContext, spec: &CorTestSpec) -> Result<RecordBatch> {
    let columns = spec.source.schema(ctx).await?;
    let x = numeric_argument(&columns, &spec.x, "column")?;
    let y = numeric_argument(&columns, &spec.y, "column")?;
    let sql = format!(
        "SELECT count(*) AS total, centered_moments({x}, {y}) AS m FROM {}",
        spec.source.from
    );
    let batch = one_row(ctx, &sql).await?;
    if batch.column(0).as_primitive::<Int64Type>().value(0) == 0 {
        return Err(empty_source("cor_test", &spec.source.given));
    }
    let (_, state) = fedsql_udfs::centered_moments::read(batch.column(1).as_struct(), 0)?;
    let n = state.n as f64;
    if state.n < 3 {
        return Err(FedError::InvalidArgument(format!(
            "cor_test: not enough finite observations ({} rows with both `{}` and `{}`; at least 3 are needed)",
            state.n, spec.x, spec.y
        )));
    }
    for (i, name) in [(0, &spec.x), (1, &spec.y)] {
        let spread = state.m2[[i, i]];
        if spread.is_nan() || spread <= 0.0 {
            return Err(FedError::InvalidArgument(format!(
                "cor_test: `{name}` is constant (its standard deviation is zero), so the correlation is undefined"
            )));
        }
    }
    let r = state.m2[[0, 1]] / (state.m2[[0, 0]].sqrt() * state.m2[[1, 1]].sqrt());
    let r = r.clamp(-1.0, 1.0);
    let df = n - 2.0;
    let t = df.sqrt() * r / (1.0 - r * r).sqrt();
    if df.is_nan() || df <= 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "cor_test: t distribution with {df} df: degrees of freedom must be positive"
        )));
    }
    let p_value = match spec.alternative {
        Alternative::TwoSided => 2.0 * t_cdf(-t.abs(), df),
        Alternative::Less => t_cdf(t, df),
        Alternative::Greater => t_sf(t, df),
    };
    let (low, high) = if state.n > 3 {
        let z = r.atanh();
        let sigma = 1.0 / (n - 3.0).sqrt();
        let level = spec.conf_level;
        let (low, high) = match spec.alternative {
            Alternative::TwoSided => {
                let q = normal_quantile((1.0 + level) / 2.0);
                (z - sigma * q, z + sigma * q)
            }
            Alternative::Less => (f64::NEG_INFINITY, z + sigma * normal_quantile(level)),
            Alternative::Greater => (z - sigma * normal_quantile(level), f64::INFINITY),
        };
        (Some(low.tanh()), Some(high.tanh()))
    } else {
        (None, None)
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(vec![r])),
        Arc::new(Float64Array::from(vec![t])),
        Arc::new(Float64Array::from(vec![df])),
        Arc::new(Float64Array::from(vec![p_value])),
        Arc::new(Float64Array::from(vec![low])),
        Arc::new(Float64Array::from(vec![high])),
        Arc::new(StringArray::from(vec![
            "Pearson's product-moment correlation",
        ])),
        Arc::new(StringArray::from(vec![spec.alternative.name()])),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}
