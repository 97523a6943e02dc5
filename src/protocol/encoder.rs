//! The encoder: the part of a query each client runs over its own rows, and
//! the only thing a client may hand back, its [`StateBatch`].
//!
//! An [`Encoder`] is a logical plan whose root is a cut aggregate (see
//! [`crate::protocol::exposure`]) and whose input reads exactly one federated table
//! through client-local operators. It can only be built by validating such a
//! plan, and a [`StateBatch`] can only be built by an encoder from batches
//! whose schema is the encoder's partial-aggregate state schema. A
//! `protocol::site::Site` takes an `&Encoder` and returns a
//! `StateBatch`, so "only states leave a client" holds by construction, and
//! the same interface can be served over the network.
//!
//! Physically a client runs the aggregate in DataFusion's `Partial` mode and
//! reduces its partitions with `PartialReduce` to one state row per group;
//! the coordinator merges every client's states with a `Final` aggregate.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};

use crate::error::{FedError, Result};
use crate::protocol::compact;
use crate::protocol::exposure::{self, Locality};
use crate::protocol::federated_scan::FederatedScan;
use crate::protocol::secure;

/// A validated encoder: a cut aggregate over client-local operators on one
/// federated table, and the state schema its clients must return.
#[derive(Debug, Clone)]
pub struct Encoder {
    /// Shared by the encoder's copies (one per client of a round).
    plan: Arc<LogicalPlan>,
    /// The hash of `plan`, computed once for all copies (sites key their
    /// plan templates by it).
    fingerprint: Arc<OnceLock<u64>>,
    /// The federated table the plan reads, as the plan names it.
    table: FederatedScan,
    state_schema: SchemaRef,
    /// The IPC bytes of the state schema (see [`StateBatch::size_bytes`]),
    /// measured once for the encoder and its copies.
    schema_bytes: Arc<OnceLock<usize>>,
    /// The fit this encoder belongs to, if any: clients may cache its input.
    fit_scope: Option<u64>,
}

impl Encoder {
    /// Validates `plan` as an encoder: an aggregate whose input is the rows
    /// of one federated table, reached only through client-local operators,
    /// computing only bounded aggregates.
    pub fn try_new(plan: LogicalPlan, state_schema: SchemaRef) -> Result<Self> {
        let agg = check_shape(&plan)?;
        let Locality::Federated(table) = exposure::locality(&agg.input)? else {
            return Err(FedError::Internal(
                "an encoder must read a federated table".into(),
            ));
        };
        // The aggregate itself must be bounded too.
        exposure::locality(&plan)?;
        let table = FederatedScan::of(table.as_ref())
            .ok_or_else(|| FedError::Internal("a federated scan of another kind".into()))?
            .detached();
        Ok(Self {
            plan: Arc::new(detach(plan)?),
            fingerprint: Arc::default(),
            table,
            state_schema,
            schema_bytes: Arc::default(),
            fit_scope: None,
        })
    }

    /// Plans the split of a cut (an aggregate over federated rows): the
    /// encoder each site runs and the partial aggregate whose final half
    /// merges and decodes the states. Bad `secure_sum` bounds fail here,
    /// before any site runs.
    pub async fn split(state: &SessionState, cut: &LogicalPlan) -> Result<(Self, AggregateExec)> {
        check_shape(cut)?;
        let physical = state
            .query_planner()
            .create_physical_plan(cut, state)
            .await?;
        let partial = partial_aggregate(&physical)?;
        secure::check_round(&partial)?;
        crate::protocol::dp::check_round(&partial)?;
        let encoder = Self::try_new(cut.clone(), partial.schema())?;
        Ok((encoder, partial))
    }

    /// The same encoder, run as part of a fit: sites may keep its input
    /// between the fit's rounds (see `site::engine::kept_rows`).
    pub fn in_fit(mut self, scope: Option<u64>) -> Self {
        self.fit_scope = scope;
        self
    }

    /// The same encoder with its plan rewritten by `rewrite` (and
    /// validated again), e.g. to bind what differs between clients.
    pub fn rewritten(
        &self,
        rewrite: impl FnOnce(LogicalPlan) -> Result<LogicalPlan>,
    ) -> Result<Self> {
        let plan = rewrite(self.plan.as_ref().clone())?;
        Ok(Self::try_new(plan, Arc::clone(&self.state_schema))?.in_fit(self.fit_scope))
    }

    /// The fit this encoder belongs to, if any.
    pub fn fit_scope(&self) -> Option<u64> {
        self.fit_scope
    }

    /// The encoder's logical plan (an aggregate at the root).
    pub fn plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// The plan, shared with the encoder's other copies.
    pub fn shared_plan(&self) -> &Arc<LogicalPlan> {
        &self.plan
    }

    /// A hash of the plan, computed once for the encoder and its copies.
    pub fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| {
            use std::hash::{BuildHasher, RandomState};
            // One process's hashes are only compared within the process.
            static STATE: OnceLock<RandomState> = OnceLock::new();
            STATE
                .get_or_init(RandomState::new)
                .hash_one(self.plan.as_ref())
        })
    }

    /// The name of the federated table whose sites run this encoder.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// The schema the encoder reads the federated table with.
    pub fn table_schema(&self) -> SchemaRef {
        self.table.schema()
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
            .as_ref()
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
            return Err(FedError::Internal(format!(
                "a client returned state columns {} where the encoder's state is {}",
                bad.schema(),
                self.state_schema
            )));
        }
        // Only the bytes of its rows: a view or dictionary column taken
        // from a larger one keeps that one's buffers (the seventeenth
        // outside attack read a threshold- or DP-dropped group's key, and
        // which declared keys a site holds, from them).
        let compacted;
        let batches = if batches.iter().any(|b| {
            b.columns()
                .iter()
                .any(|c| compact::holds_shared(c.data_type()))
        }) {
            compacted = batches
                .iter()
                .map(compact::rows_only)
                .collect::<Result<Vec<_>>>()?;
            &compacted[..]
        } else {
            batches
        };
        // A site's state is one batch (its one partition's, or its
        // partitions' reduced): taken as it is, not copied.
        let one = match batches {
            [batch] => RecordBatch::try_new_with_options(
                Arc::clone(&self.state_schema),
                batch.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )
            .ok(),
            _ => None,
        };
        if let Some(batch) = one {
            return Ok(StateBatch {
                batch,
                schema_bytes: Arc::clone(&self.schema_bytes),
                size: OnceLock::new(),
            });
        }
        let batch = datafusion::arrow::compute::concat_batches(&self.state_schema, batches)
            .map_err(|e| {
                FedError::Internal(format!(
                    "a client's state batch does not fit the state schema: {e}"
                ))
            })?;
        Ok(StateBatch {
            batch,
            schema_bytes: Arc::clone(&self.schema_bytes),
            size: OnceLock::new(),
        })
    }
}

/// One client's aggregate state: one row per group, in the encoder's state
/// schema. Only an [`Encoder`] can make one.
#[derive(Debug, Clone)]
pub struct StateBatch {
    batch: RecordBatch,
    /// The IPC bytes of the state schema, shared by the round's states.
    schema_bytes: Arc<OnceLock<usize>>,
    /// Its size, once measured (an IPC encoding: worth doing once).
    size: OnceLock<usize>,
}

impl StateBatch {
    /// The state rows.
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// Size of the state in bytes: its Arrow IPC stream (column names and
    /// types, then the one batch), the same count on both sides of the
    /// wire — what a worker's log says it released and what `EXPLAIN
    /// ANALYZE FEDERATED` shows as `state_bytes` (Flight adds its framing).
    /// The schema's part is measured once per encoder, not once per client.
    pub fn size_bytes(&self) -> usize {
        *self.size.get_or_init(|| {
            let schema = *self.schema_bytes.get_or_init(|| self.stream_bytes(false));
            match batch_message_bytes(&self.batch) {
                Some(batch) => schema + batch,
                None => self.stream_bytes(true),
            }
        })
    }

    /// The IPC stream of the state with bare column names and types (no
    /// field metadata): with its batch, or the schema and end marker only.
    fn stream_bytes(&self, with_batch: bool) -> usize {
        let bare: Vec<Field> = self
            .batch
            .schema()
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), f.is_nullable()))
            .collect();
        let schema = Schema::new(bare);
        let batches = match with_batch {
            true => RecordBatch::try_new(Arc::new(schema.clone()), self.batch.columns().to_vec())
                .ok()
                .into_iter()
                .collect(),
            false => Vec::new(),
        };
        crate::protocol::flight::batches_to_ipc(&schema, &batches)
            .map_or_else(|_| self.batch.get_array_memory_size(), |ipc| ipc.len())
    }
}

/// The bytes one batch adds to an IPC stream (its message and body, as a
/// stream writer frames them); `None` when it carries dictionaries, whose
/// messages depend on the stream.
fn batch_message_bytes(batch: &RecordBatch) -> Option<usize> {
    use datafusion::arrow::ipc::writer::{
        DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions, write_message,
    };
    let options = IpcWriteOptions::default();
    let (dictionaries, message) = IpcDataGenerator::default()
        .encode(
            batch,
            &mut DictionaryTracker::new(false),
            &options,
            &mut IpcWriteContext::default(),
        )
        .ok()?;
    if !dictionaries.is_empty() {
        return None;
    }
    let (header, body) = write_message(std::io::sink(), message, &options).ok()?;
    Some(header + body)
}

/// The partial aggregate of a physical aggregate plan: the part whose output
/// is the state. Handles every mode the planner may produce.
pub fn partial_aggregate(plan: &Arc<dyn ExecutionPlan>) -> Result<AggregateExec> {
    let top = find_aggregate(plan, |_| true)
        .ok_or_else(|| FedError::Internal("no aggregate in the encoder's physical plan".into()))?;
    let source = match top.mode() {
        AggregateMode::Partial => top,
        AggregateMode::Final | AggregateMode::FinalPartitioned => {
            find_aggregate(top.input(), |a| *a.mode() == AggregateMode::Partial)
                .ok_or_else(|| FedError::Internal("final aggregate without a partial one".into()))?
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

/// An encoder's plan ends in an aggregate and only reads: checked before
/// anything is planned from it.
fn check_shape(plan: &LogicalPlan) -> Result<&datafusion::logical_expr::Aggregate> {
    let LogicalPlan::Aggregate(agg) = plan else {
        return Err(FedError::refused(
            format!(
                "the plan's root is `{}`, not an aggregate: a site returns aggregate states only, never rows",
                plan.display()
            ),
            None,
        ));
    };
    exposure::check_encoder_nodes(plan)?;
    Ok(agg)
}

/// The plan with every federated scan detached from the coordinator's
/// catalog: what is left names the table and its schema only.
fn detach(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::TableScan(mut scan) => {
                let detached = source_as_provider(&scan.source)
                    .ok()
                    .and_then(|p| FederatedScan::of(p.as_ref()).map(FederatedScan::detached));
                match detached {
                    Some(table) => {
                        scan.source = provider_as_source(Arc::new(table));
                        Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
                    }
                    None => Ok(Transformed::no(LogicalPlan::TableScan(scan))),
                }
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        ArrayRef, DictionaryArray, Float64Array, Int64Array, ListArray, StringArray, StructArray,
    };
    use datafusion::arrow::datatypes::{DataType, Int32Type};

    fn state(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// What `size_bytes` must equal: the whole stream, encoded at once.
    fn whole_stream(batch: &RecordBatch) -> usize {
        StateBatch {
            batch: batch.clone(),
            schema_bytes: Arc::default(),
            size: OnceLock::new(),
        }
        .stream_bytes(true)
    }

    #[test]
    fn a_states_size_is_its_whole_ipc_stream_with_the_schema_measured_once() {
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.5), None, Some(-2.0)]));
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![7, 8, 9]));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a", "bcd", ""]));
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
            datafusion::arrow::datatypes::Float64Type,
            _,
            _,
        >(vec![
            Some(vec![Some(1.0), Some(2.0)]),
            None,
            Some(vec![]),
        ]));
        let structs: ArrayRef = Arc::new(StructArray::from(vec![(
            Arc::new(Field::new("n", DataType::Int64, false)),
            Arc::clone(&ints),
        )]));
        let shared = Arc::<OnceLock<usize>>::default();
        let batches = [
            state(vec![("f", Arc::clone(&floats)), ("i", Arc::clone(&ints))]),
            state(vec![("t", text), ("l", lists), ("s", structs)]),
            state(vec![("f", floats.slice(1, 2)), ("i", ints.slice(1, 2))]),
            state(vec![("f", floats.slice(0, 0)), ("i", ints.slice(0, 0))]),
        ];
        for batch in &batches {
            let measured = StateBatch {
                batch: batch.clone(),
                schema_bytes: Arc::default(),
                size: OnceLock::new(),
            };
            assert_eq!(measured.size_bytes(), whole_stream(batch), "{batch:?}");
        }
        // States of one encoder share the schema's measure.
        for batch in [&batches[0], &batches[2], &batches[3]] {
            let measured = StateBatch {
                batch: batch.clone(),
                schema_bytes: Arc::clone(&shared),
                size: OnceLock::new(),
            };
            assert_eq!(measured.size_bytes(), whole_stream(batch));
        }
        assert!(shared.get().is_some());
    }

    #[test]
    fn a_state_with_a_dictionary_is_measured_whole() {
        let keys: DictionaryArray<Int32Type> = vec!["x", "y", "x"].into_iter().collect();
        let batch = state(vec![("d", Arc::new(keys) as ArrayRef)]);
        assert_eq!(batch_message_bytes(&batch), None);
        let measured = StateBatch {
            batch: batch.clone(),
            schema_bytes: Arc::default(),
            size: OnceLock::new(),
        };
        assert_eq!(measured.size_bytes(), whole_stream(&batch));
    }
}
