//! The embedded site: a data owner's rows in local files or in memory.
//!
//! [`LocalClient`] runs encoders over local CSV or Parquet files (or
//! in-memory batches, for the bundled demo) in the DataFusion session of the
//! engine its maker hands it (see [`crate::site::engine`]), configured so
//! that the partial aggregate really runs over the rows (no
//! statistics shortcut, no skipping of partial aggregation that would ship
//! raw rows as "state"). A worker serves its tables through the same type.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::Column;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::{ViewTable, provider_as_source};
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::functions::core::expr_fn::nullif;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, col, lit};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::SessionContext;
use fedsql_udfs::cox_step;

use crate::error::{FedError, Result};
use crate::protocol::encoder::{self, Encoder, StateBatch};
use crate::protocol::secure::{self, MaskRequest, SecureLayout, SecureSession, SecureSetup};
use crate::protocol::site::{Analyst, BudgetLine, Site, SiteRequest};
use crate::site::engine::in_order;
use crate::site::engine::kept_rows::KeptRows;
use crate::site::engine::yielding::yield_after_each_batch;
use crate::site::engine::{self, SiteEngine, SiteFile, Template, TemplateKey};
use crate::site::files::{ClientFiles, FileFormat, ParseFailure};
use crate::site::release::covered::CountRowsExec;
use crate::site::release::dp::DpSite;
use crate::site::release::gate;
use crate::site::release::group_rows;
use crate::site::release::identity::SiteIdentity;
use crate::site::release::joins;
use crate::site::release::never_fail::never_fail_on_data;
use crate::site::release::policy::{DisclosurePolicy, describe_policy};
use crate::site::release::secure::ClientSecrets;
use crate::site::release::shown_plan;
use crate::site::release::sketches;

pub use crate::site::engine::site_session;

pub use crate::error::EVALUATION_REFUSAL;

/// A site whose rows are local files or in-memory batches.
pub struct LocalClient {
    name: String,
    location: String,
    format: String,
    rows: Arc<dyn TableProvider>,
    /// The session, memory pool and encoder templates it shares with the
    /// other sites of its maker.
    engine: Arc<SiteEngine>,
    /// Whether the engine's fast path runs this site's encoders (see
    /// [`crate::site::engine`]); off, DataFusion plans and runs each.
    fast_path: bool,
    /// What a template of this site's plans is shared by: its format,
    /// CSV options, schema and policy (`None`: this site plans alone).
    layout: Option<Arc<str>>,
    /// Its one file, bound into templates (`None` for rows in memory or
    /// several files).
    file: Option<SiteFile>,
    /// The decoded input of the current fit's encoder.
    kept: KeptRows,
    /// Key pairs and states of secure rounds between their two steps.
    secrets: ClientSecrets,
    /// The data owner's disclosure policy, if any.
    policy: Option<DisclosurePolicy>,
    /// Identity keys of the peers this site masks with (none listed: any).
    peers: Arc<[[u8; 32]]>,
    /// How far this site trusts the process it answers: see [`Served`].
    served: Served,
    /// The most memory one request may use here (`None`: no limit).
    memory_limit: Option<usize>,
    /// DP settings and budget ledger (DP aggregates are noised even
    /// without settings).
    dp: Arc<DpSite>,
    /// The client's files (none for rows held in memory).
    files: Vec<std::path::PathBuf>,
    /// Whether its CSV files start with a header line (for file lines).
    has_header: bool,
}

/// Whom a site answers. An in-process site answers the analyst's own
/// process, which holds its files and its masks' keys anyway; a site that
/// a worker serves answers a coordinator elsewhere, which learns nothing
/// of the site's machine (its files' names are withheld from what it
/// explains) and, under a policy, gets no secure sum without listed
/// peers unless the data owner trusts it not to invent participants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
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
        // DataFusion reads `null_value` for inference only: a client that
        // names one reads its columns as text, and a view turns the token
        // into NULL before casting to the table's types.
        let null_value = match files.format {
            FileFormat::Csv => files.csv.null_value.clone().filter(|n| !n.is_empty()),
            FileFormat::Parquet => None,
        };
        let file_schema = match &null_value {
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
        let rows = match &null_value {
            Some(null) => {
                let exprs: Vec<Expr> = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        let text = nullif(col(Column::from_name(f.name())), lit(null.as_str()));
                        let value = if f.data_type() == &DataType::Utf8 {
                            text
                        } else {
                            cast(text, f.data_type().clone())
                        };
                        value.alias(f.name())
                    })
                    .collect();
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
            "{:?}|{:?}|{:?}|{}",
            files.format,
            files.csv,
            schema,
            files.has_header()
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
    fn check_secure_peers(&self) -> Result<()> {
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

    /// The same site with each request's memory capped at `limit` bytes (a
    /// memory pool of its own per request; nothing is spilled to disk).
    pub fn with_memory_limit(mut self, limit: Option<usize>) -> Self {
        self.memory_limit = limit;
        self
    }

    /// The task context of one request: under a memory limit, with a
    /// memory pool of its own (a child of the shared one).
    fn task_ctx(&self) -> Result<Arc<TaskContext>> {
        self.engine.task_ctx(self.memory_limit)
    }

    /// Drops the rows kept for fit `scope`; says whether there were any.
    pub fn release_kept(&self, scope: u64) -> bool {
        self.kept.release(scope)
    }

    /// A request past its memory limit is refused, naming the limit.
    fn memory_refusal(&self, e: &DataFusionError) -> Option<FedError> {
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
        })
    }

    /// An error of this site's, naming it. Under a disclosure policy, one
    /// fixed refusal ([`EVALUATION_REFUSAL`]): no kind, row text, values,
    /// position, paths or site name.
    fn error(&self, e: impl fmt::Display) -> FedError {
        let message = e.to_string();
        let failure = ParseFailure::read(&message, &self.rows.schema());
        match (&self.policy, failure) {
            (None, Some(f)) => FedError::Client {
                client: self.name.clone(),
                location: self.location.clone(),
                message: f.describe(self.has_header, self.files.len() > 1),
            },
            (None, None) => FedError::Client {
                client: self.name.clone(),
                location: self.location.clone(),
                message,
            },
            // Under a policy: one fixed refusal, whatever failed and
            // wherever (no kind, no position): whether and how a query
            // fails must not tell one row's values.
            (Some(_), _) => FedError::Withheld { detail: message },
        }
    }

    /// The site's physical plan for an encoder: the partial aggregate over
    /// its own rows (or the fit's kept rows), one state row per group;
    /// under a policy, with the counts the policy checks. A plan of one
    /// file is instantiated from its layout's template when there is one.
    async fn physical_plan(&self, encoder: &Encoder) -> Result<SitePlan> {
        gate::admit(encoder.plan())?;
        if let Some(policy) = &self.policy {
            policy.check_encoder(&self.name, encoder.plan())?;
            let session = SessionContext::new_with_state(self.engine.state().clone());
            joins::check_no_amplification(&self.name, encoder.plan(), &session).await?;
        }
        self.dp.check_encoder(&self.name, encoder.plan())?;
        let key = match (&self.layout, &self.file) {
            (Some(layout), Some(_))
                if self.fast_path
                    && encoder.fit_scope().is_none()
                    && engine::reads_one_table(encoder.plan()) =>
            {
                Some(TemplateKey::new(Arc::clone(layout), encoder))
            }
            _ => None,
        };
        if let (Some(key), Some(file)) = (&key, &self.file) {
            let template = match self.engine.template(key) {
                Some(template) => template,
                None => {
                    let planned = self.plan_anew(encoder).await?;
                    let Some(template) = Template::of(
                        Arc::clone(&planned.plan),
                        planned.counts.clone(),
                        self.engine.state().config().batch_size(),
                    ) else {
                        // Not bindable (several partitions, ranges): this
                        // site's own plan, planned again next time.
                        return Ok(planned);
                    };
                    let template = Arc::new(template);
                    self.engine
                        .keep_template(key.clone(), Arc::clone(&template));
                    template
                }
            };
            let (plan, counts) = template
                .instantiate(file, self.engine.footers())
                .map_err(|e| self.error(e))?;
            return Ok(SitePlan { plan, counts });
        }
        self.plan_anew(encoder).await
    }

    /// Plans an encoder for this site from its logical plan; a later round
    /// of a fit whose encoder differs only in its config rebinds the plan
    /// of the fit's kept rows instead (see [`KeptRows::rebound`]).
    async fn plan_anew(&self, encoder: &Encoder) -> Result<SitePlan> {
        // DataFusion lists a file that is gone as no file at all: a site
        // whose file is gone answers an error, not an empty state.
        if let Some(gone) = self.files.iter().find(|f| !f.is_file()) {
            let e = format!("cannot read {}: the file is missing", gone.display());
            return Err(self.error(DataFusionError::External(e.into())));
        }
        let rebound = match self.fit_scope(encoder) {
            Some(scope) => self
                .kept
                .rebound(scope, &encoder.input_key(), encoder.plan())?,
            None => None,
        };
        let partial = match rebound {
            Some(partial) => partial,
            None => self.plan_partial(encoder).await?,
        };
        let (partial, counts) = match &self.policy {
            Some(policy) => {
                let (partial, counts) = group_rows::counted(partial, policy.min_group_rows)?;
                (partial, Some(counts))
            }
            None => (partial, None),
        };
        Ok(SitePlan {
            plan: in_order::one_state_per_group(partial)?,
            counts,
        })
    }

    /// The partial aggregate of an encoder over this site's rows (over the
    /// fit's kept rows for an encoder of a fit), planned from its logical plan.
    async fn plan_partial(&self, encoder: &Encoder) -> Result<AggregateExec> {
        let mut plan = encoder.bind(Arc::clone(&self.rows))?;
        if self.policy.is_some() {
            plan = never_fail_on_data(plan)?;
        }
        let state = self.engine.state();
        // The encoder is already optimized and validated: plan it as it is.
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, state)
            .await?;
        let partial = encoder::partial_aggregate(&physical)?;
        Ok(match self.fit_scope(encoder) {
            Some(scope) => self
                .kept
                .partial_over_kept(
                    partial,
                    encoder.plan(),
                    scope,
                    encoder.input_key(),
                    (&self.engine, &self.files),
                    self.task_ctx()?,
                )
                .await
                .map_err(|e| match &e {
                    FedError::DataFusion(d) => self.memory_refusal(d).unwrap_or(e),
                    _ => e,
                })?,
            None => partial,
        })
    }

    /// The fit whose rows this site keeps for `encoder`'s rounds (none
    /// with the fast path off: every round reads its rows anew).
    fn fit_scope(&self, encoder: &Encoder) -> Option<u64> {
        encoder.fit_scope().filter(|_| self.fast_path)
    }

    /// The physical plan of an encoder whose state may leave this site as
    /// it is: never one with a secure aggregate, whose state leaves only
    /// masked (see [`crate::protocol::secure`]).
    async fn plain_plan(&self, encoder: &Encoder) -> Result<SitePlan> {
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.site_error(e))?;
        if secure::has_secure_aggregates(&plan.plan) {
            return Err(secure::plain_state_refused(&self.name));
        }
        Ok(plan)
    }

    /// Runs a plan of this site's to its state batch; under a policy, the
    /// state is checked (and its counts dropped) before it is handed out.
    async fn run(&self, request: &SiteRequest<'_>, plan: SitePlan) -> Result<StateBatch> {
        let encoder = request.encoder;
        // DP state: its constants checked and its ε debited, to the
        // request's analyst, before the plan runs, so that a run that fails
        // has spent it too.
        let dropped = plan.counts.as_ref().map(|c| c.all()).unwrap_or_default();
        let paid = self.dp.pay(
            (&self.name, request.analyst.name()),
            encoder.table(),
            (&plan.plan, &dropped),
        )?;
        let physical = yield_after_each_batch(Arc::clone(&plan.plan))?;
        let batches = collect(physical, self.task_ctx()?).await.map_err(|e| {
            self.memory_refusal(&e)
                .unwrap_or_else(|| self.error(strip_context(e)))
        })?;
        check_site_only_fields(&batches)?;
        let batches = match (&self.policy, &plan.counts) {
            (Some(policy), Some(columns)) => {
                let (batches, counts) =
                    group_rows::split_off(&batches, columns, policy.min_group_rows)?;
                let parameters = DisclosurePolicy::parameters(encoder.plan());
                // DP state only, under a finite budget: exempt from the
                // thresholds (the noise protects it).
                let site_rows = !columns.rows_asked;
                if !self
                    .dp
                    .exempts_from_thresholds(encoder.plan(), &plan.plan, site_rows)
                {
                    policy.check_counts(&self.name, &counts, parameters)?;
                    policy.check_cells(&self.name, &batches, &columns.cells)?;
                }
                let k = policy.min_group_rows;
                let mut released = Vec::with_capacity(batches.len());
                for batch in &batches {
                    let batch = sketches::coarsen(batch, k as f64, policy.allow_extremes)?;
                    let batch = sketches::fold_histograms(&batch, k as i64)
                        .map_err(|e| policy.histogram_refusal(&self.name, e))?;
                    released.push(batch);
                }
                released
            }
            _ => batches,
        };
        // DP state: declared keys completed, noise added.
        let batches = self
            .dp
            .release(encoder.plan(), &paid, encoder.state_schema(), batches)?;
        encoder.accept(&batches).map_err(|e| self.error(e))
    }

    /// A policy refusal as it is; any other error names this site.
    fn site_error(&self, e: FedError) -> FedError {
        match e {
            FedError::Policy { .. } | FedError::Refused { .. } | FedError::Withheld { .. } => e,
            other => self.error(other),
        }
    }

    /// Runs the encoder as [`Site::encode`] does, and also counts
    /// the rows its partial aggregate consumed: what a worker logs as the
    /// rows a released state covers.
    pub async fn encode_counted(&self, request: &SiteRequest<'_>) -> Result<(StateBatch, u64)> {
        let mut plan = self.plain_plan(request.encoder).await?;
        let rows;
        (plan.plan, rows) =
            CountRowsExec::under_partial_aggregates(plan.plan).map_err(|e| self.error(e))?;
        let state = self.run(request, plan).await?;
        Ok((state, CountRowsExec::count(&rows)))
    }
}

#[async_trait]
impl Site for LocalClient {
    fn name(&self) -> &str {
        &self.name
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn in_process(&self) -> bool {
        true
    }

    fn keeps_budget_per_analyst(&self) -> bool {
        let policy = self.dp.policy();
        policy.budget.is_some() || policy.require_dp
    }

    async fn check_reachable(&self, _analyst: &Analyst) -> std::result::Result<(), String> {
        match self.files.iter().find(|f| !f.is_file()) {
            None => Ok(()),
            Some(_) if self.policy.is_some() => {
                Err("a file is missing (details withheld under its disclosure policy)".into())
            }
            Some(file) => Err(format!("the file {} is missing", file.display())),
        }
    }

    fn format(&self) -> String {
        self.format.clone()
    }

    fn policy(&self) -> String {
        describe_policy(self.policy.as_ref())
    }

    async fn encode(&self, request: &SiteRequest<'_>) -> Result<StateBatch> {
        let plan = self.plain_plan(request.encoder).await?;
        self.run(request, plan).await
    }

    async fn privacy_budget(&self, table: &str, analyst: &Analyst) -> Result<Option<BudgetLine>> {
        Ok(Some(self.dp.budget_line(table, analyst.name())))
    }

    async fn secure_setup(
        &self,
        request: &SiteRequest<'_>,
        session: &SecureSession,
    ) -> Result<SecureSetup> {
        let encoder = request.encoder;
        self.check_secure_peers()?;
        if let Some(policy) = &self.policy {
            policy.check_secure_session(&self.name, session)?;
        }
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.site_error(e))?;
        let mut layout = SecureLayout::of_plan(&plan.plan).map_err(|e| self.error(e))?;
        if let Some(counts) = &plan.counts {
            layout = layout.without_columns(&counts.all());
        }
        let state = self.run(request, plan).await?;
        self.secrets
            .setup(session, &state, layout)
            .map_err(|e| self.error(e))
    }

    async fn encode_masked(
        &self,
        request: &SiteRequest<'_>,
        mask: &MaskRequest,
    ) -> Result<StateBatch> {
        self.check_secure_peers()?;
        let min = self.policy.as_ref().map_or(0, |p| p.min_secure_clients);
        let own = self.secrets.identity();
        let admit = |me_at: usize| {
            crate::site::release::secure::check_participants(mask, me_at, own, &self.peers, min).map_err(|rule| {
                FedError::Policy {
                    client: self.name.clone(),
                    rule,
                    hint: Some(
                        "run the round over the sites this one lists as peers, each with its identity key".into(),
                    ),
                }
            })
        };
        self.secrets
            .mask(request.encoder, mask, admit)
            .map_err(|e| self.site_error(e))
    }

    fn release_fit(&self, scope: u64, _analyst: &Analyst) {
        self.kept.release(scope);
    }

    async fn explain(&self, request: &SiteRequest<'_>) -> Result<String> {
        let plan = self
            .physical_plan(request.encoder)
            .await
            .map_err(|e| self.site_error(e))?;
        // What a worker answers, or a site under a policy shows, names
        // none of its files; the analyst's own files are shown as they are.
        if self.served != Served::InProcess || self.policy.is_some() {
            return Ok(shown_plan::without_files(&plan.plan, &self.files));
        }
        Ok(displayable(plan.plan.as_ref()).indent(false).to_string())
    }
}

/// A site's physical plan for an encoder, and where the counts its policy
/// checks sit in the state (none without a policy).
struct SitePlan {
    plan: Arc<dyn ExecutionPlan>,
    counts: Option<group_rows::CountColumns>,
}

/// State fields that only a site's own stages may hold (`cox_step`'s
/// `site_rows`, handed from its partial stage to its reduce) must be empty
/// in what leaves the site: checked here, on every state, whatever the
/// aggregate promises.
fn check_site_only_fields(batches: &[RecordBatch]) -> Result<()> {
    for batch in batches {
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            if !cox_step::is_site_rows(field.name()) {
                continue;
            }
            let leaking = column
                .as_list_opt::<i32>()
                .is_none_or(|list| !list.values().is_empty());
            if leaking {
                return Err(FedError::refused(
                    format!(
                        "state field `{}` would carry rows out of the site",
                        field.name()
                    ),
                    None,
                ));
            }
        }
    }
    Ok(())
}

/// DataFusion wraps errors from spawned tasks in context layers; the user
/// wants the innermost message (e.g. the CSV parser's line and column).
fn strip_context(e: DataFusionError) -> DataFusionError {
    match e {
        DataFusionError::Context(_, inner) => strip_context(*inner),
        DataFusionError::Shared(inner) => match Arc::try_unwrap(inner) {
            Ok(inner) => strip_context(inner),
            Err(shared) => DataFusionError::Shared(shared),
        },
        other => other,
    }
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
