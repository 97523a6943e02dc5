//! Plans on the wire: an encoder's logical plan as datafusion-proto bytes.
//!
//! The [`LogicalExtensionCodec`]s here decide what a table scan becomes:
//!
//! * a scan of the **federated table** travels as just a table name (the
//!   worker-side name the coordinator was given, see `coordinator::worker_url`); the
//!   worker binds it to the table it serves under that name, with the
//!   column list the plan carries;
//! * a **shared table** (one that joins the federated rows inside the
//!   encoder) travels with its rows, as Arrow IPC ([`InlineTable`]): a
//!   worker never reads a table it does not serve.
//!
//! Any other table provider cannot be encoded by the coordinator, and a
//! worker refuses a plan whose scans are not one of these two kinds (see
//! `site::worker`), whatever the bytes say.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::new_empty_array;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{
    Column, DFSchemaRef, DataFusionError, Result as DFResult, ScalarValue, TableReference,
};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, LogicalPlanBuilder, TableType};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionContext;
use datafusion_proto::bytes::{
    logical_plan_from_bytes_with_extension_codec, logical_plan_to_bytes_with_extension_codec,
};
use datafusion_proto::logical_plan::LogicalExtensionCodec;

use crate::error::{FedError, Result};
use crate::protocol::federated_scan::FederatedScan;
use crate::protocol::flight;

/// First byte of an encoded table provider: the federated table, by name.
const FEDERATED_TAG: u8 = b'F';
/// First byte of an encoded table provider: a shared table, rows inline.
const INLINE_TAG: u8 = b'I';

/// A shared table's rows, shipped with the plan that joins them.
#[derive(Debug)]
pub struct InlineTable {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl InlineTable {
    /// A table over these rows.
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self { schema, batches }
    }

    /// Its rows.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// How many rows it holds.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    fn to_ipc(&self) -> DFResult<Vec<u8>> {
        Ok(flight::batches_to_ipc(&self.schema, &self.batches)?)
    }

    fn from_ipc(bytes: &[u8]) -> DFResult<Self> {
        let (schema, batches) = flight::batches_from_ipc(bytes)?;
        Ok(Self { schema, batches })
    }
}

#[async_trait]
impl TableProvider for InlineTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(MemorySourceConfig::try_new_exec(
            std::slice::from_ref(&self.batches),
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}

/// The coordinator's codec: the federated table becomes `remote_table`,
/// inline tables their IPC bytes.
#[derive(Debug)]
pub struct CoordinatorCodec {
    remote_table: String,
}

impl CoordinatorCodec {
    /// A codec naming the federated table `remote_table` on the wire.
    pub fn new(remote_table: impl Into<String>) -> Self {
        Self {
            remote_table: remote_table.into(),
        }
    }
}

impl LogicalExtensionCodec for CoordinatorCodec {
    fn try_decode(&self, _: &[u8], _: &[LogicalPlan], _: &TaskContext) -> DFResult<Extension> {
        Err(DataFusionError::NotImplemented(
            "fedsql plans carry no extension nodes".into(),
        ))
    }

    fn try_encode(&self, node: &Extension, _: &mut Vec<u8>) -> DFResult<()> {
        Err(DataFusionError::NotImplemented(format!(
            "plan node `{}` cannot be sent to a worker",
            node.node.name()
        )))
    }

    fn try_decode_table_provider(
        &self,
        _: &[u8],
        _: &TableReference,
        _: SchemaRef,
        _: &TaskContext,
    ) -> DFResult<Arc<dyn TableProvider>> {
        Err(DataFusionError::NotImplemented(
            "the coordinator does not decode plans".into(),
        ))
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> DFResult<()> {
        if FederatedScan::of(node.as_ref()).is_some() {
            buf.push(FEDERATED_TAG);
            buf.extend_from_slice(self.remote_table.as_bytes());
            Ok(())
        } else if let Some(inline) = node.downcast_ref::<InlineTable>() {
            buf.push(INLINE_TAG);
            buf.extend_from_slice(&inline.to_ipc()?);
            Ok(())
        } else {
            Err(DataFusionError::Plan(format!(
                "table `{table_ref}` cannot be sent to a worker (only the federated table and inlined shared rows can)"
            )))
        }
    }
}

/// How a worker turns a federated table name (and the column list the plan
/// carries) into the table it serves.
pub trait TableBinder: fmt::Debug + Send + Sync + 'static {
    /// The served table `name`, read with `schema`; an error if none is.
    fn bind(&self, name: &str, schema: SchemaRef) -> DFResult<Arc<dyn TableProvider>>;
}

/// The worker's codec: names become served tables, IPC bytes inline tables.
#[derive(Debug)]
pub struct WorkerCodec {
    binder: Arc<dyn TableBinder>,
}

impl WorkerCodec {
    /// A codec binding federated scans through `binder`.
    pub fn new(binder: Arc<dyn TableBinder>) -> Self {
        Self { binder }
    }
}

impl LogicalExtensionCodec for WorkerCodec {
    fn try_decode(&self, _: &[u8], _: &[LogicalPlan], _: &TaskContext) -> DFResult<Extension> {
        Err(DataFusionError::Plan(
            "extension plan nodes are not accepted by a fedsql worker".into(),
        ))
    }

    fn try_encode(&self, _: &Extension, _: &mut Vec<u8>) -> DFResult<()> {
        Err(DataFusionError::NotImplemented(
            "a worker does not encode plans".into(),
        ))
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        _table_ref: &TableReference,
        schema: SchemaRef,
        _ctx: &TaskContext,
    ) -> DFResult<Arc<dyn TableProvider>> {
        match buf.split_first() {
            Some((&FEDERATED_TAG, name)) => {
                let name = std::str::from_utf8(name)
                    .map_err(|_| DataFusionError::Plan("a table name that is not UTF-8".into()))?;
                self.binder.bind(name, schema)
            }
            Some((&INLINE_TAG, ipc)) => {
                let inline = InlineTable::from_ipc(ipc)?;
                if inline.schema.fields() != schema.fields() {
                    return Err(DataFusionError::Plan(
                        "inline shared rows do not match the scan's schema".into(),
                    ));
                }
                Ok(Arc::new(inline))
            }
            _ => Err(DataFusionError::Plan(
                "a table the worker does not know how to read".into(),
            )),
        }
    }

    fn try_encode_table_provider(
        &self,
        _: &TableReference,
        _: Arc<dyn TableProvider>,
        _: &mut Vec<u8>,
    ) -> DFResult<()> {
        Err(DataFusionError::NotImplemented(
            "a worker does not encode plans".into(),
        ))
    }
}

/// An encoder's plan as bytes for a worker that serves the federated table
/// as `remote_table`: shared tables are read here and inlined.
pub async fn plan_to_bytes(plan: &LogicalPlan, remote_table: &str) -> Result<Vec<u8>> {
    let plan = inline_shared_tables(plan.clone()).await?;
    let bytes =
        logical_plan_to_bytes_with_extension_codec(&plan, &CoordinatorCodec::new(remote_table))
            .map_err(|e| FedError::Internal(format!("cannot send the encoder to a worker: {e}")))?;
    Ok(bytes.to_vec())
}

/// Decodes a plan a coordinator sent, binding table names through `binder`.
pub fn plan_from_bytes(
    bytes: &[u8],
    ctx: &TaskContext,
    binder: Arc<dyn TableBinder>,
) -> DFResult<LogicalPlan> {
    logical_plan_from_bytes_with_extension_codec(bytes, ctx, &WorkerCodec::new(binder))
}

/// Replaces every scan of a shared table by its rows, read on the
/// coordinator: workers read nothing but the tables they serve. Literal
/// `VALUES` and empty relations (an earlier round's result, substituted
/// into the plan) become inline rows too, as datafusion-proto would not
/// keep their column names.
async fn inline_shared_tables(plan: LogicalPlan) -> Result<LogicalPlan> {
    let plan = inline_values(plan)?;
    let mut shared: Vec<(TableReference, Arc<dyn TableProvider>)> = Vec::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
            && FederatedScan::of(provider.as_ref()).is_none()
            && provider.downcast_ref::<InlineTable>().is_none()
        {
            shared.push((scan.table_name.clone(), provider));
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if shared.is_empty() {
        return Ok(plan);
    }
    let reader = SessionContext::new();
    let state = reader.state();
    let mut inlined: HashMap<usize, Arc<dyn TableProvider>> = HashMap::new();
    for (name, provider) in shared {
        let key = Arc::as_ptr(&provider) as *const () as usize;
        if inlined.contains_key(&key) {
            continue;
        }
        let scan = provider.scan(&state, None, &[], None).await?;
        let batches = collect(scan, reader.task_ctx()).await.map_err(|e| {
            FedError::InvalidArgument(format!(
                "cannot read shared table `{name}` to send it to the workers: {e}"
            ))
        })?;
        let table: Arc<dyn TableProvider> = Arc::new(InlineTable::new(provider.schema(), batches));
        inlined.insert(key, table);
    }
    Ok(plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::TableScan(mut scan) => {
                let key = source_as_provider(&scan.source)
                    .ok()
                    .map(|p| Arc::as_ptr(&p) as *const () as usize);
                match key.and_then(|k| inlined.get(&k)) {
                    Some(table) => {
                        scan.source = provider_as_source(Arc::clone(table));
                        Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
                    }
                    None => Ok(Transformed::no(LogicalPlan::TableScan(scan))),
                }
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// `VALUES` of literals and empty relations with columns, as a scan of
/// inline rows under a projection that gives back the exact column names
/// (and qualifiers) the rest of the plan refers to.
fn inline_values(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            let schema = match &node {
                LogicalPlan::Values(v) => Arc::clone(&v.schema),
                LogicalPlan::EmptyRelation(e)
                    if !e.produce_one_row && !e.schema.fields().is_empty() =>
                {
                    Arc::clone(&e.schema)
                }
                _ => return Ok(Transformed::no(node)),
            };
            match rows_of(&node, &schema)? {
                Some(replacement) => Ok(Transformed::yes(replacement)),
                None => Ok(Transformed::no(node)),
            }
        })?
        .data)
}

/// The inline scan + projection for a `Values` / `EmptyRelation` node, or
/// `None` when its values are not all literals.
fn rows_of(node: &LogicalPlan, schema: &DFSchemaRef) -> DFResult<Option<LogicalPlan>> {
    let rows: &[Vec<Expr>] = match node {
        LogicalPlan::Values(v) => &v.values,
        _ => &[],
    };
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Field::new(format!("__fedsql_c{i}"), f.data_type().clone(), true))
        .collect();
    let mut columns = Vec::with_capacity(fields.len());
    for (i, field) in fields.iter().enumerate() {
        let mut literals = Vec::with_capacity(rows.len());
        for row in rows {
            match row.get(i) {
                Some(Expr::Literal(value, _)) => literals.push(value.clone()),
                _ => return Ok(None),
            }
        }
        let array = if literals.is_empty() {
            new_empty_array(field.data_type())
        } else {
            ScalarValue::iter_to_array(literals)?
        };
        columns.push(cast(&array, field.data_type())?);
    }
    let inline_schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(Arc::clone(&inline_schema), columns)?;
    let table: Arc<dyn TableProvider> = Arc::new(InlineTable::new(inline_schema, vec![batch]));
    let scan = LogicalPlanBuilder::scan("__fedsql_values", provider_as_source(table), None)?;
    let names = schema
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            Expr::Column(Column::from_name(format!("__fedsql_c{i}")))
                .alias_qualified(qualifier.cloned(), field.name())
        })
        .collect::<Vec<_>>();
    Ok(Some(scan.project(names)?.build()?))
}
