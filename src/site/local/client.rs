//! The embedded site itself: what a [`LocalClient`] holds (its rows, the
//! engine that runs it, its policy, DP settings, peers and limits) and how
//! it is made, from files or from batches in memory.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::Column;
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{ViewTable, provider_as_source};
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit, when};

use crate::error::{FedError, Result};
use crate::site::cluster::ClusterEngine;
use crate::site::engine::kept_rows::KeptRows;
use crate::site::engine::{SiteEngine, SiteFile};
use crate::site::files::{ClientFiles, FileFormat, holds_tokens, missing_tokens};
use crate::site::release::dp::DpSite;
use crate::site::release::identity::SiteIdentity;
use crate::site::release::policy::DisclosurePolicy;
use crate::site::release::secure::ClientSecrets;

/// A site whose rows are local files or in-memory batches.
pub struct LocalClient {
    pub(super) name: String,
    pub(super) location: String,
    pub(super) format: String,
    pub(super) rows: Arc<dyn TableProvider>,
    /// The session, memory pool and encoder templates it shares with the
    /// other sites of its maker.
    pub(super) engine: Arc<SiteEngine>,
    /// Whether the engine's fast path runs this site's encoders (see
    /// [`crate::site::engine`]); off, DataFusion plans and runs each.
    pub(super) fast_path: bool,
    /// What a template of this site's plans is shared by: its format,
    /// CSV options, schema and policy (`None`: this site plans alone).
    pub(super) layout: Option<Arc<str>>,
    /// Its one file, bound into templates (`None` for rows in memory or
    /// several files).
    pub(super) file: Option<SiteFile>,
    /// The decoded input of the current fit's encoder.
    pub(super) kept: KeptRows,
    /// Key pairs and states of secure rounds between their two steps.
    pub(super) secrets: ClientSecrets,
    /// The data owner's disclosure policy, if any.
    pub(super) policy: Option<DisclosurePolicy>,
    /// Identity keys of the peers this site masks with (none listed: any).
    pub(super) peers: Arc<[[u8; 32]]>,
    /// How far this site trusts the process it answers: see [`Served`].
    pub(super) served: Served,
    /// The most memory one request may use here (`None`: no limit).
    pub(super) memory_limit: Option<usize>,
    /// DP settings and budget ledger (DP aggregates are noised even
    /// without settings).
    pub(super) dp: Arc<DpSite>,
    /// The client's files (none for rows held in memory).
    pub(super) files: Vec<std::path::PathBuf>,
    /// Whether its CSV files start with a header line (for file lines).
    pub(super) has_header: bool,
    /// The cluster that reads its rows (`fedsql worker --engine`); `None`:
    /// this process reads them.
    pub(super) cluster: Option<Arc<ClusterEngine>>,
}

/// Whom a site answers. An in-process site answers the analyst's own
/// process, which holds its files and its masks' keys anyway; a site that
/// a worker serves answers a coordinator elsewhere, which learns nothing
/// of the site's machine (its files' names are withheld from what it
/// explains) and, under a policy, gets no secure sum without listed
/// peers unless the data owner trusts it not to invent participants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Served {
    InProcess,
    Remotely { secure_without_peers: bool },
}

impl fmt::Debug for LocalClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalClient({} at {})", self.name, self.location)
    }
}

impl LocalClient {
    /// A site over its files, read with the federated table's `schema`
    /// (and, for CSV, the client's CSV options), run by `engine` (shared
    /// with the other sites of its maker).
    pub fn from_files(
        files: &ClientFiles,
        schema: SchemaRef,
        engine: Arc<SiteEngine>,
    ) -> Result<Self> {
        let state = engine.state();
        let urls = files
            .files
            .iter()
            .map(|f| ListingTableUrl::parse(f.to_string_lossy()))
            .collect::<Result<Vec<_>, _>>()?;
        // DataFusion reads `null_value` for inference only: a site whose
        // files hold a missing token reads its columns as text, and a
        // view turns the tokens into NULL before casting to the table's
        // types (in text columns too when the table names its token).
        let missing = match files.format {
            FileFormat::Csv => missing_in_files(files)?,
            FileFormat::Parquet => None,
        };
        let file_schema = match &missing {
            Some(_) => Arc::new(Schema::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| Field::new(f.name(), DataType::Utf8, true))
                    .collect::<Vec<_>>(),
            )),
            None => Arc::clone(&schema),
        };
        let options = match files.format {
            FileFormat::Csv => ListingOptions::new(Arc::new(
                CsvFormat::default()
                    .with_options(files.csv.clone())
                    .with_has_header(files.has_header()),
            ))
            .with_file_extension(""),
            FileFormat::Parquet => ListingOptions::new(Arc::new(
                ParquetFormat::default().with_options(state.table_options().parquet.clone()),
            ))
            .with_file_extension(files.format.extension()),
        };
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .with_schema(file_schema);
        let listing: Arc<dyn TableProvider> = Arc::new(ListingTable::try_new(config)?);
        let rows = match &missing {
            Some((tokens, in_text)) => {
                let exprs: Vec<Expr> = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        let text = col(Column::from_name(f.name()));
                        let is_text = f.data_type() == &DataType::Utf8;
                        let value = if is_text && !in_text {
                            text
                        } else {
                            let tokens = tokens.iter().map(|t| lit(t.as_str())).collect();
                            let cleared = when(
                                text.clone().in_list(tokens, false),
                                lit(ScalarValue::Utf8(None)),
                            )
                            .otherwise(text)?;
                            if is_text {
                                cleared
                            } else {
                                cast(cleared, f.data_type().clone())
                            }
                        };
                        Ok(value.alias(f.name()))
                    })
                    .collect::<Result<_>>()?;
                let plan = LogicalPlanBuilder::scan("rows", provider_as_source(listing), None)?
                    .project(exprs)?
                    .build()?;
                Arc::new(ViewTable::new(plan, None)) as Arc<dyn TableProvider>
            }
            None => listing,
        };
        let file = match files.files.as_slice() {
            [one] => Some(SiteFile::new(one)?),
            _ => None,
        };
        let layout = format!(
            "{:?}|{:?}|{:?}|{}|{:?}",
            files.format,
            files.csv,
            schema,
            files.has_header(),
            missing
        );
        Ok(Self {
            name: files.name.clone(),
            location: files.describe(),
            format: files.format.to_string(),
            rows,
            engine,
            fast_path: true,
            layout: Some(layout.into()),
            file,
            kept: KeptRows::default(),
            secrets: ClientSecrets::default(),
            policy: None,
            peers: Arc::new([]),
            served: Served::InProcess,
            memory_limit: None,
            dp: Arc::default(),
            files: files.files.clone(),
            has_header: files.format == FileFormat::Csv && files.has_header(),
            cluster: None,
        })
    }

    /// The same site with the engine's fast path on (the default) or off:
    /// off, every encoder is planned from its logical plan and run by
    /// DataFusion as it is, with no template, no scan of the site's own
    /// and no rows kept between the rounds of a fit.
    pub fn with_fast_path(mut self, on: bool) -> Self {
        self.fast_path = on;
        self
    }

    /// The same site with its rows read by a cluster (or by this
    /// process): the plan the site builds runs there as one job, without
    /// the fast path (the cluster's executors read the files; nothing is
    /// kept between a fit's rounds).
    pub fn with_cluster(mut self, cluster: Option<Arc<ClusterEngine>>) -> Self {
        if cluster.is_some() {
            self.fast_path = false;
        }
        self.cluster = cluster;
        self
    }

    /// The same site under a disclosure policy (or none).
    pub fn with_policy(mut self, policy: Option<DisclosurePolicy>) -> Self {
        if let Some(layout) = &self.layout {
            self.layout = Some(format!("{layout}|{policy:?}").into());
        }
        self.policy = policy;
        self
    }

    /// The same site signing its secure-session keys with `identity`, and
    /// masking only with keys signed by `peers` (when any are listed).
    pub fn with_identity(
        mut self,
        identity: Option<Arc<SiteIdentity>>,
        peers: Arc<[[u8; 32]]>,
    ) -> Self {
        self.secrets = ClientSecrets::with_identity(identity);
        self.peers = peers;
        self
    }

    /// The same site remembering the secure session ids it set up in
    /// `ids`, shared with the other clients of its site (a worker's tables
    /// and schemas): a used id is refused by all of them.
    pub fn with_session_ids(
        mut self,
        ids: Arc<crate::site::release::secure::SecureSessionIds>,
    ) -> Self {
        self.secrets = std::mem::take(&mut self.secrets).with_session_ids(ids);
        self
    }

    /// The same site served by a worker to coordinators in other
    /// processes: what it explains names none of its files, and under a
    /// policy it takes part in secure sums only with listed peers, unless
    /// `secure_without_peers` (the data owner's `secure_without_peers`
    /// setting) trusts the coordinator to relay real participants.
    pub fn served_remotely(mut self, secure_without_peers: bool) -> Self {
        self.served = Served::Remotely {
            secure_without_peers,
        };
        self
    }

    /// Refuses a secure session at a site served remotely under a policy
    /// with no peers listed (and no `secure_without_peers`): the
    /// coordinator relays every participant's session key, so without
    /// signed keys of listed peers it could make up the others and unmask
    /// this site's state.
    pub(super) fn check_secure_peers(&self) -> Result<()> {
        let unauthenticated = self.policy.is_some()
            && self.peers.is_empty()
            && self.served
                == Served::Remotely {
                    secure_without_peers: false,
                };
        if unauthenticated {
            return Err(FedError::Policy {
                client: self.name.clone(),
                rule: "a secure sum here needs the other sites listed as this worker's `peers` (its peers policy): with none listed, the coordinator could invent the other participants and unmask this site's state".into(),
                hint: Some(
                    "the data owner lists the other sites' identity keys in [policy] peers (--peer KEY), or sets [policy] secure_without_peers = true (--secure-without-peers) to trust the coordinator not to invent participants".into(),
                ),
            });
        }
        Ok(())
    }

    /// What this site requires of a secure session's threshold: its
    /// min_secure_clients, and with peers listed (it does not trust the
    /// coordinator then) the size of the federation they make.
    pub(super) fn threshold_floor(&self) -> crate::protocol::secure::threshold::SiteFloor {
        crate::protocol::secure::threshold::SiteFloor {
            min_secure_clients: crate::protocol::site::Site::secure_floor(self),
            federation: self.federation(),
        }
    }

    /// The distinct identities this site accepts in a secure round, its
    /// own included: the federation its peers make (0: no peers listed).
    pub(crate) fn federation(&self) -> usize {
        crate::protocol::secure::threshold::federation_size(&self.peers, self.secrets.identity())
    }

    /// The same site with each request's memory capped at `limit` bytes (a
    /// memory pool of its own per request; nothing is spilled to disk).
    pub fn with_memory_limit(mut self, limit: Option<usize>) -> Self {
        self.memory_limit = limit;
        self
    }

    /// The task context of one request: under a memory limit, with a
    /// memory pool of its own (a child of the shared one).
    pub(super) fn task_ctx(&self) -> Result<Arc<TaskContext>> {
        self.engine.task_ctx(self.memory_limit)
    }

    /// Drops the rows kept for fit `scope`; says whether there were any.
    pub fn release_kept(&self, scope: u64) -> bool {
        self.kept.release(scope)
    }

    /// How many fits' rows this client keeps now.
    pub fn kept_fits(&self) -> usize {
        self.kept.fits()
    }

    /// A request past its memory limit is refused, naming the limit.
    pub(super) fn memory_refusal(&self, e: &DataFusionError) -> Option<FedError> {
        let limit = self.memory_limit?;
        let exhausted = matches!(e.find_root(), DataFusionError::ResourcesExhausted(_))
            || e.to_string().contains("Resources exhausted");
        exhausted.then(|| FedError::Policy {
            client: self.name.clone(),
            rule: format!(
                "the request needs more than {} of memory (its memory_limit)",
                format_bytes(limit)
            ),
            hint: Some("use fewer groups or columns, or a narrower filter".into()),
        })
    }

    /// The same site with these DP settings and ledger (shared by every
    /// client of one served table).
    pub fn with_dp(mut self, dp: Arc<DpSite>) -> Self {
        self.dp = dp;
        self
    }

    /// A site over batches held in memory (cast to `schema`), run by `engine`.
    pub fn from_batches(
        name: &str,
        location: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        engine: Arc<SiteEngine>,
    ) -> Result<Self> {
        Ok(Self {
            name: name.to_string(),
            location: location.to_string(),
            format: "MEMORY".into(),
            rows: Arc::new(MemTable::try_new(schema, vec![batches])?),
            engine,
            fast_path: true,
            layout: None,
            file: None,
            kept: KeptRows::default(),
            secrets: ClientSecrets::default(),
            policy: None,
            peers: Arc::new([]),
            served: Served::InProcess,
            memory_limit: None,
            dp: Arc::default(),
            files: Vec::new(),
            has_header: false,
            cluster: None,
        })
    }
}

/// The tokens a site's CSV files mark missing values with, if they hold
/// any, and whether text columns read them as missing too (see
/// [`crate::site::files`]): a table's own `null_value` is always applied;
/// the default tokens only where a file holds one, so that files without
/// them are read as DataFusion reads them.
fn missing_in_files(files: &ClientFiles) -> Result<Option<(Vec<String>, bool)>> {
    let (tokens, in_text) = missing_tokens(&files.csv);
    if tokens.is_empty() {
        return Ok(None);
    }
    let owned = || tokens.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    if in_text {
        return Ok(Some((owned(), true)));
    }
    for path in &files.files {
        let unreadable = |e: std::io::Error| FedError::Client {
            client: files.name.clone(),
            location: path.display().to_string(),
            message: format!("cannot read: {e}"),
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let read = FileCompressionType::from(files.csv.compression)
            .convert_read(file)
            .map_err(|e| FedError::Client {
                client: files.name.clone(),
                location: path.display().to_string(),
                message: format!("cannot decompress: {e}"),
            })?;
        if holds_tokens(read, &tokens, files.csv.delimiter).map_err(unreadable)? {
            return Ok(Some((owned(), false)));
        }
    }
    Ok(None)
}

/// Bytes as a worker's settings write them (`64 MiB`).
pub fn format_bytes(bytes: usize) -> String {
    const UNITS: [(&str, usize); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}
