//! The rows each group of a site's state covers, counted in the same pass
//! as the aggregates: under a disclosure policy the site adds one `count`
//! to its partial aggregate, checks the counts, and drops them before the
//! state leaves (they never cross the wire).

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};

use crate::error::{FedError, Result};

/// The name of the row count the site adds.
const ROWS: &str = "__fedsql_group_rows";

/// `partial` with one more aggregate, the rows of each group, last.
pub fn counted(partial: AggregateExec) -> Result<AggregateExec> {
    let one = Arc::new(Literal::new(ScalarValue::Int64(Some(1))));
    let count = AggregateExprBuilder::new(count_udaf(), vec![one])
        .schema(partial.input_schema())
        .alias(ROWS)
        .build()?;
    let mut aggregates = partial.aggr_expr().to_vec();
    aggregates.push(Arc::new(count));
    let mut filters = partial.filter_expr().to_vec();
    filters.push(None);
    Ok(AggregateExec::try_new(
        AggregateMode::Partial,
        partial.group_expr().clone(),
        aggregates,
        filters,
        Arc::clone(partial.input()),
        partial.input_schema(),
    )?)
}

/// The state batches without their last column, and the rows each state
/// row covers (that column).
pub fn split_off(batches: &[RecordBatch]) -> Result<(Vec<RecordBatch>, Vec<i64>)> {
    let mut rows = Vec::new();
    let mut states = Vec::with_capacity(batches.len());
    for batch in batches {
        let last = batch
            .num_columns()
            .checked_sub(1)
            .ok_or_else(|| FedError::Internal("a counted state without its row count".into()))?;
        let counts = batch
            .column(last)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| FedError::Internal("the row count of a state is not a count".into()))?;
        rows.extend(counts.iter().map(|n| n.unwrap_or(0)));
        states.push(batch.project(&(0..last).collect::<Vec<_>>())?);
    }
    Ok((states, rows))
}
