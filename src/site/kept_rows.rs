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
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::collect;
use fedsql_udfs::constant_argument::ConstantArgument;

use crate::error::Result;
use crate::site::yielding::yield_after_each_batch;
use crate::wire::rebind;

/// The aggregates whose literal arguments a round over kept rows shares
/// between batches: fedsql's step aggregates, which read a literal only
/// through [`constant_argument::literal_value`], and `count`, which reads
/// none.
const SHARES_CONSTANTS: [&str; 7] = [
    "irls_step",
    "sgd_gradient",
    "sgd_newton",
    "cox_step",
    "kmeans_step",
    "life_table",
    "count",
];

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
    /// same (`key`). The kept batches are spread over `partitions` (fewer
    /// when there are fewer batches).
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
        // No more partitions than batches: an empty partition still costs
        // a round a task and a state to merge, which matter on small data.
        let mut spread = vec![Vec::new(); partitions.min(batches.len()).max(1)];
        let parts = spread.len();
        for (i, batch) in batches.into_iter().enumerate() {
            spread[i % parts].push(batch);
        }
        let input = MemorySourceConfig::try_new_exec(&spread, partial.input().schema(), None)?;
        let over_kept = AggregateExec::try_new(
            AggregateMode::Partial,
            partial.group_expr().clone(),
            shared_constants(partial.aggr_expr()),
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

/// The aggregates of a round over kept rows, with the literal arguments
/// of the [`SHARES_CONSTANTS`] aggregates wrapped in a [`ConstantArgument`]:
/// a round then fills one array per literal and batch length rather than
/// one per batch, and a later round rebinds the wrapped plan as it is
/// (`rebind::rebind` keeps a changed literal wrapped).
fn shared_constants(aggregates: &[Arc<AggregateFunctionExpr>]) -> Vec<Arc<AggregateFunctionExpr>> {
    aggregates
        .iter()
        .map(|aggregate| {
            if !SHARES_CONSTANTS.contains(&aggregate.fun().name())
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
mod tests {
    use datafusion::arrow::array::{AsArray, Float64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::wire::rebind::tests::{aggregate, partial, run};

    const OLD: &str = "family=binomial;beta=0.5,-0.1";
    const STEP: &str = "SELECT irls_step('family=binomial;beta=0.5,-0.1', y, 1.0, 0.0, 1.0, 1.0, x), count(*) FROM t";

    /// A table `t(x, y)` of 20,000 rows in batches of 8192 and fewer, and
    /// fedsql's aggregates.
    fn context() -> SessionContext {
        let ctx = SessionContext::new();
        fedsql_udfs::register_all(&ctx);
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, false),
            Field::new("y", DataType::Float64, false),
        ]));
        let batches = [8192, 8192, 3616].map(|rows| {
            let column =
                |f: fn(u32) -> f64| Arc::new(Float64Array::from_iter_values((0..rows).map(f)));
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    column(|i| f64::from((i * 37) % 101) / 50.0 - 1.0),
                    column(|i| f64::from((i * 13) % 7 < 3)),
                ],
            )
            .unwrap()
        });
        let table =
            datafusion::datasource::MemTable::try_new(schema, vec![batches.to_vec()]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        ctx
    }

    fn shared(exec: &AggregateExec) -> AggregateExec {
        AggregateExec::try_new(
            *exec.mode(),
            exec.group_expr().clone(),
            shared_constants(exec.aggr_expr()),
            exec.filter_expr().to_vec(),
            Arc::clone(exec.input()),
            exec.input_schema(),
        )
        .unwrap()
    }

    fn wrapped_arguments(exec: &AggregateExec) -> usize {
        exec.aggr_expr()
            .iter()
            .flat_map(|a| a.expressions())
            .filter(|e| e.downcast_ref::<ConstantArgument>().is_some())
            .count()
    }

    #[tokio::test]
    async fn shared_constants_give_the_same_state_and_stay_shared_when_rebound() {
        let ctx = context();
        let old_plan = aggregate(&ctx, STEP).await;
        let plain = partial(&ctx, &old_plan).await;
        let over_kept = shared(&plain);
        // The config, trials, offset, weight and intercept, and count's 1.
        assert_eq!(wrapped_arguments(&over_kept), 6);
        assert_eq!(
            run(&ctx, over_kept.clone()).await,
            run(&ctx, plain.clone()).await
        );

        let new_plan =
            rebind::replace_text_argument(&old_plan, OLD, "family=binomial;beta=-0.25,0.75")
                .unwrap();
        let fresh = partial(&ctx, &new_plan).await;
        let changes = rebind::argument_changes(&old_plan, &new_plan).expect("only the config");
        let rebound = rebind::rebind(&over_kept, &changes)
            .unwrap()
            .expect("a shared literal rebinds");
        assert_eq!(wrapped_arguments(&rebound), 6);
        let (rebound_state, fresh_state) = (
            run(&ctx, rebound.clone()).await,
            run(&ctx, fresh.clone()).await,
        );
        assert_eq!(rebound_state[0].columns(), fresh_state[0].columns());
        assert_ne!(
            rebound_state[0].columns(),
            run(&ctx, plain.clone()).await[0].columns()
        );
    }

    #[tokio::test]
    async fn kept_rows_are_spread_over_no_more_partitions_than_batches() {
        let ctx = context();
        let plan = aggregate(&ctx, STEP).await;
        let plain = partial(&ctx, &plan).await;
        let kept = KeptRows::default();
        // The table's three batches over 2, 3 and 8 partitions asked for.
        for (asked, spread) in [(2, 2), (3, 3), (8, 3)] {
            let over_kept = kept
                .partial_over_kept(
                    plain.clone(),
                    &plan,
                    asked as u64,
                    "t".into(),
                    ctx.task_ctx(),
                    asked,
                )
                .await
                .unwrap();
            let partitions = over_kept
                .input()
                .properties()
                .partitioning
                .partition_count();
            assert_eq!(partitions, spread, "{asked} partitions asked for");
            // Every kept row is counted once, whatever the spread.
            let counted: i64 = run(&ctx, over_kept)
                .await
                .iter()
                .map(|b| {
                    let count = b.column(b.num_columns() - 1);
                    datafusion::arrow::compute::sum(count.as_primitive::<Int64Type>()).unwrap_or(0)
                })
                .sum();
            assert_eq!(counted, 20_000);
        }
    }
}
