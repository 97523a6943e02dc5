//! What a site keeps between the rounds of one fit: the decoded input rows
//! of the fit's encoder.
//!
//! The rounds of an iterative fit (GLM by IRLS, FedSGD) read the same rows
//! each time. An encoder sent as part of a fit carries the fit's scope id;
//! the site then keeps the decoded input of that encoder's partial aggregate
//! in memory, so that rounds after the first do not read and decode its
//! files again. What a site keeps never leaves it, and it is dropped when
//! the fit ends (the coordinator releases the scope) or when another fit
//! starts.

use std::sync::{Arc, Mutex};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::collect;

use crate::error::Result;

/// The rows kept for the current fit, if any.
#[derive(Debug, Default)]
pub struct KeptRows {
    kept: Mutex<Option<Kept>>,
}

/// Decoded rows kept for the rounds of one fit.
#[derive(Debug)]
struct Kept {
    scope: u64,
    /// What the rows are: the text of the plan below the aggregate.
    key: String,
    batches: Vec<RecordBatch>,
}

impl KeptRows {
    /// `partial` over the fit's kept input: read (and kept) in the first
    /// round of fit `scope`, reused in the later rounds whose input is the
    /// same (`key`). The kept batches are spread over `partitions`.
    pub async fn partial_over_kept(
        &self,
        partial: AggregateExec,
        scope: u64,
        key: String,
        task_ctx: Arc<TaskContext>,
        partitions: usize,
    ) -> Result<AggregateExec> {
        let cached = {
            let kept = self.kept.lock().expect("not poisoned");
            kept.as_ref()
                .filter(|k| k.scope == scope && k.key == key)
                .map(|k| k.batches.clone())
        };
        let batches = match cached {
            Some(batches) => batches,
            None => {
                let batches = collect(Arc::clone(partial.input()), task_ctx).await?;
                *self.kept.lock().expect("not poisoned") = Some(Kept {
                    scope,
                    key,
                    batches: batches.clone(),
                });
                batches
            }
        };
        let mut spread = vec![Vec::new(); partitions.max(1)];
        let parts = spread.len();
        for (i, batch) in batches.into_iter().enumerate() {
            spread[i % parts].push(batch);
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

    /// Drops the rows kept for fit `scope` (nothing if another fit's are kept).
    pub fn release(&self, scope: u64) {
        let mut kept = self.kept.lock().expect("not poisoned");
        if kept.as_ref().is_some_and(|k| k.scope == scope) {
            *kept = None;
        }
    }
}
