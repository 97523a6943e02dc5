//! The federated table as both sides see it in a plan: a name and a schema.
//!
//! [`FederatedScan`] is the table provider a plan scans for "the rows of
//! this federated table". It has no rows: on the coordinator its scan is a
//! [`SiteRowsExec`] that can never execute, and a site binds it to its own
//! data before it runs an encoder. The coordinator attaches its list of
//! sites to the scan in its catalog; that attachment is removed before an
//! encoder is built, so an encoder is a plain message.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result as DFResult, internal_err, project_schema};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// What the coordinator keeps with a federated table in its catalog.
pub(crate) type Attachment = Arc<dyn Any + Send + Sync>;

/// The rows of a federated table, by name (see the module docs).
#[derive(Clone)]
pub(crate) struct FederatedScan {
    name: String,
    schema: SchemaRef,
    attachment: Option<Attachment>,
}

impl fmt::Debug for FederatedScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FederatedScan({})", self.name)
    }
}

impl FederatedScan {
    /// The federated table `name`, read with `schema`.
    pub(crate) fn new(name: impl Into<String>, schema: SchemaRef) -> Self {
        Self {
            name: name.into(),
            schema,
            attachment: None,
        }
    }

    /// The same scan carrying the coordinator's `attachment`.
    pub(crate) fn with_attachment(mut self, attachment: Attachment) -> Self {
        self.attachment = Some(attachment);
        self
    }

    /// What the coordinator attached, if anything.
    pub(crate) fn attachment(&self) -> Option<&Attachment> {
        self.attachment.as_ref()
    }

    /// The same scan without the coordinator's attachment.
    pub(crate) fn detached(&self) -> Self {
        Self::new(self.name.clone(), Arc::clone(&self.schema))
    }

    /// The federated table's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The federated scan behind a provider, if it is one.
    pub(crate) fn of(provider: &dyn TableProvider) -> Option<&FederatedScan> {
        provider.downcast_ref::<FederatedScan>()
    }
}

#[async_trait]
impl TableProvider for FederatedScan {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let schema = project_schema(&self.schema, projection)?;
        Ok(Arc::new(SiteRowsExec::new(&self.name, schema)))
    }

    /// Filters stay in the plan (so every site applies them) and are also
    /// offered to each site's scan for pruning.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
}

/// Stands for "the rows of this federated table at one client" in the
/// coordinator's plans. It never runs on the coordinator: the part of the
/// plan above it is what each client runs over its own rows.
#[derive(Debug)]
pub(crate) struct SiteRowsExec {
    table: String,
    props: Arc<PlanProperties>,
}

impl SiteRowsExec {
    fn new(table: &str, schema: SchemaRef) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            table: table.to_string(),
            props: Arc::new(props),
        }
    }
}

impl DisplayAs for SiteRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SiteRowsExec: table={} (rows stay at each client)",
            self.table
        )
    }
}

impl ExecutionPlan for SiteRowsExec {
    fn name(&self) -> &str {
        "SiteRowsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        internal_err!(
            "the coordinator holds no rows of federated table `{}`: this plan must run at the clients",
            self.table
        )
    }
}
