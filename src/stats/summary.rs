//! `summary(source, 'col1, col2, ...')`: per numeric column, `column, n,
//! nmiss, mean, sd, min, q1, median, q3, max`, as R's `summary()` and
//! DataSHIELD's `ds.quantileMean`.
//!
//! ```sql
//! SELECT * FROM summary('clinic', 'age, bmi, systolic');
//! ```
//!
//! One round of ordinary aggregates per column: `count`, `avg`, `stddev`,
//! `min`, `max` (exact) and `approx_percentile_cont` at 0.25, 0.5 and 0.75.
//! **The quartiles are t-digest estimates** (at most 100 centroids per
//! client), not R's exact type-7 quantiles: exact quartiles would need every
//! value to leave its client. A notice says so.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use futures::FutureExt;

use super::round_values::{count_at, empty_source, float_at, one_row};
use crate::error::{FedError, Result};
use crate::models::source::{ModelSource, numeric_argument, string_arguments};
use crate::table_function::arguments::invalid_argument;
use crate::table_function::deferred::{Rounds, deferred_table};

const USAGE: &str = "summary('table or SELECT query', 'col1, col2, ...')";

/// The table function `summary`.
#[derive(Debug)]
pub(crate) struct SummaryFunction;

impl TableFunctionImpl for SummaryFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let strings = string_arguments("summary", USAGE, args.exprs(), 2)?;
        if strings.len() != 2 {
            return Err(invalid_argument(
                "summary",
                format!("summary takes 2 arguments; usage: {USAGE}"),
            ));
        }
        let columns: Vec<String> = strings[1]
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect();
        if columns.is_empty() {
            return Err(invalid_argument(
                "summary",
                format!("name at least one column; usage: {USAGE}"),
            ));
        }
        let source = ModelSource::parse(&strings[0]);
        let label = format!("summary('{}', '{}')", source.given, strings[1]);
        Ok(deferred_table(
            label,
            schema(),
            Rounds::Independent,
            None,
            move |ctx, _| {
                let (source, columns) = (source.clone(), columns.clone());
                async move {
                let schema = source.schema(&ctx).await?;
                let select = |extremes: bool| -> Result<String> {
                    let mut selects = vec!["count(*) AS total".to_string()];
                    for (i, c) in columns.iter().enumerate() {
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
                ctx.notice("summary: q1, median and q3 are t-digest estimates (approx_percentile_cont), not exact quantiles",
                );
                summary_batch(&batch, &columns, total)
            }
            .boxed()
            },
        ))
    }
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
