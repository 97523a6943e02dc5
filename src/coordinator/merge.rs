//! The merge and the decode: every site's states into one answer.
//!
//! The states of all sites go into DataFusion's `Final` aggregate over the
//! round's partial aggregate: its merge of states is a commutative monoid,
//! so the order in which states arrive does not matter, and its evaluation
//! is the decoder. A round of many sites merges as states arrive
//! ([`StreamingMerge`]): each run of [`MERGE_CHUNK`] consecutive sites is
//! reduced to one state as soon as all of it is in, by the task that
//! brought its last state, so the coordinator never holds a thousand
//! states, and the order of the merge (by site, not by arrival) keeps the
//! floats of an answer the same from run to run.

use std::sync::{Arc, Mutex};

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::{ExecutionPlan, collect};

use crate::error::{FedError, Result};
use crate::protocol::encoder::StateBatch;

/// The coordinator side: merge every client's states and decode them with
/// the final aggregate. The merge is a commutative monoid, so the order in
/// which states arrive does not matter.
pub(crate) fn merge_and_decode(
    partial: &AggregateExec,
    states: &[StateBatch],
) -> Result<Arc<dyn ExecutionPlan>> {
    let batches = states
        .iter()
        .map(|s| state_rows(partial, s))
        .collect::<Result<Vec<_>>>()?;
    merge_batches(partial, AggregateMode::Final, batches)
}

/// How many consecutive sites' states are reduced to one at a time.
pub(crate) const MERGE_CHUNK: usize = 64;

/// The merge of a round's states as they arrive, site by site. Several
/// tasks may add states at once (the runners of a round's clients): the
/// one that adds the last state of a chunk reduces that chunk, so a chunk
/// is merged where its last state was made, and no task waits for another.
pub(crate) struct StreamingMerge {
    partial: AggregateExec,
    task_ctx: Arc<TaskContext>,
    sites: usize,
    /// Per run of [`MERGE_CHUNK`] consecutive sites: its states until the
    /// last is in, then their reduction.
    chunks: Vec<Mutex<Chunk>>,
}

struct Chunk {
    /// The states of the chunk's sites, by site, until all are in.
    slots: Vec<Option<RecordBatch>>,
    missing: usize,
    /// The chunk's states reduced to one (or, for a round of at most one
    /// chunk, the states themselves: the final merge takes them all).
    merged: Vec<RecordBatch>,
}

impl StreamingMerge {
    /// A merge of the states of `sites` sites.
    pub(crate) fn new(partial: &AggregateExec, sites: usize, task_ctx: Arc<TaskContext>) -> Self {
        let chunks = (0..sites)
            .step_by(MERGE_CHUNK)
            .map(|start| {
                let len = MERGE_CHUNK.min(sites - start);
                Mutex::new(Chunk {
                    slots: vec![None; len],
                    missing: len,
                    merged: Vec::new(),
                })
            })
            .collect();
        Self {
            partial: partial.clone(),
            task_ctx,
            sites,
            chunks,
        }
    }

    /// Takes site `site`'s state; reduces the chunk it completes.
    pub(crate) async fn add(&self, site: usize, state: &StateBatch) -> Result<()> {
        let rows = state_rows(&self.partial, state)?;
        let chunk = &self.chunks[site / MERGE_CHUNK];
        let complete = {
            let mut chunk = chunk.lock().expect("not poisoned");
            let slot = &mut chunk.slots[site % MERGE_CHUNK];
            if slot.replace(rows).is_some() {
                return Err(FedError::Internal(format!("site {site} answered twice")));
            }
            chunk.missing -= 1;
            (chunk.missing == 0).then(|| chunk.slots.iter_mut().filter_map(Option::take).collect())
        };
        let Some(states) = complete else {
            return Ok(());
        };
        let merged = if self.sites > MERGE_CHUNK {
            // One batch of the chunk's states: the merge then runs each
            // state column's merge once per chunk, not once per site.
            let states = concat_batches(&self.partial.schema(), &states)
                .map_err(|e| FedError::Internal(format!("a chunk's states: {e}")))?;
            let plan = merge_batches(&self.partial, AggregateMode::PartialReduce, vec![states])?;
            collect(plan, Arc::clone(&self.task_ctx)).await?
        } else {
            states
        };
        chunk.lock().expect("not poisoned").merged = merged;
        Ok(())
    }

    /// The merge and decode of every state taken, chunk by chunk in the
    /// order of the sites.
    pub(crate) fn finish(&self) -> Result<Arc<dyn ExecutionPlan>> {
        let mut batches = Vec::new();
        for chunk in &self.chunks {
            let mut chunk = chunk.lock().expect("not poisoned");
            if chunk.missing > 0 {
                return Err(FedError::Internal(format!(
                    "a merge finished with {} sites' states missing",
                    chunk.missing
                )));
            }
            batches.append(&mut chunk.merged);
        }
        merge_batches(&self.partial, AggregateMode::Final, batches)
    }
}

/// A site's state rows in the partial aggregate's own schema.
fn state_rows(partial: &AggregateExec, state: &StateBatch) -> Result<RecordBatch> {
    RecordBatch::try_new(partial.schema(), state.batch().columns().to_vec())
        .map_err(|e| FedError::Internal(format!("client state does not fit the state schema: {e}")))
}

/// The partial aggregate's merge of `batches` of states, in `mode`.
fn merge_batches(
    partial: &AggregateExec,
    mode: AggregateMode,
    batches: Vec<RecordBatch>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let states = MemorySourceConfig::try_new_exec(&[batches], partial.schema(), None)?;
    Ok(Arc::new(AggregateExec::try_new(
        mode,
        partial.group_expr().as_final(),
        partial.aggr_expr().to_vec(),
        partial.filter_expr().to_vec(),
        states,
        partial.input_schema(),
    )?))
}
