//! The merge and the decode: every site's states into one answer.
//!
//! The states of all sites go into DataFusion's `Final` aggregate over the
//! round's partial aggregate: its merge of states is a commutative monoid,
//! so the order in which states arrive does not matter, and its evaluation
//! is the decoder.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};

use crate::error::{FedError, Result};
use crate::wire::encoder::StateBatch;

/// The coordinator side: merge every client's states and decode them with
/// the final aggregate. The merge is a commutative monoid, so the order in
/// which states arrive does not matter.
pub fn merge_and_decode(
    partial: &AggregateExec,
    states: &[StateBatch],
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = partial.schema();
    let batches = states
        .iter()
        .map(|s| RecordBatch::try_new(Arc::clone(&schema), s.batch().columns().to_vec()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            FedError::Internal(format!("client state does not fit the state schema: {e}"))
        })?;
    let states = MemorySourceConfig::try_new_exec(&[batches], Arc::clone(&schema), None)?;
    Ok(Arc::new(AggregateExec::try_new(
        AggregateMode::Final,
        partial.group_expr().as_final(),
        partial.aggr_expr().to_vec(),
        partial.filter_expr().to_vec(),
        states,
        partial.input_schema(),
    )?))
}
