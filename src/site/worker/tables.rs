//! The tables a worker serves, and how a received plan is bound to them.
//!
//! A plan arrives as bytes whose federated scans name a served table (see
//! [`crate::wire::codec`]); the [`Binder`] turns each name into a
//! [`FederatedScan`] after checking that the table is served and the plan
//! reads it with its own columns. [`check_scans`] then refuses any scan of
//! something other than a served table or rows shipped with the plan.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::LogicalPlan;

use crate::error::{FedError, Result};
use crate::site::files::{ClientFiles, FileFormat, observe_schemas, unify_schemas};
use crate::site::local::LocalClient;
use crate::site::policy::{DisclosurePolicy, describe_policy};
use crate::site::runner::ClientRunner;
use crate::wire::codec::{InlineTable, TableBinder};
use crate::wire::federated_scan::FederatedScan;
use crate::wire::protocol::{HAS_ROWS_KEY, POLICY_KEY, POSITIONAL_KEY};

/// One served table: its files, its own schema, and a local client per
/// column list coordinators read it with.
#[derive(Debug)]
pub struct ServedTable {
    pub(super) name: String,
    files: ClientFiles,
    schema: SchemaRef,
    has_rows: bool,
    /// Clients by the schema they read with (the coordinator's unified schema).
    clients: Mutex<Vec<(SchemaRef, Arc<LocalClient>)>>,
    /// The data owner's disclosure policy for this table.
    policy: Option<DisclosurePolicy>,
    /// DP settings and the worker's budget ledger.
    pub(super) dp: Arc<crate::site::dp::DpSite>,
}

/// How many column lists a served table keeps a client (and its fit cache) for.
const CLIENTS_PER_TABLE: usize = 8;

impl ServedTable {
    /// Opens a table: finds its files and reads their schemas.
    pub fn open(name: &str, path: &Path, policy: Option<DisclosurePolicy>) -> Result<Self> {
        let files = ClientFiles::from_path(name, path, None)?;
        let observed = observe_schemas(&files)?;
        let schema = unify_schemas(name, &observed)?;
        Ok(Self {
            name: name.to_string(),
            has_rows: observed.iter().any(|o| o.has_rows),
            files,
            schema: Arc::new(schema),
            clients: Mutex::default(),
            policy,
            dp: Arc::default(),
        })
    }

    /// The same table with these DP settings and ledger.
    pub fn with_dp(mut self, dp: Arc<crate::site::dp::DpSite>) -> Self {
        self.dp = dp;
        self
    }

    fn positional(&self) -> bool {
        self.files.format == FileFormat::Csv
    }

    /// The schema a coordinator sees: with whether there are rows, and
    /// whether columns are read by position.
    pub(super) fn advertised_schema(&self) -> Schema {
        let metadata = [
            (HAS_ROWS_KEY.to_string(), self.has_rows.to_string()),
            (POSITIONAL_KEY.to_string(), self.positional().to_string()),
            (
                POLICY_KEY.to_string(),
                describe_policy(self.policy.as_ref()),
            ),
        ];
        Schema::new(self.schema.fields().clone()).with_metadata(metadata.into_iter().collect())
    }

    /// The local client reading this table with `schema`, which must have
    /// this table's columns (in the same order, for CSV).
    pub(super) fn client_for(&self, schema: &SchemaRef) -> Result<Arc<LocalClient>> {
        let want: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
        let have: Vec<&String> = self.schema.fields().iter().map(|f| f.name()).collect();
        let same = if self.positional() {
            want == have
        } else {
            want.len() == have.len() && want.iter().all(|n| have.contains(n))
        };
        if !same {
            return Err(FedError::refused(
                format!(
                    "the plan reads table `{}` with columns ({}) but it has ({})",
                    self.name,
                    want.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    have.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        }
        let mut clients = self.clients.lock().expect("not poisoned");
        if let Some((_, client)) = clients.iter().find(|(s, _)| s == schema) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(
            LocalClient::from_files(&self.files, Arc::clone(schema))?
                .with_policy(self.policy.clone())
                .with_dp(Arc::clone(&self.dp)),
        );
        if clients.len() >= CLIENTS_PER_TABLE {
            clients.remove(0);
        }
        clients.push((Arc::clone(schema), Arc::clone(&client)));
        Ok(client)
    }
}

/// Binds federated table names in received plans to the served tables.
#[derive(Debug)]
pub(super) struct Binder {
    pub(super) tables: Arc<BTreeMap<String, Arc<ServedTable>>>,
}

impl TableBinder for Binder {
    fn bind(
        &self,
        name: &str,
        schema: SchemaRef,
    ) -> datafusion::common::Result<Arc<dyn TableProvider>> {
        let refused = |e: FedError| DataFusionError::External(Box::new(e));
        let table = self.tables.get(name).ok_or_else(|| {
            refused(FedError::refused(
                format!(
                    "this worker serves no table `{name}` (it serves {})",
                    self.tables
                        .keys()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ))
        })?;
        table.client_for(&schema).map_err(refused)?;
        Ok(Arc::new(FederatedScan::new(name, schema)))
    }
}

impl ServedTable {
    /// Drops what every local client of this table kept for fit `scope`.
    pub(super) fn release_fit(&self, scope: u64) {
        for (_, client) in self.clients.lock().expect("not poisoned").iter() {
            client.release_fit(scope);
        }
    }
}

/// Refuses scans of anything but served tables and inline shared rows: a
/// hand-crafted plan may not read a file path, a view, or any other table.
pub(super) fn check_scans(plan: &LogicalPlan) -> Result<()> {
    let mut refusal = None;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let allowed = source_as_provider(&scan.source).is_ok_and(|p| {
                FederatedScan::of(p.as_ref()).is_some() || p.downcast_ref::<InlineTable>().is_some()
            });
            if !allowed {
                refusal = Some(FedError::refused(
                    format!(
                        "the plan scans `{}`, which is not a table this worker serves",
                        scan.table_name
                    ),
                    None,
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    refusal.map_or(Ok(()), Err)
}
