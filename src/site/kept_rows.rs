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

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::collect;

use crate::error::Result;
use crate::site::yielding::yield_after_each_batch;
use crate::wire::rebind;

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
    batches: Vec<RecordBatch>,
    /// The encoder of the round that planned `partial`, and its partial
    /// aggregate over the kept rows: later rounds that differ only in
    /// their config rebind it instead of planning (see `wire::rebind`).
    planned: Option<(LogicalPlan, AggregateExec)>,
}

impl KeptRows {
    /// `partial` over the fit's kept input: read (and kept) in the first
    /// round of fit `scope`, reused in the later rounds whose input is the
    /// same (`key`). The kept batches are spread over `partitions`.
    pub async fn partial_over_kept(
        &self,
        partial: AggregateExec,
        encoder: &LogicalPlan,
        scope: u64,
        key: String,
        task_ctx: Arc<TaskContext>,
        partitions: usize,
    ) -> Result<AggregateExec> {
        let cached = {
            let kept = self.kept.lock().expect("not poisoned");
            kept.iter()
                .find(|k| k.scope == scope && k.key == key)
                .map(|k| k.batches.clone())
        };
        let batches = match cached {
            Some(batches) => batches,
            None => {
                let input = yield_after_each_batch(Arc::clone(partial.input()))?;
                let batches = collect(input, task_ctx).await?;
                let mut kept = self.kept.lock().expect("not poisoned");
                // A fit keeps the input of its latest encoder only.
                kept.retain(|k| k.scope != scope);
                if kept.len() >= MAX_KEPT_FITS {
                    kept.pop_front();
                }
                kept.push_back(Kept {
                    scope,
                    key: key.clone(),
                    batches: batches.clone(),
                    planned: None,
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
        let over_kept = AggregateExec::try_new(
            AggregateMode::Partial,
            partial.group_expr().clone(),
            partial.aggr_expr().to_vec(),
            partial.filter_expr().to_vec(),
            input,
            partial.input_schema(),
        )?;
        let mut kept = self.kept.lock().expect("not poisoned");
        if let Some(entry) = kept.iter_mut().find(|k| k.scope == scope && k.key == key) {
            entry.planned = Some((encoder.clone(), over_kept.clone()));
        }
        Ok(over_kept)
    }

    /// The partial aggregate of a later round of fit `scope` over the same
    /// kept rows (`key`), when its encoder differs from the last planned
    /// one only in the literal arguments of its aggregates: that plan with
    /// the new literals bound, and no planning. `None` otherwise.
    pub fn rebound(
        &self,
        scope: u64,
        key: &str,
        encoder: &LogicalPlan,
    ) -> Result<Option<AggregateExec>> {
        let planned = {
            let kept = self.kept.lock().expect("not poisoned");
            kept.iter()
                .find(|k| k.scope == scope && k.key == key)
                .and_then(|k| k.planned.clone())
        };
        let Some((planned_for, partial)) = planned else {
            return Ok(None);
        };
        let Some(changes) = rebind::argument_changes(&planned_for, encoder) else {
            return Ok(None);
        };
        rebind::rebind(&partial, &changes)
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
