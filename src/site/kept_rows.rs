//! What a site keeps between the rounds of one fit: the decoded input rows
//! of the fit's encoder.
//!
//! The rounds of an iterative fit (GLM by IRLS, FedSGD) read the same rows
//! each time. An encoder sent as part of a fit carries the fit's scope id;
//! the site then keeps the decoded input of that encoder's partial aggregate
//! in memory, so that rounds after the first do not read and decode its
//! files again. What a site keeps never leaves it.
//!
//! The rows of a fit belong to the session that started it: they are used
//! and released only by requests that carry its scope id (a random 64-bit
//! number the coordinator draws per fit, so one session cannot name
//! another's). Another fit starting does not drop them; a site keeps the
//! rows of at most [`MAX_KEPT_FITS`] fits, and drops the oldest beyond that
//! (a fit whose coordinator went away without releasing it).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, collect_partitioned};

use crate::error::Result;
use crate::site::fit_round::CHUNK_ROWS;
use crate::site::yielding::yield_after_each_batch;

/// How many fits' rows a site keeps at once.
pub const MAX_KEPT_FITS: usize = 4;

/// The rows kept for the fits under way, oldest first.
#[derive(Debug, Default)]
pub struct KeptRows {
    kept: Mutex<VecDeque<Kept>>,
}

/// Decoded rows kept for the rounds of one fit.
#[derive(Debug)]
struct Kept {
    scope: u64,
    /// What the rows are: the text of the plan below the aggregate.
    key: String,
    /// The rows in file order, in chunks of [`CHUNK_ROWS`] (the last one
    /// shorter).
    chunks: Arc<[RecordBatch]>,
}

impl KeptRows {
    /// The rows of `input` (the input of the fit's partial aggregate) in
    /// chunks of [`CHUNK_ROWS`]: read (and kept) in the first round of fit
    /// `scope`, reused in the later rounds whose input is the same (`key`).
    /// `task_ctx` should read in batches of [`CHUNK_ROWS`] rows, so that
    /// most chunks are the decoded batches themselves.
    pub async fn chunks(
        &self,
        input: &Arc<dyn ExecutionPlan>,
        scope: u64,
        key: String,
        task_ctx: Arc<TaskContext>,
    ) -> Result<Arc<[RecordBatch]>> {
        let cached = {
            let kept = self.kept.lock().expect("not poisoned");
            kept.iter()
                .find(|k| k.scope == scope && k.key == key)
                .map(|k| Arc::clone(&k.chunks))
        };
        if let Some(chunks) = cached {
            return Ok(chunks);
        }
        let schema = input.schema();
        let input = yield_after_each_batch(in_file_order(Arc::clone(input))?)?;
        let partitions = collect_partitioned(input, task_ctx).await?;
        let chunks: Arc<[RecordBatch]> = fixed_chunks(&schema, partitions)?.into();
        let mut kept = self.kept.lock().expect("not poisoned");
        // A fit keeps the input of its latest encoder only.
        kept.retain(|k| k.scope != scope);
        if kept.len() >= MAX_KEPT_FITS {
            kept.pop_front();
        }
        kept.push_back(Kept {
            scope,
            key,
            chunks: Arc::clone(&chunks),
        });
        Ok(chunks)
    }

    /// `partial` over kept `chunks`, spread over `partitions` (for the
    /// partial aggregates that do not run chunk by chunk).
    pub fn partial_over(
        partial: &AggregateExec,
        chunks: &[RecordBatch],
        partitions: usize,
    ) -> Result<AggregateExec> {
        let mut spread = vec![Vec::new(); partitions.max(1)];
        let parts = spread.len();
        for (i, batch) in chunks.iter().enumerate() {
            spread[i % parts].push(batch.clone());
        }
        let input = MemorySourceConfig::try_new_exec(&spread, partial.input().schema(), None)?;
        Ok(AggregateExec::try_new(
            AggregateMode::Partial,
            partial.group_expr().clone(),
            partial.aggr_expr().to_vec(),
            partial.filter_expr().to_vec(),
            input,
            partial.input_schema(),
        )?)
    }

    /// Drops the rows kept for fit `scope`; says whether there were any
    /// (another fit's rows are never touched).
    pub fn release(&self, scope: u64) -> bool {
        let mut kept = self.kept.lock().expect("not poisoned");
        let before = kept.len();
        kept.retain(|k| k.scope != scope);
        kept.len() != before
    }
}

/// `plan` without its round-robin repartitions, which only spread batches
/// over threads in the order they happen to come: without them the
/// partitions, read one after the other, give the rows in file order.
fn in_file_order(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            if let Some(repartition) = node.downcast_ref::<RepartitionExec>()
                && matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_))
            {
                return Ok(Transformed::yes(Arc::clone(repartition.input())));
            }
            Ok(Transformed::no(node))
        })?
        .data)
}

/// The batches of `partitions`, in order, cut into chunks of exactly
/// [`CHUNK_ROWS`] rows (the last one shorter). A batch that is a whole
/// chunk is kept as it is; pieces are copied together, and each batch is
/// dropped once it is cut, so the rows are held about once.
fn fixed_chunks(schema: &SchemaRef, partitions: Vec<Vec<RecordBatch>>) -> Result<Vec<RecordBatch>> {
    let mut chunks = Vec::new();
    let mut pieces: Vec<RecordBatch> = Vec::new();
    let mut pending = 0;
    for batch in partitions.into_iter().flatten() {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let take = (CHUNK_ROWS - pending).min(batch.num_rows() - offset);
            pieces.push(batch.slice(offset, take));
            offset += take;
            pending += take;
            if pending == CHUNK_ROWS {
                chunks.push(join(schema, std::mem::take(&mut pieces))?);
                pending = 0;
            }
        }
    }
    if pending > 0 {
        chunks.push(join(schema, pieces)?);
    }
    Ok(chunks)
}

/// One batch of `pieces`: the piece itself when there is one.
fn join(schema: &SchemaRef, mut pieces: Vec<RecordBatch>) -> Result<RecordBatch> {
    if pieces.len() == 1 {
        return Ok(pieces.pop().expect("one piece"));
    }
    Ok(concat_batches(schema, &pieces)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    #[test]
    fn chunks_are_fixed_whatever_the_batches() {
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let rows = 2 * CHUNK_ROWS + 5;
        let batch = |from: usize, to: usize| {
            let values = Int64Array::from_iter_values(from as i64..to as i64);
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(values)]).unwrap()
        };
        let one = vec![vec![batch(0, rows)]];
        let ragged = vec![
            vec![batch(0, 7), batch(7, CHUNK_ROWS + 3)],
            vec![],
            vec![batch(CHUNK_ROWS + 3, rows)],
        ];
        for partitions in [one, ragged] {
            let chunks = fixed_chunks(&schema, partitions).unwrap();
            let sizes: Vec<usize> = chunks.iter().map(|c| c.num_rows()).collect();
            assert_eq!(sizes, [CHUNK_ROWS, CHUNK_ROWS, 5]);
            let all: Vec<i64> = chunks
                .iter()
                .flat_map(|c| c.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            assert_eq!(all, (0..rows as i64).collect::<Vec<_>>());
        }
    }
}
