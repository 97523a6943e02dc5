//! A table computed by rounds: [`FitTable`] knows its schema when
//! planned, and its one batch is computed by [`DeferredExec`] when the plan
//! is executed (not when it is planned), so `EXPLAIN` runs nothing. The
//! table functions that run rounds (models and statistics, see
//! [`crate::table_function`]) only say how to compute the batch and, for
//! `EXPLAIN FEDERATED`, which [`Program`] of rounds they run.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::future::BoxFuture;

use crate::coordinator::context::FedContext;

/// Computes the table's batch in a session (a model's fit, a test's rounds).
pub(crate) type Fit =
    Arc<dyn Fn(SessionState) -> BoxFuture<'static, crate::Result<RecordBatch>> + Send + Sync>;

/// How `EXPLAIN FEDERATED` describes a fit: its rounds, what each site
/// computes in them and the size of what it sends back.
pub(crate) type Program =
    Arc<dyn Fn(FedContext) -> BoxFuture<'static, crate::Result<String>> + Send + Sync>;

/// A table computed by rounds (see the module docs).
pub(crate) struct FitTable {
    label: String,
    schema: SchemaRef,
    fit: Fit,
    program: Option<Program>,
}

impl FitTable {
    /// A table of `schema` whose rows `fit` computes; `label` names it in plans.
    pub(crate) fn new(label: String, schema: SchemaRef, fit: Fit) -> Self {
        Self {
            label,
            schema,
            fit,
            program: None,
        }
    }

    /// The same fit table, with the program `EXPLAIN FEDERATED` shows.
    pub(crate) fn explained(
        table: Arc<dyn TableProvider>,
        program: Program,
    ) -> Arc<dyn TableProvider> {
        match table.downcast_ref::<FitTable>() {
            Some(fit) => Arc::new(FitTable {
                label: fit.label.clone(),
                schema: Arc::clone(&fit.schema),
                fit: Arc::clone(&fit.fit),
                program: Some(program),
            }),
            None => table,
        }
    }

    /// `EXPLAIN FEDERATED` of the fits a plan reads (`None` if it reads
    /// none): for each, its program, or for a function that describes none,
    /// where to see its rounds.
    pub(crate) async fn explain_fits(
        ctx: &FedContext,
        plan: &LogicalPlan,
    ) -> crate::Result<Option<String>> {
        let mut fits = Vec::new();
        plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node
                && let Ok(provider) = source_as_provider(&scan.source)
                && let Some(fit) = provider.downcast_ref::<FitTable>()
            {
                fits.push((fit.label.clone(), fit.program.clone()));
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if fits.is_empty() {
            return Ok(None);
        }
        let mut out = String::new();
        for (label, program) in fits {
            match program {
                Some(program) => out.push_str(&program(ctx.clone()).await?),
                None => out.push_str(&format!(
                    "== {label}: its rounds depend on what earlier rounds return ==
                     EXPLAIN ANALYZE FEDERATED runs it and lists every round it ran: what each client computed, its state rows and bytes, and the time
"
                )),
            }
        }
        Ok(Some(out))
    }
}

impl fmt::Debug for FitTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FitTable({})", self.label)
    }
}

#[async_trait]
impl TableProvider for FitTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The fit's queries run in the same session: catalog, functions, settings.
        let state = state
            .as_any()
            .downcast_ref::<SessionState>()
            .cloned()
            .ok_or_else(|| {
                DataFusionError::Plan(format!("{} needs a fedsql session", self.label))
            })?;
        let fit = Arc::clone(&self.fit);
        let compute: Compute = Arc::new(move || fit(state.clone()));
        Ok(Arc::new(DeferredExec::new(
            self.label.clone(),
            self.schema(),
            projection.cloned(),
            compute,
        )?))
    }
}

/// Produces the batch, when executed.
pub(crate) type Compute =
    Arc<dyn Fn() -> BoxFuture<'static, crate::Result<RecordBatch>> + Send + Sync>;

/// Runs `compute` at execution time and yields its batch (projected).
pub(crate) struct DeferredExec {
    label: String,
    compute: Compute,
    projection: Option<Vec<usize>>,
    props: Arc<PlanProperties>,
}

impl DeferredExec {
    /// A plan whose output (of `schema`, before `projection`) `compute` makes.
    pub(crate) fn new(
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
