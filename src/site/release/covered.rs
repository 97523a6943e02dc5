//! How many rows a state covers: a pass-through operator that counts the
//! rows flowing into a client's partial aggregate, for the worker's log.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::common::Result as DFResult;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::TryStreamExt;

/// Counts the rows its input yields; otherwise its input.
#[derive(Debug)]
pub(crate) struct CountRowsExec {
    input: Arc<dyn ExecutionPlan>,
    rows: Arc<AtomicU64>,
}

impl CountRowsExec {
    /// Puts a counter under every partial aggregate of `plan`; the counter
    /// holds the rows they consumed once the plan has run.
    pub(crate) fn under_partial_aggregates(
        plan: Arc<dyn ExecutionPlan>,
    ) -> DFResult<(Arc<dyn ExecutionPlan>, Arc<AtomicU64>)> {
        let rows = Arc::new(AtomicU64::new(0));
        let counted = plan
            .transform_down(|node| {
                let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                    return Ok(Transformed::no(node));
                };
                if *agg.mode() != AggregateMode::Partial {
                    return Ok(Transformed::no(node));
                }
                let input: Arc<dyn ExecutionPlan> = Arc::new(CountRowsExec {
                    input: Arc::clone(agg.input()),
                    rows: Arc::clone(&rows),
                });
                let counted: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
                    AggregateMode::Partial,
                    agg.group_expr().clone(),
                    agg.aggr_expr().to_vec(),
                    agg.filter_expr().to_vec(),
                    input,
                    agg.input_schema(),
                )?);
                Ok(Transformed::new(counted, true, TreeNodeRecursion::Jump))
            })?
            .data;
        Ok((counted, rows))
    }

    /// The rows counted so far.
    pub(crate) fn count(rows: &AtomicU64) -> u64 {
        rows.load(Ordering::Relaxed)
    }
}

impl DisplayAs for CountRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CountRowsExec")
    }
}

impl ExecutionPlan for CountRowsExec {
    fn name(&self) -> &str {
        "CountRowsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(CountRowsExec {
            input: children.swap_remove(0),
            rows: Arc::clone(&self.rows),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let rows = Arc::clone(&self.rows);
        let stream = self
            .input
            .execute(partition, context)?
            .inspect_ok(move |batch| {
                rows.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.input.schema(),
            stream,
        )))
    }
}
