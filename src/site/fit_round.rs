//! One round of a fit over the rows a site keeps for it: the partial
//! aggregate computed chunk by chunk, with a fixed chunking and a fixed
//! merge order, so that the state is the same bit for bit whatever the
//! number of threads.
//!
//! The kept rows (see [`crate::site::kept_rows`]) are cut into chunks of
//! [`CHUNK_ROWS`] rows in the order of the site's files. Each chunk gets its
//! own accumulators (the same ones DataFusion's partial aggregate would
//! use: the fit's step, and under a disclosure policy the counting
//! wrappers of [`crate::site::group_rows`], so the policy counts and checks
//! exactly what it counts on the ordinary path); up to `threads` threads
//! take chunks as they come; the chunks' states are then merged in chunk
//! order. A round thus costs one pass over columns already in memory: no
//! planning of a scan, no file reads, no per-batch operator overhead.
//!
//! Only a partial aggregate without groups, DISTINCT or ordered inputs runs
//! this way (every fit's round); any other runs as DataFusion's partial
//! aggregate over the kept chunks.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::batch_filter;

use crate::error::{FedError, Result};

/// Rows per chunk of a fit's kept rows: the unit of work of one thread and
/// of the merge order. Fixed, so that the sums do not depend on threads.
pub const CHUNK_ROWS: usize = 8_192;

/// Whether `partial` can run chunk by chunk (see the module's notes).
pub fn runs_by_chunks(partial: &AggregateExec) -> bool {
    partial.group_expr().is_empty()
        && partial
            .aggr_expr()
            .iter()
            .all(|a| !a.is_distinct() && a.order_bys().is_empty())
}

/// The partial aggregate's state row over `chunks`, computed by up to
/// `threads` threads and merged in chunk order.
pub fn partial_states(
    partial: &AggregateExec,
    chunks: &[RecordBatch],
    threads: usize,
) -> Result<RecordBatch> {
    let threads = threads.clamp(1, chunks.len().max(1));
    let next = AtomicUsize::new(0);
    let mut per_chunk: Vec<(usize, Vec<ScalarValue>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<Vec<(usize, Vec<ScalarValue>)>> {
                    let mut done = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some(chunk) = chunks.get(at) else {
                            return Ok(done);
                        };
                        done.push((at, chunk_states(partial, chunk)?));
                    }
                })
            })
            .collect();
        let mut all = Vec::with_capacity(chunks.len());
        for worker in workers {
            let done = worker
                .join()
                .map_err(|_| FedError::Internal("a fit round's thread panicked".into()))??;
            all.extend(done);
        }
        Ok::<_, FedError>(all)
    })?;
    per_chunk.sort_unstable_by_key(|(at, _)| *at);
    merge_in_order(partial, &per_chunk)
}

/// One chunk's states: every aggregate's state values, in the order of
/// the partial aggregate's output columns.
fn chunk_states(partial: &AggregateExec, chunk: &RecordBatch) -> Result<Vec<ScalarValue>> {
    let mut states = Vec::new();
    for (aggregate, filter) in partial.aggr_expr().iter().zip(partial.filter_expr()) {
        let rows = match filter {
            Some(filter) => Cow::Owned(batch_filter(chunk, filter)?),
            None => Cow::Borrowed(chunk),
        };
        let values = aggregate
            .expressions()
            .iter()
            .map(|e| e.evaluate(&rows)?.into_array(rows.num_rows()))
            .collect::<datafusion::common::Result<Vec<ArrayRef>>>()?;
        let mut accumulator = aggregate.create_accumulator()?;
        accumulator.update_batch(&values)?;
        states.extend(accumulator.state()?);
    }
    Ok(states)
}

/// The chunks' states merged in chunk order, as the partial aggregate's
/// one output row.
fn merge_in_order(
    partial: &AggregateExec,
    per_chunk: &[(usize, Vec<ScalarValue>)],
) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::new();
    let mut at = 0;
    for aggregate in partial.aggr_expr() {
        let width = aggregate.state_fields()?.len();
        let mut accumulator = aggregate.create_accumulator()?;
        if !per_chunk.is_empty() {
            let states = (at..at + width)
                .map(|column| {
                    ScalarValue::iter_to_array(
                        per_chunk.iter().map(|(_, values)| values[column].clone()),
                    )
                })
                .collect::<datafusion::common::Result<Vec<_>>>()?;
            accumulator.merge_batch(&states)?;
        }
        for value in accumulator.state()? {
            columns.push(value.to_array()?);
        }
        at += width;
    }
    Ok(RecordBatch::try_new(
        ExecutionPlan::schema(partial),
        columns,
    )?)
}

/// The plan that hands the chunks' merged state on as the partial
/// aggregate's would be: a reduce over the one state row, so that what
/// runs after it (the policy's checks, DP, secure masking) sees the same
/// plan shape as on the ordinary path.
pub fn reduce_over(partial: &AggregateExec, states: RecordBatch) -> Result<Arc<dyn ExecutionPlan>> {
    let input =
        MemorySourceConfig::try_new_exec(&[vec![states]], ExecutionPlan::schema(partial), None)?;
    Ok(Arc::new(AggregateExec::try_new(
        AggregateMode::PartialReduce,
        partial.group_expr().as_final(),
        partial.aggr_expr().to_vec(),
        partial.filter_expr().to_vec(),
        input,
        partial.input_schema(),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Float64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    /// A fit round's partial aggregate (with a plain sum beside it) and
    /// its input in seven chunks of random rows.
    async fn partial_and_chunks() -> (AggregateExec, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("y", DataType::Float64, true),
        ]));
        let mut state = 1_u64;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1_u64 << 53) as f64
        };
        let rows: Vec<RecordBatch> = (0..7)
            .map(|c| {
                let n = if c == 6 { 1000 } else { CHUNK_ROWS };
                let x: Float64Array = (0..n).map(|_| Some(uniform() * 4.0 - 2.0)).collect();
                let y: Float64Array = (0..n)
                    .map(|_| Some(f64::from(u8::from(uniform() < 0.4))))
                    .collect();
                RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(x), Arc::new(y)]).unwrap()
            })
            .collect();
        let ctx = SessionContext::new();
        fedsql_udfs::register_all(&ctx);
        let table = MemTable::try_new(schema, vec![rows]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let plan = ctx
            .sql("SELECT sum(x), irls_step('family=binomial;beta=0.2,-0.5', y, 1.0, 0.0, 1.0, 1.0, x) FROM t")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let partial = crate::wire::encoder::partial_aggregate(&plan).unwrap();
        let input = Arc::clone(partial.input());
        let chunks = collect(input, ctx.task_ctx()).await.unwrap();
        (partial, chunks)
    }

    #[tokio::test]
    async fn a_rounds_state_is_the_same_whatever_the_threads() {
        let (partial, chunks) = partial_and_chunks().await;
        assert!(runs_by_chunks(&partial));
        let one = partial_states(&partial, &chunks, 1).unwrap();
        for threads in [2, 3, 8] {
            assert_eq!(partial_states(&partial, &chunks, threads).unwrap(), one);
        }
    }
}
