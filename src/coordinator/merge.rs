//! The merge and the decode: every site's states into one answer.
//!
//! The states of all sites go into DataFusion's `Final` aggregate over the
//! round's partial aggregate: its merge of states is a commutative monoid,
//! so the order in which states arrive does not matter, and its evaluation
//! is the decoder. A round of many sites merges as states arrive
//! ([`StreamingMerge`]): each run of [`MERGE_CHUNK`] consecutive sites is
//! reduced to one state as soon as all of it is in, so the coordinator
//! never holds a thousand states, and the order of the merge (by site, not
//! by arrival) keeps the floats of an answer the same from run to run.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::{ExecutionPlan, collect};

use crate::error::{FedError, Result};
use crate::wire::encoder::StateBatch;

/// The coordinator side: merge every client's states and decode them with
/// the final aggregate. The merge is a commutative monoid, so the order in
/// which states arrive does not matter.
pub fn merge_and_decode(
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
pub const MERGE_CHUNK: usize = 64;

/// The merge of a round's states as they arrive, site by site.
pub struct StreamingMerge<'a> {
    partial: &'a AggregateExec,
    task_ctx: Arc<TaskContext>,
    /// The states of the chunk being filled, by site.
    slots: Vec<Option<RecordBatch>>,
    /// The first site of the chunk being filled.
    chunk_start: usize,
    sites: usize,
    /// The reduced states of the chunks before it.
    reduced: Vec<RecordBatch>,
    /// States of sites past the chunk being filled, until it is reduced.
    ahead: Vec<(usize, RecordBatch)>,
}

impl<'a> StreamingMerge<'a> {
    /// A merge of the states of `sites` sites.
    pub fn new(partial: &'a AggregateExec, sites: usize, task_ctx: Arc<TaskContext>) -> Self {
        Self {
            partial,
            task_ctx,
            slots: vec![None; MERGE_CHUNK.min(sites)],
            chunk_start: 0,
            sites,
            reduced: Vec::new(),
            ahead: Vec::new(),
        }
    }

    /// Takes site `site`'s state; reduces the chunk it completes.
    pub async fn add(&mut self, site: usize, state: &StateBatch) -> Result<()> {
        let rows = state_rows(self.partial, state)?;
        if site >= self.chunk_start + self.slots.len() {
            self.ahead.push((site, rows));
            return Ok(());
        }
        self.slots[site - self.chunk_start] = Some(rows);
        while self.sites > MERGE_CHUNK && self.slots.iter().all(Option::is_some) {
            let chunk: Vec<RecordBatch> = self.slots.iter_mut().filter_map(Option::take).collect();
            let plan = merge_batches(self.partial, AggregateMode::PartialReduce, chunk)?;
            self.reduced
                .extend(collect(plan, Arc::clone(&self.task_ctx)).await?);
            self.chunk_start += self.slots.len();
            let next = MERGE_CHUNK.min(self.sites - self.chunk_start);
            self.slots = vec![None; next];
            let end = self.chunk_start + next;
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ahead)
                .into_iter()
                .partition(|(i, _)| *i < end);
            self.ahead = later;
            for (i, rows) in now {
                self.slots[i - self.chunk_start] = Some(rows);
            }
            if next == 0 {
                break;
            }
        }
        Ok(())
    }

    /// The merge and decode of every state taken.
    pub fn finish(self) -> Result<Arc<dyn ExecutionPlan>> {
        let mut batches = self.reduced;
        batches.extend(self.slots.into_iter().flatten());
        batches.extend(self.ahead.into_iter().map(|(_, rows)| rows));
        merge_batches(self.partial, AggregateMode::Final, batches)
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
