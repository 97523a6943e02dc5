//! A physical plan whose one batch is computed by an async function when the
//! plan is executed (not when it is planned): model fitting table functions
//! run their federated rounds here, so `EXPLAIN` does not fit anything.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::future::BoxFuture;

/// Produces the batch, when executed.
pub type Compute = Arc<dyn Fn() -> BoxFuture<'static, crate::Result<RecordBatch>> + Send + Sync>;

/// Runs `compute` at execution time and yields its batch (projected).
pub struct DeferredExec {
    label: String,
    compute: Compute,
    projection: Option<Vec<usize>>,
    props: Arc<PlanProperties>,
}

impl DeferredExec {
    /// A plan whose output (of `schema`, before `projection`) `compute` makes.
    pub fn new(
        label: String,
        schema: SchemaRef,
        projection: Option<Vec<usize>>,
        compute: Compute,
    ) -> Result<Self> {
        let projected = match &projection {
            Some(p) => Arc::new(schema.project(p)?),
            None => schema,
        };
        let props = PlanProperties::new(
            EquivalenceProperties::new(projected),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Self {
            label,
            compute,
            projection,
            props: Arc::new(props),
        })
    }
}

impl fmt::Debug for DeferredExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeferredExec({})", self.label)
    }
}

impl DisplayAs for DeferredExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ModelFitExec: {}", self.label)
    }
}

impl ExecutionPlan for DeferredExec {
    fn name(&self) -> &str {
        "ModelFitExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let compute = Arc::clone(&self.compute);
        let projection = self.projection.clone();
        let schema = self.props.eq_properties.schema().clone();
        let batch = async move {
            let batch = compute()
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            match projection {
                Some(p) => Ok(batch.project(&p)?),
                None => Ok(batch),
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(batch),
        )))
    }
}
