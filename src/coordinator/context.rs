//! [`FedContext`]: the coordinator. It holds the catalog (federated tables
//! as schema-only providers, ordinary tables as *shared* tables), turns SQL
//! into plans with DataFusion, and runs every plan that touches a federated
//! table as rounds of encode → merge → decode (see [`crate::coordinator::rounds`]).

use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::dataframe::DataFrame;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use futures::future::try_join_all;

use crate::coordinator::client_column::CLIENT_COLUMN;
use crate::coordinator::ddl::{ClientList, CreateFederatedTable};
use crate::coordinator::dp::LedgerFolder;
use crate::coordinator::explain;
use crate::coordinator::federated_table::FederatedTable;
use crate::coordinator::fit_scope::FitScope;
use crate::coordinator::information_schema::FedInformationSchema;
use crate::coordinator::settings::FedsqlOptions;
use crate::coordinator::worker_client::RemoteClient;
use crate::coordinator::worker_url as remote;
use crate::error::{FedError, Result};
use crate::notices::{Notices, Progress};
use crate::protocol::exposure;
use crate::protocol::site::Site;
use crate::site::engine::SiteEngine;
use crate::site::files::{self, ClientFiles, unify_schemas};
use crate::site::in_process::{Rows, SiteSettings};

/// The coordinator: register federated and shared tables, run SQL.
///
/// ```no_run
/// # async fn demo() -> fedsql::Result<()> {
/// use fedsql::FedContext;
/// let ctx = FedContext::new();
/// ctx.sql("CREATE FEDERATED TABLE visits LOCATION 'testdata/visits/'").await?;
/// let batches = ctx
///     .sql("SELECT region, count(*) AS n, avg(age) AS mean_age FROM visits GROUP BY region")
///     .await?
///     .collect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FedContext {
    ctx: SessionContext,
}

/// The engine of a context's in-process sites, in its session's config so
/// that a context made from its state (a table function's) shares it.
#[derive(Debug, Default)]
struct SiteEngineSlot(std::sync::OnceLock<Arc<SiteEngine>>);

/// One table in the catalog, for `\d`.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub name: String,
    /// `None` for a shared table; the number of clients for a federated one.
    pub clients: Option<usize>,
    pub schema: SchemaRef,
}

impl FedContext {
    /// An empty coordinator with fedsql's aggregate and scalar functions
    /// but no table functions: [`FedContext::new`] (in [`crate::session`],
    /// the composition root) adds the models and the statistics.
    pub(crate) fn without_table_functions() -> Self {
        // DataFusion's built-in information_schema would answer before the
        // catalog's: fedsql's (which completes it) is registered below.
        let config = SessionConfig::new()
            .with_information_schema(false)
            // Uncorrelated scalar subqueries become joins with the subquery's
            // (aggregated, hence shared) result, i.e. an earlier round, rather
            // than a physical side plan that a client's encoder cannot carry.
            .set_bool(
                "datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery",
                false,
            )
            .with_option_extension(FedsqlOptions::default())
            .with_extension(Arc::new(Notices::default()))
            .with_extension(Arc::new(SiteEngineSlot::default()));
        let ctx = SessionContext::new_with_config(config);
        let catalogs = ctx.state().catalog_list().clone();
        let catalog = ctx.state().config_options().catalog.default_catalog.clone();
        if let Some(catalog) = catalogs.catalog(&catalog) {
            let schema = FedInformationSchema::new(&catalogs);
            let _ = catalog.register_schema("information_schema", Arc::new(schema));
        }
        fedsql_udfs::register_all(&ctx);
        ctx.add_analyzer_rule(Arc::new(crate::coordinator::dp::SessionEpsilon));
        Self { ctx }
    }

    /// A coordinator over an existing session state (as a table function
    /// gets it): the same catalog, functions and settings.
    pub fn from_state(state: datafusion::execution::SessionState) -> Self {
        Self {
            ctx: SessionContext::new_with_state(state),
        }
    }

    /// The same context with its in-process sites run by `engine` (for an
    /// embedder or a test that shares one engine between contexts, or
    /// wants one of its own).
    pub fn with_site_engine(self, engine: Arc<SiteEngine>) -> Self {
        self.ctx
            .state_ref()
            .write()
            .config_mut()
            .set_extension(Arc::new(SiteEngineSlot(std::sync::OnceLock::from(engine))));
        self
    }

    /// The engine this context's in-process sites share (one per context,
    /// made on first use; see [`crate::site::engine`]).
    pub fn site_engine(&self) -> Arc<SiteEngine> {
        let slot = self
            .ctx
            .state_ref()
            .read()
            .config()
            .get_extension::<SiteEngineSlot>();
        match slot {
            Some(slot) => Arc::clone(slot.0.get_or_init(|| Arc::new(SiteEngine::new()))),
            // A session made elsewhere: an engine for this table alone.
            None => Arc::new(SiteEngine::new()),
        }
    }

    /// Takes the notices (warnings, model summaries) left by the statements
    /// run so far.
    pub fn take_notices(&self) -> Vec<String> {
        self.ctx
            .state()
            .config()
            .get_extension::<Notices>()
            .map(|n| n.take())
            .unwrap_or_default()
    }

    /// Takes the notices and, apart, the model summaries left by the
    /// statements run so far (the REPL prints a summary around its table).
    pub fn take_notices_and_summaries(
        &self,
    ) -> (
        Vec<String>,
        Vec<crate::notices::printed_summary::ModelSummary>,
    ) {
        self.ctx
            .state()
            .config()
            .get_extension::<Notices>()
            .map(|n| n.take_separately())
            .unwrap_or_default()
    }

    /// Leaves a model summary for whoever runs the statement.
    pub fn push_summary(&self, summary: crate::notices::printed_summary::ModelSummary) {
        if let Some(notices) = self.ctx.state().config().get_extension::<Notices>() {
            notices.push_summary(summary);
        }
    }

    /// Keeps the privacy-budget ledgers of the in-process tables created
    /// from now on in files in `folder` (one per table and client), rather
    /// than in memory: `fedsql serve --dp-ledgers DIR`.
    pub fn keep_dp_ledgers_in(&self, folder: &std::path::Path) -> Result<()> {
        std::fs::create_dir_all(folder).map_err(|e| {
            FedError::InvalidArgument(format!(
                "cannot create the ledger folder {}: {e}",
                folder.display()
            ))
        })?;
        self.ctx
            .state_ref()
            .write()
            .config_mut()
            .set_extension(Arc::new(LedgerFolder(folder.to_path_buf())));
        Ok(())
    }

    /// Reports the progress of long fits (iteration, deviance) through `progress`.
    pub fn set_progress(&self, progress: Progress) {
        self.ctx
            .state_ref()
            .write()
            .config_mut()
            .set_extension(Arc::new(progress));
    }

    /// Reports each round's sites answered / total through `progress`.
    pub fn set_round_progress(&self, progress: crate::notices::RoundProgress) {
        self.ctx
            .state_ref()
            .write()
            .config_mut()
            .set_extension(Arc::new(progress));
    }

    /// The underlying DataFusion context (shared tables, functions, settings).
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// This context for a fit's one-off query (the levels of its factors,
    /// its shared statistics): the same session, but sites keep no rows
    /// for it, as no later round of the fit reads the same input.
    pub fn one_off(&self) -> FedContext {
        let mut state = self.ctx.state();
        if state.config().get_extension::<FitScope>().is_some() {
            state.config_mut().set_extension(FitScope::one_off());
        }
        FedContext::from_state(state)
    }

    /// Registers a federated table from a parsed `CREATE FEDERATED TABLE`.
    pub async fn create_federated(&self, stmt: &CreateFederatedTable) -> Result<()> {
        let analyst = self.analyst();
        if self.ctx.table_exist(stmt.name.as_str())? {
            if stmt.if_not_exists {
                return Ok(());
            }
            if !stmt.or_replace {
                return Err(FedError::AlreadyExists(format!(
                    "table `{}` already exists: DROP TABLE {} first, or use CREATE OR REPLACE FEDERATED TABLE",
                    stmt.name, stmt.name
                )));
            }
        }
        let csv = |site: &str| files::csv_options_for(&stmt.options, Some(site));
        let sites: Vec<SiteSpec> = match &stmt.clients {
            ClientList::Location(dir) => {
                let found = ClientFiles::discover(dir, stmt.format)?;
                let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
                remote::check_option_keys(&stmt.options, &names)?;
                found
                    .iter()
                    .map(|c| Ok(SiteSpec::Local(Box::new(c.clone().with_csv(csv(&c.name)?)))))
                    .collect::<Result<Vec<_>>>()?
            }
            ClientList::Named(named) => {
                let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
                remote::check_option_keys(&stmt.options, &names)?;
                named
                    .iter()
                    .map(|(name, path)| {
                        let location = path.to_string_lossy();
                        if remote::is_url(&location) {
                            remote::check_no_site_csv(&stmt.options, name)?;
                            let url = remote::WorkerUrl::parse(&location, &stmt.name)?;
                            let options = remote::RemoteOptions::for_client(&stmt.options, name)?;
                            Ok(SiteSpec::Remote(Arc::new(RemoteClient::new(
                                name, url, options,
                            )?)))
                        } else {
                            Ok(SiteSpec::Local(Box::new(
                                ClientFiles::from_path(name, path, stmt.format)?
                                    .with_csv(csv(name)?),
                            )))
                        }
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        // Every worker reports its table's schema (all at once).
        let remote_schemas = try_join_all(sites.iter().filter_map(|s| match s {
            SiteSpec::Remote(r) => Some(r.observe_schema(&analyst)),
            SiteSpec::Local(_) => None,
        }))
        .await?;
        let mut remote_schemas = remote_schemas.into_iter();
        let mut observed = Vec::new();
        for site in &sites {
            match site {
                SiteSpec::Local(c) => observed.extend(files::observe_schemas(c)?),
                SiteSpec::Remote(_) => observed.extend(remote_schemas.next()),
            }
        }
        // A column that reads as text because of NA tokens, at every client.
        for field in observed
            .first()
            .map(|o| o.schema.fields().clone())
            .unwrap_or_default()
            .iter()
        {
            if let Some(hint) = observed
                .iter()
                .find_map(|o| files::na_hint(o, field.name()))
            {
                self.notice(format!("Note: {hint}"));
            }
        }
        let schema = if stmt.columns.is_empty() {
            Arc::new(unify_schemas(&stmt.name, &observed)?)
        } else {
            let declared = self.declared_schema(stmt).await?;
            for seen in observed {
                files::check_declared_schema(seen, &declared)?;
            }
            Arc::new(declared)
        };
        // In-process sites have no data owner: their settings are the
        // rehearsal the table's OPTIONS ask for, made by the site itself.
        let settings = SiteSettings::from_options(&stmt.options)?;
        let ledgers = self
            .ctx
            .state_ref()
            .read()
            .config()
            .get_extension::<LedgerFolder>();
        let engine = self.site_engine();
        let runners = sites
            .into_iter()
            .map(|site| {
                Ok(match site {
                    SiteSpec::Local(c) => {
                        let ledger = ledgers.as_ref().map(|f| f.file(&stmt.name, &c.name));
                        let rows = Rows::Files(&c);
                        let ledger = ledger.as_deref();
                        settings.site(rows, Arc::clone(&schema), ledger, Arc::clone(&engine))?
                    }
                    SiteSpec::Remote(r) => r as Arc<dyn Site>,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if schema.field_with_name(CLIENT_COLUMN).is_ok() {
            self.notice(format!(
                "table `{}` has its own column `{CLIENT_COLUMN}`: it is used as it is, in place of the virtual column of client names",
                stmt.name
            ));
        }
        let threshold = crate::coordinator::worker_url::secure_threshold_option(&stmt.options)?;
        self.register_federated(
            FederatedTable::new(stmt.name.clone(), schema, runners)
                .with_secure_threshold(threshold),
        )
    }

    /// Who the session's statements run for (see [`crate::coordinator::analyst`]).
    pub fn analyst(&self) -> crate::protocol::site::Analyst {
        crate::coordinator::analyst::of(self.ctx.state_ref().read().config())
    }

    /// Leaves a notice for the statement's caller (shown after its
    /// result): the one way a statement or a table function leaves one.
    pub fn notice(&self, line: impl Into<String>) {
        if let Some(notices) = self.ctx.state().config().get_extension::<Notices>() {
            notices.push(line);
        }
    }

    /// Registers a federated table (replacing one of the same name).
    pub fn register_federated(&self, table: FederatedTable) -> Result<()> {
        let name = table.name().to_string();
        self.ctx.deregister_table(name.as_str())?;
        self.ctx
            .register_table(name.as_str(), table.into_provider())?;
        Ok(())
    }

    /// The schema a column list declares, through DataFusion's own DDL
    /// planning (so every type `CREATE EXTERNAL TABLE` accepts works).
    async fn declared_schema(&self, stmt: &CreateFederatedTable) -> Result<Schema> {
        let columns: Vec<String> = stmt.columns.iter().map(|c| c.to_string()).collect();
        let sql = format!(
            "CREATE EXTERNAL TABLE __fedsql_declared ({}) STORED AS CSV LOCATION '__unused__'",
            columns.join(", ")
        );
        let mut statements = DFParser::parse_sql(&sql)?;
        let Some(DFStatement::CreateExternalTable(_)) = statements.front() else {
            return Err(FedError::Syntax(format!(
                "cannot read the column list ({})",
                columns.join(", ")
            )));
        };
        let plan = self
            .ctx
            .state()
            .statement_to_plan(statements.pop_front().expect("one"))
            .await?;
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(c)) => {
                Ok(c.schema.as_arrow().clone())
            }
            _ => Err(FedError::Syntax("cannot read the column list".into())),
        }
    }

    /// The federated table of that name.
    pub async fn federated_table(&self, name: &str) -> Result<Arc<dyn TableProvider>> {
        let provider = self.ctx.table_provider(name).await.map_err(|_| {
            FedError::UnknownTable(format!("no table named `{name}`; \\d lists the tables"))
        })?;
        if FederatedTable::from_provider(provider.as_ref()).is_none() {
            return Err(FedError::InvalidArgument(format!(
                "`{name}` is a shared table, not a federated one"
            )));
        }
        Ok(provider)
    }

    /// One row per client of a federated table: client, format, location,
    /// the disclosure policy it enforces, and whether it can be reached now
    /// (if not, why).
    pub async fn clients_batch(&self, name: &str) -> Result<RecordBatch> {
        let provider = self.federated_table(name).await?;
        let table = FederatedTable::from_provider(provider.as_ref()).expect("checked above");
        let clients = table.clients();
        let analyst = self.analyst();
        let schema = Arc::new(Schema::new(vec![
            Field::new("client", DataType::Utf8, false),
            Field::new("format", DataType::Utf8, false),
            Field::new("location", DataType::Utf8, false),
            Field::new("policy", DataType::Utf8, false),
            Field::new("reachable", DataType::Boolean, false),
            Field::new("why_not", DataType::Utf8, true),
        ]));
        let reachable = try_join_all(
            clients
                .iter()
                .map(|c| async { Ok::<_, FedError>(c.check_reachable(&analyst).await.err()) }),
        )
        .await?;
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    clients.iter().map(|c| c.name().to_string()),
                )),
                Arc::new(StringArray::from_iter_values(
                    clients.iter().map(|c| c.format()),
                )),
                Arc::new(StringArray::from_iter_values(
                    clients.iter().map(|c| c.location()),
                )),
                Arc::new(StringArray::from_iter_values(
                    clients.iter().map(|c| c.policy()),
                )),
                Arc::new(BooleanArray::from_iter(
                    reachable.iter().map(|why| Some(why.is_none())),
                )),
                Arc::new(StringArray::from(reachable)),
            ],
        )?)
    }

    /// Every table in the default schema, federated ones with their client count.
    pub async fn tables(&self) -> Result<Vec<TableInfo>> {
        let Some(schema) = self
            .ctx
            .catalog("datafusion")
            .and_then(|c| c.schema("public"))
        else {
            return Ok(Vec::new());
        };
        let mut names = schema.table_names();
        names.sort();
        let mut tables = Vec::new();
        for name in names {
            if let Some(provider) = schema.table(&name).await? {
                let clients =
                    FederatedTable::from_provider(provider.as_ref()).map(|t| t.clients().len());
                tables.push(TableInfo {
                    name,
                    clients,
                    schema: provider.schema(),
                });
            }
        }
        Ok(tables)
    }

    /// Tells every client of every federated table that the fit `scope` has
    /// ended, so that they drop what they kept for it.
    pub async fn release_fit(&self, scope: u64) {
        let analyst = self.analyst();
        for table in self.tables().await.unwrap_or_default() {
            if table.clients.is_some()
                && let Ok(provider) = self.federated_table(&table.name).await
                && let Some(federated) = FederatedTable::from_provider(provider.as_ref())
            {
                federated
                    .clients()
                    .iter()
                    .for_each(|c| c.release_fit(scope, &analyst));
            }
        }
    }

    /// The text of EXPLAIN FEDERATED for a dataframe's plan.
    pub(crate) async fn explain_plan(&self, df: DataFrame, label: &str) -> Result<String> {
        let (state, plan) = df.into_parts();
        if !exposure::touches_federated(&plan) {
            return Err(FedError::InvalidArgument(
                "EXPLAIN FEDERATED: the query reads no federated table (use EXPLAIN)".into(),
            ));
        }
        exposure::check(&plan, label)?;
        let optimized = state.optimize(&plan)?;
        explain::explain(&state, optimized).await
    }
}

/// Where one client of a table being created is.
enum SiteSpec {
    Local(Box<ClientFiles>),
    Remote(Arc<RemoteClient>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_travel_in_the_session() {
        let ctx = FedContext::new();
        assert!(
            ctx.session()
                .state()
                .config()
                .get_extension::<Notices>()
                .is_some()
        );
        ctx.session()
            .state()
            .config()
            .get_extension::<Notices>()
            .unwrap()
            .push("x");
        assert_eq!(ctx.take_notices(), ["x"]);
    }
}
