//! `summary(source [, 'col1, col2, ...'])`: per numeric column, `column, n,
//! nmiss, mean, sd, min, q1, median, q3, max`, as R's `summary()` and
//! DataSHIELD's `ds.quantileMean`. Without columns, every column of the
//! source. A text column gets its `n` and `nmiss`, and its levels are
//! counted, as R's `summary()` of a factor counts them, in a notice (one
//! more round, a GROUP BY that a site's policy holds to k).
//!
//! ```sql
//! SELECT * FROM summary('clinic', 'age, bmi, systolic');
//! SELECT * FROM summary('clinic');
//! ```
//!
//! One round of ordinary aggregates per column: `count`, `avg`, `stddev`,
//! `min`, `max` (exact) and `approx_percentile_cont` at 0.25, 0.5 and 0.75.
//! **The quartiles are t-digest estimates** (at most 100 centroids per
//! client), not R's exact type-7 quantiles: exact quartiles would need every
//! value to leave its client. A notice says so.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use futures::FutureExt;

use super::round_values::{count_at, empty_source, float_at, one_row};
use crate::coordinator::client_column::CLIENT_COLUMN;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::quote_ident;
use crate::models::source::{ModelSource, numeric_argument, string_arguments};
use crate::table_function::arguments::invalid_argument;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::rounds::query;

const USAGE: &str = "summary('table or SELECT query' [, 'col1, col2, ...'])";

/// The most levels of a text column the notice lists (R's `maxsum`).
const MAX_LEVELS: usize = 7;

/// The table function `summary`.
#[derive(Debug)]
pub(crate) struct SummaryFunction;

impl TableFunctionImpl for SummaryFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let strings = string_arguments("summary", USAGE, args.exprs(), 1)?;
        if strings.len() > 2 {
            return Err(invalid_argument(
                "summary",
                format!("summary takes 1 or 2 arguments; usage: {USAGE}"),
            ));
        }
        let named: Vec<String> = strings
            .get(1)
            .map(|list| {
                list.split(',')
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let source = ModelSource::parse(&strings[0]);
        let label = match strings.get(1) {
            Some(columns) => format!("summary('{}', '{columns}')", source.given),
            None => format!("summary('{}')", source.given),
        };
        Ok(deferred_table(
            label,
            schema(),
            Rounds::Independent,
            None,
            move |ctx, _| {
                let (source, named) = (source.clone(), named.clone());
                async move {
                let schema = source.schema(&ctx).await?;
                let columns: Vec<String> = if named.is_empty() {
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .filter(|n| n != CLIENT_COLUMN)
                        .collect()
                } else {
                    named
                };
                let text: Vec<bool> = columns
                    .iter()
                    .map(|c| schema.field_with_name(c).is_ok_and(|f| is_text(f.data_type())))
                    .collect();
                let select = |extremes: bool| -> Result<String> {
                    let mut selects = vec!["count(*) AS total".to_string()];
                    for (i, c) in columns.iter().enumerate() {
                        if text[i] {
                            let none = "CAST(NULL AS DOUBLE)";
                            selects.push(format!(
                                "count({}) AS n{i}, {none} AS mean{i}, {none} AS sd{i}, {none} AS min{i}, {none} AS max{i}, {none} AS q1_{i}, {none} AS median{i}, {none} AS q3_{i}",
                                quote_ident(c)
                            ));
                            continue;
                        }
                        let v = numeric_argument(&schema, c, "column")?;
                        let (min, max) = if extremes {
                            (format!("min({v})"), format!("max({v})"))
                        } else {
                            ("CAST(NULL AS DOUBLE)".into(), "CAST(NULL AS DOUBLE)".into())
                        };
                        selects.push(format!(
                            "count({v}) AS n{i}, avg({v}) AS mean{i}, stddev({v}) AS sd{i}, \
                             {min} AS min{i}, {max} AS max{i}, \
                             approx_percentile_cont({v}, 0.25) AS q1_{i}, \
                             approx_percentile_cont({v}, 0.5) AS median{i}, \
                             approx_percentile_cont({v}, 0.75) AS q3_{i}"
                        ));
                    }
                    Ok(format!("SELECT {} FROM {}", selects.join(", "), source.from))
                };
                // A site whose policy refuses extremes withholds min and max:
                // the summary then shows them as NULL, and says why.
                let (batch, withheld) = match one_row(&ctx, &select(true)?).await {
                    Err(e) if e.to_string().contains("extremes=refuse") => {
                        (one_row(&ctx, &select(false)?).await?, true)
                    }
                    other => (other?, false),
                };
                let total = count_at(&batch, "total", 0)?;
                if total == 0 {
                    return Err(empty_source("summary", &source.given));
                }
                if withheld {
                    ctx.notice("summary: min and max are withheld (NULL): a client's disclosure policy refuses exact extremes (extremes=refuse)",
                    );
                }
                if text.iter().any(|t| !t) {
                    ctx.notice("summary: q1, median and q3 are t-digest estimates (approx_percentile_cont), not exact quantiles",
                    );
                }
                for (column, _) in columns.iter().zip(&text).filter(|(_, t)| **t) {
                    ctx.notice(levels_notice(&ctx, &source, column).await);
                }
                summary_batch(&batch, &columns, total)
            }
            .boxed()
            },
        ))
    }
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(..)
    )
}

/// A text column's levels and their counts, as R's `summary()` of a factor
/// lists them (the most frequent first, the rest as `(Other)`), or why they
/// are withheld.
async fn levels_notice(ctx: &FedContext, source: &ModelSource, column: &str) -> String {
    let quoted = quote_ident(column);
    let sql = format!(
        "SELECT CAST({quoted} AS VARCHAR) AS level, count(*) AS n FROM {} WHERE {quoted} IS NOT NULL GROUP BY {quoted}",
        source.from
    );
    let batches = match query(&ctx.one_off(), &sql).await {
        Ok(batches) => batches,
        Err(e) => {
            let reason = e.to_string();
            let reason = reason.lines().next().unwrap_or_default();
            return format!("summary: the levels of `{column}` are withheld: {reason}");
        }
    };
    let mut levels: Vec<(String, i64)> = Vec::new();
    for batch in &batches {
        let names = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8);
        let Ok(names) = names else { continue };
        let names = names.as_string::<i32>();
        let counts = batch.column(1).as_primitive::<Int64Type>();
        for row in 0..batch.num_rows() {
            levels.push((names.value(row).to_string(), counts.value(row)));
        }
    }
    // R lists a factor's levels in order, and past `maxsum` the most
    // frequent first with the rest as "(Other)".
    if levels.len() > MAX_LEVELS {
        levels.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    } else {
        levels.sort();
    }
    let mut shown: Vec<String> = levels
        .iter()
        .take(if levels.len() > MAX_LEVELS {
            MAX_LEVELS - 1
        } else {
            MAX_LEVELS
        })
        .map(|(name, n)| format!("{name}: {n}"))
        .collect();
    if levels.len() > MAX_LEVELS {
        let other: i64 = levels[MAX_LEVELS - 1..].iter().map(|(_, n)| n).sum();
        shown.push(format!("(Other): {other}"));
    }
    format!(
        "summary: `{column}` (text, {} levels): {}",
        levels.len(),
        shown.join(", ")
    )
}

/// The columns of `summary`.
pub(crate) fn schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        Field::new("column", DataType::Utf8, false),
        Field::new("n", DataType::Int64, false),
        Field::new("nmiss", DataType::Int64, false),
        f("mean"),
        f("sd"),
        f("min"),
        f("q1"),
        f("median"),
        f("q3"),
        f("max"),
    ]))
}

fn summary_batch(batch: &RecordBatch, columns: &[String], total: i64) -> Result<RecordBatch> {
    let mut n = Vec::new();
    let mut nmiss = Vec::new();
    let mut floats: [Vec<Option<f64>>; 7] = Default::default();
    for i in 0..columns.len() {
        let count = count_at(batch, &format!("n{i}"), 0)?;
        n.push(count);
        nmiss.push(total - count);
        for (values, name) in floats.iter_mut().zip([
            format!("mean{i}"),
            format!("sd{i}"),
            format!("min{i}"),
            format!("q1_{i}"),
            format!("median{i}"),
            format!("q3_{i}"),
            format!("max{i}"),
        ]) {
            values.push(float_at(batch, &name, 0)?);
        }
    }
    let mut arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(columns.to_vec())),
        Arc::new(Int64Array::from(n)),
        Arc::new(Int64Array::from(nmiss)),
    ];
    arrays.extend(
        floats
            .into_iter()
            .map(|v| Arc::new(Float64Array::from(v)) as ArrayRef),
    );
    RecordBatch::try_new(schema(), arrays).map_err(FedError::from)
}
