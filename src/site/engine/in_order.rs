//! A site's state in the same bits every time: the partial states of its
//! partitions merged in partition order, not in the order they finish.
//!
//! A site aggregates its rows in several partitions at once and reduces
//! their partial states to one state row per group. DataFusion's
//! `CoalescePartitionsExec` hands the partitions' states on as they
//! finish, and floating-point sums merged in a different order differ in
//! their last bits, so the same query over the same rows could return a
//! different state from one run to the next. [`InPartitionOrderExec`]
//! runs the partitions at once as well, and hands their outputs on in
//! partition order.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use fedsql_udfs::cox_step;
use futures::TryStreamExt;

use crate::error::Result;

/// The site side of an encoder: the partial aggregate, its partitions
/// reduced to one state row per group (`PartialReduce`: states in, states
/// out), merged in partition order. A partial aggregate without groups
/// over one partition already gives one state row, and is returned as it
/// is, unless its state has a field of rows for the site's reduce stage
/// (`cox_step`'s `[site_rows]`, which only that stage empties). A grouped
/// one may give a group several rows, when it emits early under memory
/// pressure, so it is always reduced.
pub(crate) fn one_state_per_group(partial: AggregateExec) -> Result<Arc<dyn ExecutionPlan>> {
    let partitions = partial.properties().output_partitioning().partition_count();
    let for_the_reduce = partial
        .schema()
        .fields()
        .iter()
        .any(|f| cox_step::is_site_rows(f.name()));
    if partitions == 1 && partial.group_expr().is_empty() && !for_the_reduce {
        return Ok(Arc::new(partial));
    }
    let group_by = partial.group_expr().as_final();
    let aggr = partial.aggr_expr().to_vec();
    let filters = partial.filter_expr().to_vec();
    let input_schema = partial.input_schema();
    let partial: Arc<dyn ExecutionPlan> = Arc::new(partial);
    let merged: Arc<dyn ExecutionPlan> = if partitions > 1 {
        Arc::new(InPartitionOrderExec::new(partial))
    } else {
        partial
    };
    Ok(Arc::new(AggregateExec::try_new(
        AggregateMode::PartialReduce,
        group_by,
        aggr,
        filters,
        merged,
        input_schema,
    )?))
}

/// Its input's partitions as one, run at once and handed on in partition
/// order: all of partition 0's batches, then partition 1's, and so on.
/// Every partition's output is held until the last one has finished, so
/// this is for inputs of few rows (partial aggregate states).
#[derive(Debug)]
pub(crate) struct InPartitionOrderExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl InPartitionOrderExec {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        InPartitionOrderExec {
            input,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for InPartitionOrderExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "InPartitionOrderExec")
    }
}

impl ExecutionPlan for InPartitionOrderExec {
    fn name(&self) -> &str {
        "InPartitionOrderExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
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
        Ok(Arc::new(InPartitionOrderExec::new(children.swap_remove(0))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "InPartitionOrderExec has one partition, not {partition}"
            )));
        }
        // Started now, each in its own task (stopped when dropped).
        let tasks = (0..self.input.properties().partitioning.partition_count())
            .map(|p| {
                let stream = self.input.execute(p, Arc::clone(&context))?;
                Ok(SpawnedTask::spawn(stream.try_collect::<Vec<RecordBatch>>()))
            })
            .collect::<DFResult<Vec<_>>>()?;
        let in_order = futures::future::try_join_all(tasks.into_iter().map(|task| async {
            task.join_unwind()
                .await
                .map_err(|e| DataFusionError::ExecutionJoin(Box::new(e)))?
        }));
        let batches = futures::stream::once(in_order)
            .map_ok(|partitions| futures::stream::iter(partitions.into_iter().flatten().map(Ok)))
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.input.schema(),
            batches,
        )))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Float64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    use super::*;

    /// One batch of one value per partition, the partitions' values
    /// chosen so that adding them in another order changes the sum.
    fn partitions(values: &[f64]) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, false)]));
        let batches: Vec<Vec<RecordBatch>> = values
            .iter()
            .map(|&v| {
                vec![
                    RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![Arc::new(Float64Array::from(vec![v]))],
                    )
                    .unwrap(),
                ]
            })
            .collect();
        MemorySourceConfig::try_new_exec(&batches, schema, None).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partitions_are_handed_on_in_their_order() {
        // Partition 0 has 200 batches and ends last; the others have one.
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, false)]));
        let batch = |v: f64| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Float64Array::from(vec![v]))],
            )
            .unwrap()
        };
        let mut parts: Vec<Vec<RecordBatch>> =
            vec![(0..200).map(|i| batch(f64::from(i))).collect()];
        parts.extend([1e16, -1e16, 0.5].map(|v| vec![batch(v)]));
        let expected: Vec<f64> = parts
            .iter()
            .flatten()
            .map(|b| b.column(0).as_primitive::<Float64Type>().value(0))
            .collect();
        let input = MemorySourceConfig::try_new_exec(&parts, schema, None).unwrap();
        let merged = Arc::new(InPartitionOrderExec::new(input));
        for _ in 0..5 {
            let batches = collect(merged.clone(), SessionContext::new().task_ctx())
                .await
                .unwrap();
            let seen: Vec<f64> = batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Float64Type>().values().to_vec())
                .collect();
            assert_eq!(seen, expected);
        }
    }

    #[tokio::test]
    async fn one_partition_without_groups_needs_no_reduce() {
        use crate::protocol::rebind::tests::{aggregate, partial};
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_target_partitions(1),
        );
        let values = [1e16, 1.0, -1e16, 1.0, 3.0, 0.5];
        let table = datafusion::datasource::MemTable::try_new(
            partitions(&values).schema(),
            vec![collect(partitions(&values), ctx.task_ctx()).await.unwrap()],
        )
        .unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let mode = |plan: &Arc<dyn ExecutionPlan>| {
            *plan
                .downcast_ref::<AggregateExec>()
                .expect("an aggregate")
                .mode()
        };
        let sum = partial(
            &ctx,
            &aggregate(&ctx, "SELECT sum(v), count(*) FROM t").await,
        )
        .await;
        let grouped = partial(
            &ctx,
            &aggregate(&ctx, "SELECT v > 0 AS g, sum(v) FROM t GROUP BY v > 0").await,
        )
        .await;
        let alone = one_state_per_group(sum.clone()).unwrap();
        assert_eq!(mode(&alone), AggregateMode::Partial);
        assert_eq!(
            mode(&one_state_per_group(grouped).unwrap()),
            AggregateMode::PartialReduce
        );
        // The same one state row as reduced.
        let reduced: Arc<dyn ExecutionPlan> = Arc::new(
            AggregateExec::try_new(
                AggregateMode::PartialReduce,
                sum.group_expr().as_final(),
                sum.aggr_expr().to_vec(),
                sum.filter_expr().to_vec(),
                Arc::new(sum.clone()),
                sum.input_schema(),
            )
            .unwrap(),
        );
        let states = collect(alone, ctx.task_ctx()).await.unwrap();
        assert_eq!(states.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
        assert_eq!(states, collect(reduced, ctx.task_ctx()).await.unwrap());
    }
}
