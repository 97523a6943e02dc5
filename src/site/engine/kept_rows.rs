//! What a site keeps between the rounds of one fit: the decoded input rows
//! of the fit's encoder.
//!
//! The rounds of an iterative fit (GLM by IRLS, FedSGD) read the same rows
//! each time. An encoder sent as part of a fit carries the fit's scope id;
//! the site then keeps the decoded input of that encoder's partial aggregate
//! in memory, so that rounds after the first do not read and decode its
//! files again. What a site keeps never leaves it.
//!
//! The first round reads the rows and keeps them, then aggregates the
//! kept rows as every later round does. They are kept in the order of the
//! site's files, whichever of the partitions that read them ends first,
//! and every round spreads them over [`KEPT_PARTITIONS`] partitions, a
//! number that does not depend on the machine's cores, whose states the
//! site merges in partition order ([`crate::site::engine::in_order`]). So a fit
//! adds the same rows in the same order in every round, run and machine,
//! and its sums have the same bits (for a source without a filter; a
//! filter's output batches can be cut differently as the reading is
//! spread over more or fewer cores).
//!
//! The rows of a fit belong to the session that started it: they are used
//! and released only by requests that carry its scope id (a random 64-bit
//! number the coordinator draws per fit, so one session cannot name
//! another's). Another fit starting does not drop them; a site keeps the
//! rows of at most [`MAX_KEPT_FITS`] fits, and drops the oldest beyond that
//! (a fit whose coordinator went away without releasing it).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, collect_partitioned};
use fedsql_udfs::constant_argument::ConstantArgument;

use crate::error::Result;
use crate::protocol::rebind;
use crate::site::engine::session::SiteEngine;
use crate::site::engine::small_parquet::row_groups::RowGroupsExec;
use crate::site::engine::yielding::yield_after_each_batch;

mod doubles;
use doubles::{Doubles, shares_constants};

/// How many fits' rows a site keeps at once.
pub(crate) const MAX_KEPT_FITS: usize = 4;

/// The rows kept for the fits under way, oldest first.
#[derive(Debug, Default)]
pub(crate) struct KeptRows {
    kept: Mutex<VecDeque<Kept>>,
}

/// Decoded rows kept for the rounds of one fit.
#[derive(Debug)]
struct Kept {
    scope: u64,
    /// What the rows are: the text of the plan below the aggregate.
    key: String,
    batches: Vec<RecordBatch>,
    /// The integer columns kept as doubles (see [`doubles`]).
    doubles: Doubles,
    /// The encoder of the round that planned `partial`, and its partial
    /// aggregate over the kept rows: later rounds that differ only in
    /// their config rebind it instead of planning (see `protocol::rebind`).
    planned: Option<(LogicalPlan, AggregateExec)>,
}

impl KeptRows {
    /// `partial` over the fit's kept input: read (and kept) in the first
    /// round of fit `scope`, reused in the later rounds whose input is the
    /// same (`key`).
    pub(crate) async fn partial_over_kept(
        &self,
        partial: AggregateExec,
        encoder: &LogicalPlan,
        scope: u64,
        key: String,
        site: (&SiteEngine, &[PathBuf]),
        task_ctx: Arc<TaskContext>,
    ) -> Result<AggregateExec> {
        let cached = {
            let kept = self.kept.lock().expect("not poisoned");
            kept.iter()
                .find(|k| k.scope == scope && k.key == key)
                .map(|k| (k.batches.clone(), k.doubles.clone()))
        };
        // Rows kept with a column as doubles serve a round that reads it
        // only as doubles; another is served by reading the rows again.
        let usable = cached
            .and_then(|(batches, doubles)| doubles.rewrite(&partial).map(|over| (batches, over)));
        let (batches, over) = match usable {
            Some(kept) => kept,
            None => {
                let read = read_in_order(partial.input(), site, task_ctx).await?;
                let doubles = Doubles::of(&partial);
                let (doubles, over) = match doubles.rewrite(&partial) {
                    Some(over) => (doubles, over),
                    None => (Doubles::default(), doubles::OverKept::plain(&partial)),
                };
                let batches = doubles.keep(read, &partial.input().schema())?;
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
                    doubles,
                    planned: None,
                });
                (batches, over)
            }
        };
        let over_kept = over_batches(&partial, over, batches)?;
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
    pub(crate) fn rebound(
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

    /// How many fits' rows are kept.
    pub(crate) fn fits(&self) -> usize {
        self.kept.lock().expect("not poisoned").len()
    }

    /// Drops the rows kept for fit `scope`; says whether there were any
    /// (another fit's rows are never touched).
    pub(crate) fn release(&self, scope: u64) -> bool {
        let mut kept = self.kept.lock().expect("not poisoned");
        let before = kept.len();
        kept.retain(|k| k.scope != scope);
        kept.len() != before
    }
}

/// The rows below a round's aggregate, read with the partitions of the
/// site's scan at once (when the engine gives leave: one site per core in
/// this process) and put together in partition order: for a site's
/// files, the order of their rows, however many cores read them. Round-
/// robin repartitions (which DataFusion adds to spread a small scan over
/// the cores, and which deal batches out in turn) are taken out first:
/// they would put the rows in an order that depends on the core count.
/// A scan of the site's Parquet files is read by the site, row group by
/// row group ([`RowGroupsExec`]), when it can be.
async fn read_in_order(
    input: &Arc<dyn ExecutionPlan>,
    (engine, files): (&SiteEngine, &[PathBuf]),
    task_ctx: Arc<TaskContext>,
) -> Result<Vec<RecordBatch>> {
    let config = task_ctx.session_config();
    let (streams, batch_size) = (config.target_partitions(), config.batch_size());
    let input = Arc::clone(input)
        .transform_up(|node| {
            let round_robin = node
                .downcast_ref::<RepartitionExec>()
                .filter(|r| matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)));
            if let Some(repartition) = round_robin {
                return Ok(Transformed::yes(Arc::clone(repartition.input())));
            }
            Ok(
                match RowGroupsExec::of(&node, files, engine.footers(), streams, batch_size)? {
                    Some(scan) => Transformed::yes(Arc::new(scan) as Arc<dyn ExecutionPlan>),
                    None => Transformed::no(node),
                },
            )
        })?
        .data;
    let input = yield_after_each_batch(input)?;
    let _leave = engine.keeping().await;
    Ok(collect_partitioned(input, task_ctx)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// How many partitions a round spreads a fit's kept rows over (fewer when
/// there are fewer batches): fixed, not the machine's core count, so that
/// the rows each partition adds, and the order of their sums, are the same
/// on every machine. More than the cores of most machines, so that a round
/// still keeps them all busy; an empty partition would still cost a round
/// a task and a state to merge, which matter on small data.
pub(crate) const KEPT_PARTITIONS: usize = 16;

/// `partial` over kept `batches` (with its expressions `over` them),
/// dealt out in turn over [`KEPT_PARTITIONS`] partitions, its literal
/// arguments shared between batches.
fn over_batches(
    partial: &AggregateExec,
    over: doubles::OverKept,
    batches: Vec<RecordBatch>,
) -> Result<AggregateExec> {
    let mut spread = vec![Vec::new(); KEPT_PARTITIONS.min(batches.len()).max(1)];
    let parts = spread.len();
    for (i, batch) in batches.into_iter().enumerate() {
        spread[i % parts].push(batch);
    }
    let input = MemorySourceConfig::try_new_exec(&spread, Arc::clone(&over.schema), None)?;
    Ok(AggregateExec::try_new(
        AggregateMode::Partial,
        partial.group_expr().clone(),
        shared_constants(&over.aggregates),
        over.filters,
        input,
        over.schema,
    )?)
}

/// The aggregates of a round over kept rows, with the literal arguments
/// of the [`shares_constants`] aggregates wrapped in a [`ConstantArgument`]:
/// a round then fills one array per literal and batch length rather than
/// one per batch, and a later round rebinds the wrapped plan as it is
/// (`rebind::rebind` keeps a changed literal wrapped).
fn shared_constants(aggregates: &[Arc<AggregateFunctionExpr>]) -> Vec<Arc<AggregateFunctionExpr>> {
    aggregates
        .iter()
        .map(|aggregate| {
            if !shares_constants(aggregate.fun().name())
                || !aggregate.order_bys().is_empty()
                || aggregate.is_distinct()
            {
                return Arc::clone(aggregate);
            }
            let args = aggregate
                .expressions()
                .into_iter()
                .map(|arg| match arg.downcast_ref::<Literal>() {
                    Some(literal) => Arc::new(ConstantArgument::new(literal.clone())) as _,
                    None => arg,
                })
                .collect();
            aggregate
                .with_new_expressions(args, Vec::new())
                .map_or_else(|| Arc::clone(aggregate), Arc::new)
        })
        .collect()
}

#[cfg(test)]
mod tests;
