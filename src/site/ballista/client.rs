//! The worker's side of a cluster: a site's physical plan sent to the
//! scheduler as one Ballista job (Ballista's physical-plan submission:
//! the scheduler cuts it into stages but plans nothing itself), and the
//! job's output, the site's state batches, read back.
//!
//! The plan is the one the worker would run on its own files, with one
//! change: its partitions' partial states are gathered by a
//! `CoalescePartitionsExec` instead of the site's in-partition-order
//! merge ([`InPartitionOrderExec`]), so that Ballista runs the partial
//! aggregate as one task per file partition, spread over the executors,
//! and the reduce to one state row per group as a last task. Floating
//! sums merged in the order the tasks finish may differ in their last
//! bits from the local run's (1e-12 relative); counts, integers and
//! strings are the same.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result as DFResult;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::PhysicalPlanNode;
use futures::TryStreamExt;

use ballista_core::execution_plans::execute_physical_plan;
use ballista_core::extension::SessionConfigExt;

use crate::site::engine::in_order::InPartitionOrderExec;

use super::codec::SiteCodec;

/// A worker's connection settings for its cluster (each job connects anew).
#[derive(Debug)]
pub(crate) struct BallistaClient {
    scheduler_url: String,
    config: SessionConfig,
    codec: SiteCodec,
    session_id: String,
}

impl BallistaClient {
    /// The client of the scheduler at `host_port` (HOST:PORT).
    pub(crate) fn new(host_port: &str) -> Self {
        Self {
            scheduler_url: format!("http://{host_port}"),
            config: SessionConfig::new_with_ballista(),
            codec: SiteCodec::new(),
            session_id: format!("fedsql-worker-{}", std::process::id()),
        }
    }

    /// Runs `plan` on the cluster and collects its output.
    pub(crate) async fn collect(&self, plan: Arc<dyn ExecutionPlan>) -> DFResult<Vec<RecordBatch>> {
        let plan = for_the_cluster(plan)?;
        let stream = execute_physical_plan::<PhysicalPlanNode>(
            self.scheduler_url.clone(),
            &self.config.ballista_config(),
            plan,
            &self.codec,
            self.session_id.clone(),
            self.config.clone(),
        )
        .await?;
        stream.try_collect().await
    }
}

/// `plan` with its in-partition-order merges as Ballista stage boundaries.
fn for_the_cluster(plan: Arc<dyn ExecutionPlan>) -> DFResult<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            if node.downcast_ref::<InPartitionOrderExec>().is_none() {
                return Ok(Transformed::no(node));
            }
            let input = Arc::clone(node.children()[0]);
            let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(input));
            Ok(Transformed::yes(merged))
        })?
        .data)
}
