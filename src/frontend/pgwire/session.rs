//! One connection: its own [`FedContext`] (its own `SET` values and
//! notices, the server's catalog), its settings and timeout, and how it
//! answers the simple and the extended query protocol.
//!
//! Every statement is classified ([`super::statement`]) and then either
//! answered by the connection (transactions, PostgreSQL settings) or run
//! through [`FedContext::sql`] and [`FedDataFrame::collect`] — the same
//! path as the REPL's, so a federated table is never read without the
//! exposure check and the split into encoder, merge and decoder. Without
//! `--allow-ddl` the connection's session carries a [`StatementGate`]:
//! `FedContext::sql` then refuses, from the plan it is about to run, every
//! COPY, DDL, DML and file-naming statement. Notices a
//! statement leaves (a model's summary, warnings) are sent as PostgreSQL
//! `NOTICE` messages, never as rows.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ParamValues;
use futures::{Sink, SinkExt, stream};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, METADATA_USER, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::response::NoticeResponse;

use super::statement::{self, FedKind, SessionStatement, Statement};
use super::{catalog, copy_out, encode, sqlstate};
use crate::coordinator::context::FedContext;
use crate::coordinator::dataframe::FedDataFrame;
use crate::coordinator::gate::StatementGate;
use crate::error::FedError;
use crate::notices::Notices;
use crate::protocol::site::Analyst;

/// What every connection of a server shares.
#[derive(Clone)]
pub(crate) struct ServerState {
    /// The server's context: its catalog (from the setup scripts) is every
    /// connection's catalog.
    pub ctx: FedContext,
    /// `--allow-ddl`.
    pub allow_ddl: bool,
    /// `--users`: then every user queries workers with their own token.
    pub users: Option<Arc<super::auth::Users>>,
}

/// One connection's session.
pub(crate) struct Connection {
    ctx: FedContext,
    allow_ddl: bool,
    settings: Mutex<Settings>,
    /// The connection's user, once its startup message is read: the
    /// analyst whose privacy budget the in-process tables' ledgers debit.
    user: Mutex<Option<String>>,
    /// `--users`: whose worker tokens the user's queries carry.
    users: Option<Arc<super::auth::Users>>,
}

/// `SET` values of PostgreSQL settings, and the statement timeout.
#[derive(Debug, Default)]
struct Settings {
    timeout: Option<Duration>,
    values: BTreeMap<String, String>,
}

impl Connection {
    /// A new session over the server's catalog: a context of its own (its
    /// own `SET datafusion.*` values and notices) sharing the catalog.
    pub(crate) fn new(server: &ServerState) -> Arc<Self> {
        let mut state = server.ctx.session().state();
        state
            .config_mut()
            .set_extension(Arc::new(Notices::default()));
        if !server.allow_ddl {
            state
                .config_mut()
                .set_extension(StatementGate::without_ddl());
        }
        if server.users.is_some() {
            // A round that finds no user's token refuses its workers.
            state
                .config_mut()
                .set_extension(Arc::new(crate::coordinator::analyst::UserTokensRequired));
        }
        Arc::new(Self {
            ctx: FedContext::from_state(state),
            allow_ddl: server.allow_ddl,
            settings: Mutex::new(Settings::default()),
            user: Mutex::new(None),
            users: server.users.clone(),
        })
    }

    fn timeout(&self) -> Option<Duration> {
        self.settings.lock().expect("not poisoned").timeout
    }

    /// Plans one statement: queries are planned (not run), so that their
    /// parameters and columns can be described.
    async fn prepare(&self, sql: &str) -> Result<Prepared, FedError> {
        let action = match statement::classify(sql, self.allow_ddl)? {
            Statement::Empty => Action::Empty,
            Statement::Session(SessionStatement::Show(name)) => Action::Show(name),
            Statement::Session(s) => Action::Session(s),
            Statement::Fed {
                sql,
                kind: FedKind::Command(tag),
            } => Action::Command { sql, tag },
            Statement::CopyOut(copy) => {
                let df = self.ctx.clone().sql(&copy.query).await?;
                let schema = df.schema().inner().clone();
                Action::CopyOut {
                    df: Box::new(df),
                    schema,
                    format: copy.format,
                }
            }
            Statement::Fed {
                sql,
                kind: FedKind::Query,
            } => {
                // Planning may already run rounds (EXPLAIN ANALYZE
                // FEDERATED, table functions): for this user's ledger.
                let ctx = self.ctx.clone();
                let df = ctx.sql(&sql).await?;
                let schema = df.schema().inner().clone();
                let params = parameter_types(&df)?;
                Action::Rows {
                    df: Box::new(df),
                    schema,
                    params,
                }
            }
        };
        Ok(Prepared { action })
    }

    /// Remembers the connection's user (from its startup message).
    ///
    /// The user is the analyst the session's statements run for (see
    /// [`crate::coordinator::analyst`]): the DP ledger an in-process site
    /// debits, and under `--users` the worker token every call carries (or,
    /// for a user without one, a refusal).
    fn know_user(&self, client: &impl ClientInfo) {
        let Some(user) = client.metadata().get(METADATA_USER) else {
            return;
        };
        let mut known = self.user.lock().expect("not poisoned");
        if known.as_ref() == Some(user) {
            return;
        }
        *known = Some(user.clone());
        let mut analyst = Analyst::named(user);
        if let Some(users) = &self.users {
            analyst = analyst.with_credential(users.worker_token(user));
        }
        self.ctx
            .session()
            .state_ref()
            .write()
            .config_mut()
            .set_extension(Arc::new(analyst));
    }

    /// Runs a prepared statement, with the statement timeout.
    async fn execute(
        &self,
        prepared: &Prepared,
        params: Option<ParamValues>,
    ) -> PgWireResult<Outcome> {
        let run = self.execute_untimed(prepared, params);
        match self.timeout() {
            None => run.await,
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(outcome) => outcome,
                Err(_) => Err(PgWireError::UserError(Box::new(sqlstate::info(
                    sqlstate::code::QUERY_CANCELED,
                    "canceling statement due to statement timeout",
                )))),
            },
        }
    }

    async fn execute_untimed(
        &self,
        prepared: &Prepared,
        params: Option<ParamValues>,
    ) -> PgWireResult<Outcome> {
        Ok(match &prepared.action {
            Action::Empty => Outcome::Empty,
            Action::Rows { df, schema, .. } => {
                let df = match params {
                    Some(params) => (**df)
                        .clone()
                        .map(|df| df.with_param_values(params))
                        .map_err(fed_error)?,
                    None => (**df).clone(),
                };
                let batches = run_apart(df.collect()).await?;
                Outcome::Rows {
                    schema: schema.clone(),
                    batches,
                }
            }
            Action::CopyOut { df, schema, format } => {
                let batches = run_apart((**df).clone().collect()).await?;
                let rows = copy_out::encode_rows(format, schema, &batches)?;
                Outcome::Tag(Response::CopyOut(CopyResponse::new(
                    0,
                    schema.fields().len(),
                    stream::iter(rows.into_iter().map(Ok)),
                )))
            }
            Action::Show(name) => {
                let value = self.show(name);
                let schema = show_schema(name);
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(StringArray::from(vec![value]))],
                )
                .map_err(|e| fed_error(e.into()))?;
                Outcome::Rows {
                    schema,
                    batches: vec![batch],
                }
            }
            Action::Command { sql, tag } => {
                let (ctx, sql) = (self.ctx.clone(), sql.clone());
                run_apart(async move { ctx.sql(&sql).await?.collect().await }).await?;
                Outcome::Tag(Response::Execution(Tag::new(tag)))
            }
            Action::Session(statement) => Outcome::Tag(self.run_session(statement)),
        })
    }

    fn run_session(&self, statement: &SessionStatement) -> Response {
        let mut settings = self.settings.lock().expect("not poisoned");
        match statement {
            SessionStatement::Begin => Response::TransactionStart(Tag::new("BEGIN")),
            SessionStatement::Commit => Response::TransactionEnd(Tag::new("COMMIT")),
            SessionStatement::Rollback => Response::TransactionEnd(Tag::new("ROLLBACK")),
            SessionStatement::Accept(tag) => Response::Execution(Tag::new(tag)),
            SessionStatement::Set { name, value } => {
                settings.values.insert(name.clone(), value.clone());
                Response::Execution(Tag::new("SET"))
            }
            SessionStatement::SetTimeout(timeout) => {
                settings.timeout = *timeout;
                Response::Execution(Tag::new("SET"))
            }
            SessionStatement::Reset(None) => {
                *settings = Settings::default();
                Response::Execution(Tag::new("RESET"))
            }
            SessionStatement::Reset(Some(name)) => {
                if name == "statement_timeout" {
                    settings.timeout = None;
                }
                settings.values.remove(name);
                Response::Execution(Tag::new("RESET"))
            }
            SessionStatement::Show(_) => unreachable!("SHOW is planned as rows"),
        }
    }

    /// The value `SHOW name` answers: what was `SET`, else PostgreSQL's
    /// defaults for what drivers ask.
    fn show(&self, name: &str) -> String {
        let settings = self.settings.lock().expect("not poisoned");
        if name == "statement_timeout" {
            return settings
                .timeout
                .map(|t| format!("{}ms", t.as_millis()))
                .unwrap_or_else(|| "0".into());
        }
        if let Some(value) = settings.values.get(name) {
            return value.clone();
        }
        match name {
            "server_version" => catalog::SERVER_VERSION.into(),
            "server_version_num" => "160006".into(),
            "server_encoding" | "client_encoding" => "UTF8".into(),
            "standard_conforming_strings" | "integer_datetimes" => "on".into(),
            "datestyle" => "ISO, MDY".into(),
            "timezone" => "UTC".into(),
            "intervalstyle" => "postgres".into(),
            "search_path" => "\"$user\", public".into(),
            "transaction isolation level" | "transaction_isolation" => "read committed".into(),
            "transaction_read_only" | "default_transaction_read_only" => "off".into(),
            "max_identifier_length" => "63".into(),
            "lc_collate" | "lc_ctype" => "C.UTF-8".into(),
            _ => String::new(),
        }
    }

    /// Runs the statements of a simple query, stopping at the first error
    /// (as PostgreSQL does); notices go out as they are left.
    async fn run_simple<C>(&self, client: &mut C, text: &str) -> PgWireResult<Vec<Response>>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = match crate::frontend::split::split_statements(text) {
            Ok(statements) => statements,
            Err(e) => return Ok(vec![error_response(&e)]),
        };
        let mut responses = Vec::with_capacity(statements.len());
        for sql in statements {
            let result = match self.prepare(&sql).await {
                Ok(prepared) => self.execute(&prepared, None).await,
                Err(e) => Err(fed_error(e)),
            };
            self.send_notices(client).await?;
            match result {
                Ok(outcome) => responses.push(outcome.into_response(&Format::UnifiedText)?),
                Err(e) => {
                    responses.push(Response::Error(Box::new(e.into())));
                    break;
                }
            }
        }
        Ok(responses)
    }

    async fn send_notices<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        for notice in self.ctx.take_notices() {
            let info = ErrorInfo::new("NOTICE".into(), "00000".into(), notice);
            client
                .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
                    info,
                )))
                .await?;
        }
        Ok(())
    }
}

/// A statement ready to run (what a `Parse` message leaves).
#[derive(Clone)]
pub(crate) struct Prepared {
    action: Action,
}

#[derive(Clone)]
enum Action {
    Empty,
    /// A planned query: its columns and the types of its `$n` parameters.
    Rows {
        df: Box<FedDataFrame>,
        schema: SchemaRef,
        params: Vec<Option<DataType>>,
    },
    /// `SHOW` of a PostgreSQL setting.
    Show(String),
    /// A statement run by `FedContext::sql` when executed (DDL, `SET datafusion.*`).
    Command {
        sql: String,
        tag: String,
    },
    /// A statement the connection answers.
    Session(SessionStatement),
    /// `COPY (query) TO STDOUT`: the planned query and how its rows are written.
    CopyOut {
        df: Box<FedDataFrame>,
        schema: SchemaRef,
        format: copy_out::CopyFormat,
    },
}

impl Prepared {
    fn schema(&self) -> Option<SchemaRef> {
        match &self.action {
            Action::Rows { schema, .. } if !schema.fields().is_empty() => Some(schema.clone()),
            Action::Show(name) => Some(show_schema(name)),
            _ => None,
        }
    }

    fn parameter_types(&self) -> &[Option<DataType>] {
        match &self.action {
            Action::Rows { params, .. } => params,
            _ => &[],
        }
    }
}

/// What running a statement gave.
enum Outcome {
    Empty,
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    Tag(Response),
}

impl Outcome {
    fn into_response(self, format: &Format) -> PgWireResult<Response> {
        Ok(match self {
            Outcome::Empty => Response::EmptyQuery,
            Outcome::Tag(response) => response,
            Outcome::Rows { schema, .. } if schema.fields().is_empty() => {
                Response::Execution(Tag::new("SELECT").with_rows(0))
            }
            Outcome::Rows { schema, batches } => {
                let fields = Arc::new(encode::row_description(&schema, format)?);
                let rows = encode::encode_batches(&fields, &schema, &batches)?;
                Response::Query(QueryResponse::new(
                    fields,
                    stream::iter(rows.into_iter().map(Ok)),
                ))
            }
        })
    }
}

fn show_schema(name: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]))
}

/// The types of a plan's `$1`, `$2`, ... (`None` where nothing tells).
fn parameter_types(df: &FedDataFrame) -> Result<Vec<Option<DataType>>, FedError> {
    let types = df.logical_plan().get_parameter_types()?;
    let count = types
        .keys()
        .filter_map(|k| k.strip_prefix('$')?.parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    Ok((1..=count)
        .map(|i| types.get(&format!("${i}")).cloned().flatten())
        .collect())
}

/// Runs a statement's work on a task of its own, so that the connection's
/// task stays free to notice a cancel request or the statement timeout
/// (and the server's other tasks are not queued behind a long query);
/// the work is aborted when its result is no longer awaited.
async fn run_apart<T: Send + 'static>(
    work: impl Future<Output = Result<T, FedError>> + Send + 'static,
) -> PgWireResult<T> {
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(tokio::spawn(work));
    match (&mut task.0).await {
        Ok(result) => result.map_err(fed_error),
        Err(e) => Err(PgWireError::UserError(Box::new(sqlstate::info(
            sqlstate::code::INTERNAL_ERROR,
            format!("the statement failed: {e}"),
        )))),
    }
}

fn fed_error(e: FedError) -> PgWireError {
    PgWireError::UserError(Box::new(sqlstate::error_info(&e)))
}

fn error_response(e: &FedError) -> Response {
    Response::Error(Box::new(sqlstate::error_info(e)))
}

#[async_trait]
impl SimpleQueryHandler for Connection {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.know_user(client);
        self.run_simple(client, query).await
    }
}

/// Plans the statements of `Parse` messages for one connection.
pub(crate) struct Planner {
    connection: Arc<Connection>,
}

#[async_trait]
impl QueryParser for Planner {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        self.connection.know_user(client);
        self.connection
            .prepare(sql)
            .await
            .map(Some)
            .map_err(fed_error)
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        stmt.parameter_types()
            .iter()
            .map(|t| match t {
                Some(t) => arrow_pg::datatypes::into_pg_type(t),
                None => Ok(Type::TEXT),
            })
            .collect()
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        match stmt.schema() {
            Some(schema) => {
                encode::row_description(&schema, column_format.unwrap_or(&Format::UnifiedText))
            }
            None => Ok(Vec::new()),
        }
    }
}

/// The extended query protocol of one connection.
pub(crate) struct Extended {
    planner: Arc<Planner>,
}

impl Extended {
    /// The extended protocol over a connection.
    pub(crate) fn new(connection: Arc<Connection>) -> Self {
        Self {
            planner: Arc::new(Planner { connection }),
        }
    }
}

/// The largest row limit of an `Execute` message taken as a limit.
const MAX_ROW_LIMIT: i32 = 1 << 20;

#[async_trait]
impl ExtendedQueryHandler for Extended {
    type Statement = Prepared;
    type QueryParser = Planner;

    fn query_parser(&self) -> Arc<Planner> {
        self.planner.clone()
    }

    /// As pgwire's own, with the row limit read as PostgreSQL reads it:
    /// zero or less is no limit. pgwire takes the limit as an unsigned
    /// count and reserves room for that many rows up front, so a negative
    /// limit panicked the connection (capacity overflow; found by the
    /// `pg_wire` fuzz target) and a limit of 2^31 − 1 would ask for tens
    /// of gigabytes; a limit past [`MAX_ROW_LIMIT`] is no limit either
    /// (every answer of fedsql is far smaller).
    async fn on_execute<C>(&self, client: &mut C, mut message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.max_rows <= 0 || message.max_rows > MAX_ROW_LIMIT {
            message.max_rows = 0;
        }
        self._on_execute(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let connection = &self.planner.connection;
        connection.know_user(client);
        let prepared = &portal.statement.statement;
        let params = if portal.parameter_len() == 0 {
            None
        } else {
            let types: Vec<Option<&DataType>> = prepared
                .parameter_types()
                .iter()
                .map(Option::as_ref)
                .collect();
            Some(arrow_pg::datatypes::df::deserialize_parameters(
                portal, &types,
            )?)
        };
        let outcome = connection.execute(prepared, params).await;
        connection.send_notices(client).await?;
        outcome?.into_response(&portal.result_column_format)
    }
}
