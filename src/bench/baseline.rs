//! Running a query federated and on the centralized DataFusion baseline,
//! and checking that the two give the same answer.

use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::prelude::SessionContext;
use fedsql::FedContext;

use crate::{BenchResult, FLOAT_TOLERANCE};

/// Wall-clock times of one query, one entry per timed run.
#[derive(Debug, Default)]
pub(crate) struct Timing {
    pub(crate) federated: Vec<Duration>,
    pub(crate) centralized: Vec<Duration>,
}

/// Plans and runs `sql` federated; returns its time and formatted rows.
pub(crate) async fn run_federated(
    ctx: &FedContext,
    sql: &str,
) -> BenchResult<(Duration, Vec<Vec<String>>)> {
    let started = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let elapsed = started.elapsed();
    Ok((elapsed, format_rows(&batches)?))
}

/// Plans and runs `sql` on the centralized session.
pub(crate) async fn run_centralized(
    ctx: &SessionContext,
    sql: &str,
) -> BenchResult<(Duration, Vec<Vec<String>>)> {
    let started = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let elapsed = started.elapsed();
    Ok((elapsed, format_rows(&batches)?))
}

/// Every value as text, a header row first.
pub(crate) fn format_rows(batches: &[RecordBatch]) -> BenchResult<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    if let Some(first) = batches.first() {
        rows.push(
            first
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        );
    }
    for batch in batches {
        for row in 0..batch.num_rows() {
            let values = batch
                .columns()
                .iter()
                .map(|column| array_value_to_string(column, row))
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(values);
        }
    }
    Ok(rows)
}

/// Compares two formatted results: text exactly, numbers to
/// [`FLOAT_TOLERANCE`] relative. Describes the first difference.
pub(crate) fn compare_results(
    federated: &[Vec<String>],
    centralized: &[Vec<String>],
) -> Result<(), String> {
    if federated.len() != centralized.len() {
        return Err(format!(
            "{} rows federated, {} centralized (header included)",
            federated.len(),
            centralized.len()
        ));
    }
    for (row, (a, b)) in federated.iter().zip(centralized).enumerate() {
        if a.len() != b.len() {
            return Err(format!(
                "row {row}: {} columns federated, {} centralized",
                a.len(),
                b.len()
            ));
        }
        for (column, (x, y)) in a.iter().zip(b).enumerate() {
            if !values_agree(x, y) {
                let name = federated[0].get(column).map_or("?", String::as_str);
                return Err(format!(
                    "row {row}, column `{name}`: {x} federated, {y} centralized"
                ));
            }
        }
    }
    Ok(())
}

pub(crate) fn values_agree(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => {
            let scale = x.abs().max(y.abs());
            (x - y).abs() <= FLOAT_TOLERANCE * scale || (x.is_nan() && y.is_nan())
        }
        _ => false,
    }
}
