//! The tables a worker serves, and how a received plan is bound to them.
//!
//! A plan arrives as bytes whose federated scans name a served table (see
//! [`crate::protocol::codec`]); the [`Binder`] turns each name into a
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
use crate::protocol::codec::{InlineTable, TableBinder};
use crate::protocol::federated_scan::FederatedScan;
use crate::protocol::flight::{FEDERATION_KEY, HAS_ROWS_KEY, POLICY_KEY, POSITIONAL_KEY};
use crate::site::engine::SiteEngine;
use crate::site::files::{ClientFiles, FileFormat, observe_schemas, unify_schemas};
use crate::site::local::LocalClient;
use crate::site::release::identity::SiteIdentity;
use crate::site::release::policy::{DisclosurePolicy, describe_policy, error_kind};

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
    /// What its local clients enforce besides the exposure rules.
    site: SiteOptions,
    /// DP settings and the worker's budget ledger.
    pub(super) dp: Arc<crate::site::release::dp::DpSite>,
}

/// What every local client of a served table is given besides its files:
/// the table's disclosure policy, the site's identity and peers for secure
/// sessions (and whether, under a policy, it takes part in them with no
/// peers listed), the memory limit of a request, and the engine the
/// worker's sites share.
#[derive(Debug, Clone)]
pub struct SiteOptions {
    pub policy: Option<DisclosurePolicy>,
    pub identity: Option<Arc<SiteIdentity>>,
    pub peers: Arc<[[u8; 32]]>,
    pub secure_without_peers: bool,
    pub memory_limit: Option<usize>,
    /// The session, caches and templates of every site of the worker.
    pub engine: Arc<SiteEngine>,
    /// Whether the engine's fast path runs its encoders (`--fast-path`).
    pub fast_path: bool,
    /// The cluster that reads the table's rows (`--engine`), if any.
    pub cluster: Option<Arc<crate::site::cluster::ClusterEngine>>,
    /// The secure session ids the worker has set up, for all its tables.
    pub session_ids: Arc<crate::site::release::secure::SecureSessionIds>,
}

impl SiteOptions {
    /// The federation the worker's peers make with its own identity (0:
    /// no peers), as its schema announces it.
    pub fn federation(&self) -> usize {
        crate::protocol::secure::threshold::federation_size(
            &self.peers,
            self.identity.as_ref().map(|i| i.public_key()),
        )
    }
}

/// How many column lists a served table keeps a client (and its fit cache) for.
const CLIENTS_PER_TABLE: usize = 8;

impl ServedTable {
    /// Opens a table: finds its files and reads their schemas.
    pub fn open(name: &str, path: &Path, site: SiteOptions) -> Result<Self> {
        let files = ClientFiles::from_path(name, path, None)?;
        let observed = observe_schemas(&files)?;
        let schema = unify_schemas(name, &observed)?;
        Ok(Self {
            name: name.to_string(),
            has_rows: observed.iter().any(|o| o.has_rows),
            files,
            schema: Arc::new(schema),
            clients: Mutex::default(),
            site,
            dp: Arc::default(),
        })
    }

    /// The same table with these DP settings and ledger.
    pub fn with_dp(mut self, dp: Arc<crate::site::release::dp::DpSite>) -> Self {
        self.dp = dp;
        self
    }

    /// The table's disclosure policy, as `\\clients` shows it.
    pub(super) fn policy_text(&self) -> String {
        describe_policy(self.site.policy.as_ref())
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
                describe_policy(self.site.policy.as_ref()),
            ),
            (
                FEDERATION_KEY.to_string(),
                self.site.federation().to_string(),
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
        // Under a policy, a plan reads each column as this table's type or
        // one its every value casts to without failing: a narrower type
        // (TINYINT over BIGINT, a DECIMAL too short, NOT NULL over a
        // column with NULLs, a TIMESTAMP over integer codes) would make
        // the scan fail or succeed on one value (the seventeenth outside
        // attack read a row's magnitude from it).
        if self.site.policy.is_some() {
            for want in schema.fields() {
                let Ok(have) = self.schema.field_with_name(want.name()) else {
                    continue;
                };
                let nulls = want.is_nullable() || !have.is_nullable();
                if !nulls || !reads_without_failing(have.data_type(), want.data_type()) {
                    return Err(FedError::refused(
                        format!(
                            "the plan reads column `{}` of table `{}` as {}{}, but this site holds it as {}{}: under its disclosure policy a site reads a column only as its own type or a wider one",
                            want.name(),
                            self.name,
                            want.data_type(),
                            if want.is_nullable() { "" } else { " NOT NULL" },
                            have.data_type(),
                            if have.is_nullable() { "" } else { " NOT NULL" },
                        ),
                        Some(&format!(
                            "declare `{}` in CREATE FEDERATED TABLE as the type the site serves (or leave the columns out: the sites' own types are used)",
                            want.name()
                        )),
                    ));
                }
            }
        }
        let mut clients = self.clients.lock().expect("not poisoned");
        if let Some((_, client)) = clients.iter().find(|(s, _)| s == schema) {
            return Ok(Arc::clone(client));
        }
        // Whatever failed names none of the worker's files in what leaves.
        let unopened = |e: FedError| {
            FedError::refused(
                format!(
                    "this worker cannot open table `{}` now ({} error)",
                    self.name,
                    error_kind(&e.to_string())
                ),
                None,
            )
        };
        let client = Arc::new(
            LocalClient::from_files(
                &self.files,
                Arc::clone(schema),
                Arc::clone(&self.site.engine),
            )
            .map_err(unopened)?
            .with_policy(self.site.policy.clone())
            .with_identity(self.site.identity.clone(), Arc::clone(&self.site.peers))
            .with_session_ids(Arc::clone(&self.site.session_ids))
            .served_remotely(self.site.secure_without_peers)
            .with_memory_limit(self.site.memory_limit)
            .with_dp(Arc::clone(&self.dp))
            .with_fast_path(self.site.fast_path)
            .with_cluster(self.site.cluster.clone()),
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
    /// Says whether any rows were kept for it.
    pub(super) fn release_fit(&self, scope: u64) -> bool {
        let clients = self.clients.lock().expect("not poisoned");
        clients
            .iter()
            .fold(false, |any, (_, client)| client.release_kept(scope) || any)
    }

    /// How many fits' rows the local clients of this table keep.
    pub(super) fn kept_fits(&self) -> usize {
        let clients = self.clients.lock().expect("not poisoned");
        clients.iter().map(|(_, client)| client.kept_fits()).sum()
    }
}

/// Refuses scans of anything but served tables and inline shared rows: a
/// hand-crafted plan may not read a file path, a view, or any other table;
/// and a plan carrying more than `max_shared_rows` rows of its own (inline
/// shared tables and `VALUES`), which the worker would hold in memory.
pub(super) fn check_scans(plan: &LogicalPlan, max_shared_rows: usize) -> Result<()> {
    let mut refusal = None;
    let mut shared_rows = 0usize;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Values(values) = node {
            shared_rows = shared_rows.saturating_add(values.values.len());
        }
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
            && let Some(inline) = provider.downcast_ref::<InlineTable>()
        {
            shared_rows = shared_rows.saturating_add(inline.num_rows());
        }
        if shared_rows > max_shared_rows {
            refusal = Some(FedError::refused(
                format!(
                    "the plan carries more than {max_shared_rows} rows of shared tables or VALUES (this worker's max_shared_rows)"
                ),
                Some("join a smaller lookup table, or aggregate it first"),
            ));
            return Ok(TreeNodeRecursion::Stop);
        }
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

/// Whether every value of a column held as `have` casts to `want` without
/// failing and without becoming another value's text: the same type, text
/// as any text type, and integers or floats widened.
fn reads_without_failing(
    have: &datafusion::arrow::datatypes::DataType,
    want: &datafusion::arrow::datatypes::DataType,
) -> bool {
    use datafusion::arrow::datatypes::DataType as T;
    let text = |t: &T| matches!(t, T::Utf8 | T::LargeUtf8 | T::Utf8View);
    let binary = |t: &T| matches!(t, T::Binary | T::LargeBinary | T::BinaryView);
    let signed = |t: &T| match t {
        T::Int8 => Some(8),
        T::Int16 => Some(16),
        T::Int32 => Some(32),
        T::Int64 => Some(64),
        _ => None,
    };
    let unsigned = |t: &T| match t {
        T::UInt8 => Some(8),
        T::UInt16 => Some(16),
        T::UInt32 => Some(32),
        T::UInt64 => Some(64),
        _ => None,
    };
    // A column of an empty CSV file is typed Null: it holds no value
    // that could fail.
    if *have == T::Null
        || have == want
        || (text(have) && text(want))
        || (binary(have) && binary(want))
    {
        return true;
    }
    if let T::Dictionary(_, values) = have {
        return reads_without_failing(values, want);
    }
    match (signed(have), unsigned(have), signed(want), unsigned(want)) {
        (Some(h), _, Some(w), _) | (_, Some(h), _, Some(w)) => return h <= w,
        (_, Some(h), Some(w), _) => return h < w,
        _ => {}
    }
    match want {
        T::Float64 => have.is_integer() || matches!(have, T::Float16 | T::Float32),
        T::Float32 => matches!(have, T::Float16),
        _ => false,
    }
}
