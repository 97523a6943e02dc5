//! Reading what a statistic's round returned (the one row of an
//! aggregate, a float or a count in it) and writing the SQL of its next
//! round (a source column as a double, a float as a literal).

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};

use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::table_function::rounds::query;

/// The one batch a one-row aggregate query returns.
pub(crate) async fn one_row(ctx: &FedContext, sql: &str) -> Result<RecordBatch> {
    let batches = query(ctx, sql).await?;
    let schema = batches
        .first()
        .map(|b| b.schema())
        .ok_or_else(|| FedError::Internal("an aggregate query returned nothing".into()))?;
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// Column `column`, row `row`, as a float (NULL as `None`).
pub(crate) fn float_at(batch: &RecordBatch, column: &str, row: usize) -> Result<Option<f64>> {
    let array = batch
        .column_by_name(column)
        .ok_or_else(|| FedError::Internal(format!("no column `{column}`")))?;
    if array.is_null(row) {
        return Ok(None);
    }
    let array = datafusion::arrow::compute::cast(array, &DataType::Float64)?;
    Ok(Some(array.as_primitive::<Float64Type>().value(row)))
}

/// Column `column`, row `row`, as a count (NULL as 0).
pub(crate) fn count_at(batch: &RecordBatch, column: &str, row: usize) -> Result<i64> {
    let array = batch
        .column_by_name(column)
        .ok_or_else(|| FedError::Internal(format!("no column `{column}`")))?;
    if array.is_null(row) {
        return Ok(0);
    }
    let array = datafusion::arrow::compute::cast(array, &DataType::Int64)?;
    Ok(array.as_primitive::<Int64Type>().value(row))
}

/// The error for a source with no rows.
pub(crate) fn empty_source(function: &str, source: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "{function}: the source '{source}' has no rows (after its filter)"
    ))
}

/// `CAST((expression) AS DOUBLE)`: an expression of the source's columns,
/// evaluated at the clients.
pub(crate) fn as_double(expression: &str) -> String {
    format!("CAST(({expression}) AS DOUBLE)")
}

/// A float as an SQL literal that parses back to the same double.
pub(crate) fn float_literal(v: f64) -> String {
    format!("CAST('{v:?}' AS DOUBLE)")
}
