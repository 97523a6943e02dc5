//! The encoder: the part of a query each client runs over its own rows, and
//! the only thing a client may hand back, its [`StateBatch`].
//!
//! An [`Encoder`] is a logical plan whose root is a cut aggregate (see
//! [`crate::exposure`]) and whose input reads exactly one federated table
//! through client-local operators. It can only be built by validating such a
//! plan, and a [`StateBatch`] can only be built by an encoder from batches
//! whose schema is the encoder's partial-aggregate state schema. A
//! [`crate::client::ClientRunner`] takes an `&Encoder` and returns a
//! `StateBatch`, so "only states leave a client" holds by construction, and
//! the same interface can be served over the network.
//!
//! Physically a client runs the aggregate in DataFusion's `Partial` mode and
//! reduces its partitions with `PartialReduce` to one state row per group;
//! the coordinator merges every client's states with a `Final` aggregate.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;

use crate::error::{FedError, Result};
use crate::exposure::{self, Locality};
use crate::federated_table::FederatedTable;

/// A validated encoder: a cut aggregate over client-local operators on one
/// federated table, and the state schema its clients must return.
#[derive(Debug, Clone)]
pub struct Encoder {
    plan: LogicalPlan,
    table: Arc<dyn TableProvider>,
    state_schema: SchemaRef,
    /// The fit this encoder belongs to, if any: clients may cache its input.
    fit_scope: Option<u64>,
}

impl Encoder {
    /// Validates `plan` as an encoder: an aggregate whose input is the rows
    /// of one federated table, reached only through client-local operators,
    /// computing only bounded aggregates.
    pub(crate) fn try_new(plan: LogicalPlan, state_schema: SchemaRef) -> Result<Self> {
        let LogicalPlan::Aggregate(agg) = &plan else {
            return Err(FedError::Plan(format!(
                "internal: an encoder must end in an aggregate, got {}",
                plan.display()
            )));
        };
        let Locality::Federated(table) = exposure::locality(&agg.input)? else {
            return Err(FedError::Plan(
                "internal: an encoder must read a federated table".into(),
            ));
        };
        // The aggregate itself must be bounded too.
        exposure::locality(&plan)?;
        Ok(Self {
            plan,
            table,
            state_schema,
            fit_scope: None,
        })
    }

    /// The same encoder, run as part of a fit (see [`crate::fit_cache`]).
    pub(crate) fn in_fit(mut self, scope: Option<u64>) -> Self {
        self.fit_scope = scope;
        self
    }

    /// The fit this encoder belongs to, if any.
    pub fn fit_scope(&self) -> Option<u64> {
        self.fit_scope
    }

    /// What identifies the encoder's input (the rows it aggregates) within
    /// one fit: the text of the plan below the aggregate.
    pub fn input_key(&self) -> String {
        match &self.plan {
            LogicalPlan::Aggregate(agg) => agg.input.display_indent().to_string(),
            other => other.display_indent().to_string(),
        }
    }

    /// The encoder's logical plan (an aggregate at the root).
    pub fn plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// The federated table whose clients run this encoder.
    pub fn table(&self) -> &FederatedTable {
        FederatedTable::from_provider(self.table.as_ref()).expect("validated: a federated table")
    }

    /// The schema of the state rows every client returns.
    pub fn state_schema(&self) -> &SchemaRef {
        &self.state_schema
    }

    /// The encoder with every scan of the federated table bound to one
    /// client's own data.
    pub fn bind(&self, client_rows: Arc<dyn TableProvider>) -> Result<LogicalPlan> {
        let source = provider_as_source(client_rows);
        let bound = self
            .plan
            .clone()
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::TableScan(mut scan) if exposure::federated_scan(&scan).is_some() => {
                    scan.source = Arc::clone(&source);
                    Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
                }
                other => Ok(Transformed::no(other)),
            })?;
        Ok(bound.data)
    }

    /// Accepts a client's output as its state batch, checking it has the
    /// encoder's state schema.
    pub fn accept(&self, batches: &[RecordBatch]) -> Result<StateBatch> {
        let columns_match = |b: &RecordBatch| {
            let theirs = b.schema();
            theirs.fields().len() == self.state_schema.fields().len()
                && theirs
                    .fields()
                    .iter()
                    .zip(self.state_schema.fields())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
        };
        if let Some(bad) = batches.iter().find(|b| !columns_match(b)) {
            return Err(FedError::Plan(format!(
                "a client returned state columns {} where the encoder's state is {}",
                bad.schema(),
                self.state_schema
            )));
        }
        let batch = datafusion::arrow::compute::concat_batches(&self.state_schema, batches)
            .map_err(|e| {
                FedError::Plan(format!(
                    "a client's state batch does not fit the state schema: {e}"
                ))
            })?;
        Ok(StateBatch { batch })
    }
}

/// One client's aggregate state: one row per group, in the encoder's state
/// schema. Only an [`Encoder`] can make one.
#[derive(Debug, Clone)]
pub struct StateBatch {
    batch: RecordBatch,
}

impl StateBatch {
    /// The state rows.
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// Size of the state in bytes (Arrow buffers), as sent.
    pub fn size_bytes(&self) -> usize {
        self.batch.get_array_memory_size()
    }
}

/// The partial aggregate of a physical aggregate plan: the part whose output
/// is the state. Handles every mode the planner may produce.
pub fn partial_aggregate(plan: &Arc<dyn ExecutionPlan>) -> Result<AggregateExec> {
    let top = find_aggregate(plan, |_| true).ok_or_else(|| {
        FedError::Plan("internal: no aggregate in the encoder's physical plan".into())
    })?;
    let source = match top.mode() {
        AggregateMode::Partial => top,
        AggregateMode::Final | AggregateMode::FinalPartitioned => {
            find_aggregate(top.input(), |a| *a.mode() == AggregateMode::Partial).ok_or_else(
                || FedError::Plan("internal: final aggregate without a partial one".into()),
            )?
        }
        // A single-stage aggregate: run its partial half.
        _ => top,
    };
    Ok(AggregateExec::try_new(
        AggregateMode::Partial,
        source.group_expr().clone(),
        source.aggr_expr().to_vec(),
        source.filter_expr().to_vec(),
        Arc::clone(source.input()),
        source.input_schema(),
    )?)
}

fn find_aggregate(
    plan: &Arc<dyn ExecutionPlan>,
    pred: impl Fn(&AggregateExec) -> bool,
) -> Option<AggregateExec> {
    let mut found = None;
    let _ = plan.apply(|node| {
        if let Some(agg) = node.downcast_ref::<AggregateExec>()
            && pred(agg)
        {
            found = Some(agg.clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The client side: the partial aggregate, its partitions reduced to one
/// state row per group (`PartialReduce`: states in, states out).
pub fn one_state_per_group(partial: AggregateExec) -> Result<Arc<dyn ExecutionPlan>> {
    let group_by = partial.group_expr().as_final();
    let aggr = partial.aggr_expr().to_vec();
    let filters = partial.filter_expr().to_vec();
    let input_schema = partial.input_schema();
    let partial: Arc<dyn ExecutionPlan> = Arc::new(partial);
    let merged: Arc<dyn ExecutionPlan> =
        if partial.properties().output_partitioning().partition_count() > 1 {
            Arc::new(CoalescePartitionsExec::new(partial))
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

/// The coordinator side: merge every client's states and decode them with
/// the final aggregate. The merge is a commutative monoid, so the order in
/// which states arrive does not matter.
pub fn merge_and_decode(
    partial: &AggregateExec,
    states: &[StateBatch],
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = partial.schema();
    let batches = states
        .iter()
        .map(|s| RecordBatch::try_new(Arc::clone(&schema), s.batch().columns().to_vec()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            FedError::Plan(format!(
                "internal: client state does not fit the state schema: {e}"
            ))
        })?;
    let states = MemorySourceConfig::try_new_exec(&[batches], Arc::clone(&schema), None)?;
    Ok(Arc::new(AggregateExec::try_new(
        AggregateMode::Final,
        partial.group_expr().as_final(),
        partial.aggr_expr().to_vec(),
        partial.filter_expr().to_vec(),
        states,
        partial.input_schema(),
    )?))
}
