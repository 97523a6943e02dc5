//! `fedsql worker`: one site's tables served over Arrow Flight.
//!
//! A worker is run by the data owner. It holds a [`LocalClient`] per served
//! table and answers the calls of [`crate::remote::protocol`]. It decides
//! for itself what may leave: every plan it receives is decoded with a codec
//! that only knows its served tables and inline shared rows, then checked
//! *here*, whatever the coordinator checked —
//!
//! * every scan reads a table this worker serves (by name) or rows shipped
//!   with the plan; any other scan (a file path in a hand-crafted plan, a
//!   view, ...) is refused, and so are plan nodes that write or define
//!   anything (COPY, INSERT, DDL, extension nodes);
//! * the root is an aggregate whose input reaches the served table only
//!   through client-local operators, with bounded aggregates only — the
//!   same [`Encoder`] validation the coordinator runs ([`crate::exposure`]);
//! * the answer is the one-state-row-per-group batch the encoder makes.
//!
//! Every call must carry the worker's token (compared in constant time);
//! TLS (rustls) is used when a certificate and key are given. Each request
//! is logged to stderr: the peer, the table, the state released (aggregate
//! names, rows, bytes) and the rows it covers, or the refusal and its reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::SessionContext;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use super::codec::{self, InlineTable, TableBinder};
use super::protocol::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_RELEASE_FIT, ACTION_SECURE_SETUP, AUTHORIZATION,
    BEARER, EncodeMaskedRequest, EncodeRequest, HAS_ROWS_KEY, MAX_MESSAGE_BYTES, POSITIONAL_KEY,
    ReleaseFit, SecureSetupReply, SecureSetupRequest, SessionMessage, TicketCommand,
    batch_from_ipc, batch_to_ipc, public_key, ticket_command,
};
use crate::client::{self, ClientRunner, LocalClient};
use crate::encoder::Encoder;
use crate::error::{FedError, Result};
use crate::federated_table::{ClientFiles, FederatedTable, FileFormat, unify_schemas};
use crate::round;
use crate::secure::{MaskRequest, SecureSession};

/// Command-line arguments of `fedsql worker`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorkerArgs {
    /// Address to listen on, e.g. 127.0.0.1:50051 (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// A table to serve: NAME=PATH, the path a CSV or Parquet file or a
    /// folder of them. May be repeated.
    #[arg(long = "table", value_name = "NAME=PATH")]
    pub tables: Vec<String>,
    /// File holding the token every request must carry.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A TOML file with the same settings (`listen`, `token_file`,
    /// `tls_cert`, `tls_key`, and a `[tables]` section of name = "path");
    /// command-line flags take precedence.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key, the worker speaks TLS.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

/// The worker's TOML configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: Option<String>,
    token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    tables: BTreeMap<String, PathBuf>,
}

/// Where the worker's log lines go (stderr unless a test captures them).
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Everything a worker needs to start.
#[derive(Clone)]
pub struct WorkerConfig {
    pub listen: SocketAddr,
    /// Served tables: name and path (file or folder).
    pub tables: Vec<(String, PathBuf)>,
    pub token: String,
    /// PEM certificate chain and key, for TLS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Log sink; `None` writes to stderr.
    pub log: Option<LogSink>,
}

impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("listen", &self.listen)
            .field("tables", &self.tables)
            .field("token", &"<hidden>")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl WorkerConfig {
    /// A plain-text worker on `listen` serving `tables` with `token`.
    pub fn new(listen: SocketAddr, tables: Vec<(String, PathBuf)>, token: &str) -> Self {
        Self {
            listen,
            tables,
            token: token.to_string(),
            tls: None,
            log: None,
        }
    }

    /// The configuration the command line (and its `--config` file) gives.
    pub async fn from_args(args: &WorkerArgs) -> Result<Self> {
        let (file, base) = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    FedError::Plan(format!("cannot read worker config {}: {e}", path.display()))
                })?;
                let file: ConfigFile = toml::from_str(&text).map_err(|e| {
                    FedError::Syntax(format!("worker config {}: {e}", path.display()))
                })?;
                let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
                (file, base)
            }
            None => (ConfigFile::default(), PathBuf::new()),
        };
        // Paths in the config file are relative to its folder.
        let from_file = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
        let listen = args.listen.clone().or(file.listen).ok_or_else(|| {
            FedError::Syntax("fedsql worker needs --listen ADDR (or `listen` in --config)".into())
        })?;
        let listen = resolve(&listen).await?;
        let token_file = args
            .token_file
            .clone()
            .or_else(|| from_file(&file.token_file))
            .ok_or_else(|| {
                FedError::Syntax(
                    "fedsql worker needs --token-file FILE (or `token_file` in --config): every request must carry its token".into(),
                )
            })?;
        let token = read_token(&token_file)?;
        let mut tables: Vec<(String, PathBuf)> = file
            .tables
            .iter()
            .map(|(name, path)| (name.clone(), base.join(path)))
            .collect();
        for spec in &args.tables {
            let (name, path) = spec.split_once('=').ok_or_else(|| {
                FedError::Syntax(format!(
                    "--table {spec}: expected NAME=PATH, e.g. --table clinic=/data/clinic.parquet"
                ))
            })?;
            let name = name.trim();
            if name.is_empty() {
                return Err(FedError::Syntax(format!(
                    "--table {spec}: the name is empty"
                )));
            }
            if tables.iter().any(|(n, _)| n == name) {
                return Err(FedError::Syntax(format!("table `{name}` is given twice")));
            }
            tables.push((name.to_string(), PathBuf::from(path.trim())));
        }
        if tables.is_empty() {
            return Err(FedError::Syntax(
                "fedsql worker serves nothing: give --table NAME=PATH (or a [tables] section in --config)".into(),
            ));
        }
        let cert = args.tls_cert.clone().or_else(|| from_file(&file.tls_cert));
        let key = args.tls_key.clone().or_else(|| from_file(&file.tls_key));
        let tls = match (cert, key) {
            (Some(cert), Some(key)) => Some((
                read_file(&cert, "TLS certificate")?,
                read_file(&key, "TLS key")?,
            )),
            (None, None) => None,
            _ => {
                return Err(FedError::Syntax(
                    "TLS needs both --tls-cert and --tls-key".into(),
                ));
            }
        };
        Ok(Self {
            listen,
            tables,
            token,
            tls,
            log: None,
        })
    }
}

async fn resolve(listen: &str) -> Result<SocketAddr> {
    if let Ok(addr) = listen.parse() {
        return Ok(addr);
    }
    tokio::net::lookup_host(listen)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            FedError::Syntax(format!(
                "--listen {listen}: not an address to listen on (e.g. 127.0.0.1:50051)"
            ))
        })
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| FedError::Plan(format!("cannot read {what} {}: {e}", path.display())))
}

/// Reads a token file: its content without surrounding whitespace.
pub fn read_token(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FedError::Plan(format!("cannot read token file {}: {e}", path.display())))?;
    let token = text.trim().to_string();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(FedError::Plan(format!(
            "token file {} must hold one token of printable ASCII characters",
            path.display()
        )));
    }
    Ok(token)
}

/// One served table: its files, its own schema, and a local client per
/// column list coordinators read it with.
#[derive(Debug)]
pub struct ServedTable {
    name: String,
    files: ClientFiles,
    schema: SchemaRef,
    has_rows: bool,
    /// Clients by the schema they read with (the coordinator's unified schema).
    clients: Mutex<Vec<(SchemaRef, Arc<LocalClient>)>>,
}

/// How many column lists a served table keeps a client (and its fit cache) for.
const CLIENTS_PER_TABLE: usize = 8;

impl ServedTable {
    /// Opens a table: finds its files and reads their schemas.
    pub fn open(name: &str, path: &Path) -> Result<Self> {
        let files = ClientFiles::from_path(name, path, None)?;
        let observed = client::observe_schemas(&files)?;
        let schema = unify_schemas(name, &observed)?;
        Ok(Self {
            name: name.to_string(),
            has_rows: observed.iter().any(|o| o.has_rows),
            files,
            schema: Arc::new(schema),
            clients: Mutex::default(),
        })
    }

    fn positional(&self) -> bool {
        self.files.format == FileFormat::Csv
    }

    /// The schema a coordinator sees: with whether there are rows, and
    /// whether columns are read by position.
    fn advertised_schema(&self) -> Schema {
        let metadata = [
            (HAS_ROWS_KEY.to_string(), self.has_rows.to_string()),
            (POSITIONAL_KEY.to_string(), self.positional().to_string()),
        ];
        Schema::new(self.schema.fields().clone()).with_metadata(metadata.into_iter().collect())
    }

    /// The local client reading this table with `schema`, which must have
    /// this table's columns (in the same order, for CSV).
    fn client_for(&self, schema: &SchemaRef) -> Result<Arc<LocalClient>> {
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
        let client = Arc::new(LocalClient::from_files(&self.files, Arc::clone(schema))?);
        if clients.len() >= CLIENTS_PER_TABLE {
            clients.remove(0);
        }
        clients.push((Arc::clone(schema), Arc::clone(&client)));
        Ok(client)
    }
}

/// Binds federated table names in received plans to the served tables.
#[derive(Debug)]
struct Binder {
    tables: Arc<BTreeMap<String, Arc<ServedTable>>>,
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
        let client = table.client_for(&schema).map_err(refused)?;
        Ok(Arc::new(FederatedTable::new(
            name,
            schema,
            vec![client as Arc<dyn ClientRunner>],
        )))
    }
}

/// A plan that passed the worker's checks, bound to a served table.
struct Checked {
    encoder: Encoder,
    table: Arc<ServedTable>,
    client: Arc<LocalClient>,
}

/// The Flight service of a worker.
pub struct WorkerService {
    tables: Arc<BTreeMap<String, Arc<ServedTable>>>,
    token: Vec<u8>,
    /// Decodes plans (knows fedsql's functions) and plans encoders.
    session: SessionContext,
    log: LogSink,
}

impl WorkerService {
    /// A service over already opened tables.
    pub fn new(tables: Vec<ServedTable>, token: &str, log: Option<LogSink>) -> Self {
        let session = client::client_session();
        fedsql_udfs::register_all(&session);
        let log = log.unwrap_or_else(|| Arc::new(|line: &str| eprintln!("{line}")));
        Self {
            tables: Arc::new(
                tables
                    .into_iter()
                    .map(|t| (t.name.clone(), Arc::new(t)))
                    .collect(),
            ),
            token: token.as_bytes().to_vec(),
            session,
            log,
        }
    }

    fn log(&self, peer: &str, line: &str) {
        (self.log)(&format!("fedsql worker: peer {peer}: {line}"));
    }

    /// Refuses (and logs) a request.
    fn refuse(&self, peer: &str, call: &str, status: Status) -> Status {
        self.log(
            peer,
            &format!("{call} REFUSED ({:?}): {}", status.code(), status.message()),
        );
        status
    }

    /// Checks the request's token, in constant time.
    fn authorize<T>(&self, request: &Request<T>, call: &str) -> Result<String, Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let given = request
            .metadata()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix(BEARER));
        match given {
            None => Err(self.refuse(
                &peer,
                call,
                Status::unauthenticated("no token: send `authorization: Bearer <token>`"),
            )),
            Some(token) if bool::from(token.as_bytes().ct_eq(&self.token)) => Ok(peer),
            Some(_) => Err(self.refuse(&peer, call, Status::unauthenticated("wrong token"))),
        }
    }

    /// Decodes and checks a plan; see the module documentation.
    async fn check(&self, request: &EncodeRequest) -> Result<Checked, Status> {
        let binder: Arc<dyn TableBinder> = Arc::new(Binder {
            tables: Arc::clone(&self.tables),
        });
        let plan = codec::plan_from_bytes(&request.plan, &self.session.task_ctx(), binder)
            .map_err(|e| match e.find_root() {
                DataFusionError::External(inner) if inner.downcast_ref::<FedError>().is_some() => {
                    Status::permission_denied(inner.to_string())
                }
                _ => Status::invalid_argument(format!("not a plan this worker can read: {e}")),
            })?;
        check_nodes(&plan).map_err(|e| Status::permission_denied(e.to_string()))?;
        if !matches!(plan, LogicalPlan::Aggregate(_)) {
            return Err(Status::permission_denied(format!(
                "refused: the plan's root is `{}`, not an aggregate: a worker returns aggregate states only, never rows",
                plan.display()
            )));
        }
        let state = self.session.state();
        let round = round::plan_round(&state, &plan)
            .await
            .map_err(|e| match e {
                FedError::Refused { .. } => Status::permission_denied(e.to_string()),
                other => Status::invalid_argument(format!("refused: {other}")),
            })?;
        let encoder = round.encoder.in_fit(request.fit_scope);
        let federated = encoder.table();
        let table = self
            .tables
            .get(federated.name())
            .cloned()
            .ok_or_else(|| Status::internal("a bound table that is not served"))?;
        let client = table
            .client_for(&federated.schema())
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        Ok(Checked {
            encoder,
            table,
            client,
        })
    }

    fn decode_request(
        &self,
        peer: &str,
        call: &str,
        bytes: &[u8],
    ) -> Result<EncodeRequest, Status> {
        EncodeRequest::decode(bytes).map_err(|e| {
            self.refuse(
                peer,
                call,
                Status::invalid_argument(format!("malformed request: {e}")),
            )
        })
    }

    /// Checks and runs an encoder; logs the state it releases.
    async fn run_encoder(
        &self,
        peer: &str,
        request: EncodeRequest,
    ) -> Result<datafusion::arrow::record_batch::RecordBatch, Status> {
        let checked = match self.check(&request).await {
            Ok(checked) => checked,
            Err(status) => return Err(self.refuse(peer, "encode", status)),
        };
        let table = &checked.table.name;
        self.log(
            peer,
            &format!(
                "table={table}: running encoder [{}]",
                aggregate_names(checked.encoder.plan())
            ),
        );
        let (state, rows) = checked
            .client
            .encode_counted(&checked.encoder)
            .await
            .map_err(|e| {
                self.refuse(
                    peer,
                    &format!("encode table={table}"),
                    Status::internal(e.to_string()),
                )
            })?;
        let batch = state.batch().clone();
        self.log(
            peer,
            &format!(
                "table={table}: released {} state row(s) of [{}], {} bytes, covering {rows} row(s){}",
                batch.num_rows(),
                aggregate_names(checked.encoder.plan()),
                state.size_bytes(),
                request
                    .fit_scope
                    .map(|s| format!(" (fit {s})"))
                    .unwrap_or_default()
            ),
        );
        Ok(batch)
    }
}

impl WorkerService {
    /// Refuses (and logs) a request that does not decode.
    fn malformed(&self, peer: &str, call: &str, e: impl std::fmt::Display) -> Status {
        self.refuse(
            peer,
            call,
            Status::invalid_argument(format!("malformed request: {e}")),
        )
    }

    /// A secure-aggregation request's session, and its encoder checked as
    /// every encoder is.
    async fn check_secure(
        &self,
        peer: &str,
        call: &str,
        encode: Option<EncodeRequest>,
        session: Option<SessionMessage>,
    ) -> Result<(Checked, SecureSession), Status> {
        let encode = encode.ok_or_else(|| self.malformed(peer, call, "no encoder"))?;
        let session = session
            .ok_or_else(|| self.malformed(peer, call, "no session"))?
            .session()
            .map_err(|e| self.malformed(peer, call, e))?;
        let checked = self
            .check(&encode)
            .await
            .map_err(|s| self.refuse(peer, call, s))?;
        Ok((checked, session))
    }

    /// Secure aggregation, step 1: checks the encoder, runs it, keeps its
    /// state with a fresh key pair, and answers with the public key and
    /// the group keys.
    async fn secure_setup(&self, peer: &str, body: &[u8]) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_SETUP;
        let request =
            SecureSetupRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure(peer, call, request.encode, request.session)
            .await?;
        let setup = checked
            .client
            .secure_setup(&checked.encoder, &session)
            .await
            .map_err(|e| self.refuse(peer, call, Status::internal(e.to_string())))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: key pair made for [{}], {} group key(s) sent, state kept",
                checked.table.name,
                session.id_hex(),
                aggregate_names(checked.encoder.plan()),
                setup.group_keys.num_rows()
            ),
        );
        let group_keys =
            batch_to_ipc(&setup.group_keys).map_err(|e| Status::internal(e.to_string()))?;
        Ok(SecureSetupReply {
            public_key: setup.public_key.to_vec(),
            group_keys,
        }
        .encode_to_vec())
    }

    /// Secure aggregation, step 2: the kept state, aligned to the
    /// coordinator's groups and masked.
    async fn encode_masked(&self, peer: &str, body: &[u8]) -> Result<Vec<u8>, Status> {
        let call = ACTION_ENCODE_MASKED;
        let request =
            EncodeMaskedRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let public_keys = request
            .public_keys
            .iter()
            .map(|k| public_key(k))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| self.malformed(peer, call, e))?;
        let groups = batch_from_ipc(&request.groups).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure(peer, call, request.encode, request.session)
            .await?;
        let mask = MaskRequest {
            session,
            public_keys,
            groups,
        };
        let state = checked
            .client
            .encode_masked(&checked.encoder, &mask)
            .await
            .map_err(|e| self.refuse(peer, call, Status::internal(e.to_string())))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: released {} masked state row(s) of [{}], {} bytes",
                checked.table.name,
                mask.session.id_hex(),
                state.batch().num_rows(),
                aggregate_names(checked.encoder.plan()),
                state.size_bytes()
            ),
        );
        batch_to_ipc(state.batch()).map_err(|e| Status::internal(e.to_string()))
    }
}

type FlightStream<T> = BoxStream<'static, Result<T, Status>>;

#[tonic::async_trait]
impl FlightService for WorkerService {
    type HandshakeStream = FlightStream<HandshakeResponse>;
    type ListFlightsStream = FlightStream<FlightInfo>;
    type DoGetStream = FlightStream<FlightData>;
    type DoPutStream = FlightStream<PutResult>;
    type DoActionStream = FlightStream<arrow_flight::Result>;
    type ListActionsStream = FlightStream<ActionType>;
    type DoExchangeStream = FlightStream<FlightData>;

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let peer = self.authorize(&request, "GetSchema")?;
        let path = &request.get_ref().path;
        let table = match path.as_slice() {
            [name] => self.tables.get(name),
            _ => None,
        };
        let Some(table) = table else {
            return Err(self.refuse(
                &peer,
                "GetSchema",
                Status::not_found(format!(
                    "this worker serves no table {path:?} (it serves {})",
                    self.tables
                        .keys()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            ));
        };
        let schema = table.advertised_schema();
        let result = SchemaResult::try_from(SchemaAsIpc::new(&schema, &IpcWriteOptions::default()))
            .map_err(|e| Status::internal(e.to_string()))?;
        self.log(
            &peer,
            &format!(
                "table={}: schema ({} columns)",
                table.name,
                schema.fields().len()
            ),
        );
        Ok(Response::new(result))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let peer = self.authorize(&request, "DoGet")?;
        let command = TicketCommand::decode(request.get_ref().ticket.as_ref()).map_err(|e| {
            self.refuse(
                &peer,
                "DoGet",
                Status::invalid_argument(format!("malformed ticket: {e}")),
            )
        })?;
        let batch = match command.command {
            Some(ticket_command::Command::Encode(encode)) => {
                self.run_encoder(&peer, encode).await?
            }
            None => {
                return Err(self.refuse(
                    &peer,
                    "DoGet",
                    Status::invalid_argument("the ticket holds no command"),
                ));
            }
        };
        let stream = FlightDataEncoderBuilder::new()
            .build(futures::stream::once(async move { Ok(batch) }))
            .map_err(Status::from);
        Ok(Response::new(stream.boxed()))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let peer = self.authorize(&request, "DoAction")?;
        let action = request.into_inner();
        let body = match action.r#type.as_str() {
            ACTION_EXPLAIN => {
                let encode = self.decode_request(&peer, ACTION_EXPLAIN, &action.body)?;
                let checked = match self.check(&encode).await {
                    Ok(checked) => checked,
                    Err(status) => return Err(self.refuse(&peer, ACTION_EXPLAIN, status)),
                };
                let text = checked
                    .client
                    .explain(&checked.encoder)
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?;
                self.log(&peer, &format!("table={}: explain", checked.table.name));
                text.into_bytes()
            }
            ACTION_RELEASE_FIT => {
                let release = ReleaseFit::decode(action.body.as_ref()).map_err(|e| {
                    self.refuse(
                        &peer,
                        ACTION_RELEASE_FIT,
                        Status::invalid_argument(format!("malformed request: {e}")),
                    )
                })?;
                for table in self.tables.values() {
                    for (_, client) in table.clients.lock().expect("not poisoned").iter() {
                        client.release_fit(release.scope);
                    }
                }
                self.log(&peer, &format!("released fit {}", release.scope));
                Vec::new()
            }
            ACTION_SECURE_SETUP => self.secure_setup(&peer, &action.body).await?,
            ACTION_ENCODE_MASKED => self.encode_masked(&peer, &action.body).await?,
            other => {
                return Err(self.refuse(
                    &peer,
                    "DoAction",
                    Status::invalid_argument(format!(
                        "unknown action `{other}` (known: {ACTION_EXPLAIN}, {ACTION_RELEASE_FIT}, {ACTION_SECURE_SETUP}, {ACTION_ENCODE_MASKED})"
                    )),
                ));
            }
        };
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(
            futures::stream::once(async move { Ok(result) }).boxed(),
        ))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.authorize(&request, "ListActions")?;
        let actions = [
            (
                ACTION_EXPLAIN,
                "the physical plan an encoder would run here",
            ),
            (ACTION_RELEASE_FIT, "drop the rows kept for a fit"),
            (
                ACTION_SECURE_SETUP,
                "secure aggregation step 1: a session key pair and the group keys",
            ),
            (
                ACTION_ENCODE_MASKED,
                "secure aggregation step 2: the state, aligned and pairwise-masked",
            ),
        ]
        .map(|(name, description)| {
            Ok(ActionType {
                r#type: name.into(),
                description: description.into(),
            })
        });
        Ok(Response::new(futures::stream::iter(actions).boxed()))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(
            "handshake: send the token with every call instead",
        ))
    }

    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("a worker lists no flights"))
    }

    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(
            "a worker serves states through DoGet only",
        ))
    }

    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "a worker serves states through DoGet only",
        ))
    }

    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("a worker accepts no data"))
    }

    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented(
            "a worker serves states through DoGet only",
        ))
    }
}

/// A worker serving in the background of this process.
pub struct RunningWorker {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
}

impl RunningWorker {
    /// The address it listens on (with the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.handle).await;
    }

    /// Stops at once, as if the process died: open calls are cut.
    pub fn kill(&self) {
        self.handle.abort();
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Opens the tables and starts serving them.
pub async fn start(config: WorkerConfig) -> Result<RunningWorker> {
    let tables = config
        .tables
        .iter()
        .map(|(name, path)| ServedTable::open(name, path))
        .collect::<Result<Vec<_>>>()?;
    let service = WorkerService::new(tables, &config.token, config.log.clone());
    let incoming = TcpIncoming::bind(config.listen)
        .map_err(|e| FedError::Plan(format!("cannot listen on {}: {e}", config.listen)))?
        .with_nodelay(Some(true));
    let addr = incoming.local_addr()?;
    let mut builder = Server::builder();
    if let Some((cert, key)) = &config.tls {
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
            .map_err(|e| FedError::Plan(format!("TLS certificate or key not usable: {e}")))?;
    }
    let server = FlightServiceServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(builder.add_service(server).serve_with_incoming_shutdown(
        incoming,
        async {
            let _ = rx.await;
        },
    ));
    Ok(RunningWorker {
        addr,
        shutdown: Some(tx),
        handle,
    })
}

/// `fedsql worker ...`: serves until Ctrl-C.
pub async fn run_cli(args: &WorkerArgs) -> Result<()> {
    let config = WorkerConfig::from_args(args).await?;
    let names: Vec<String> = config
        .tables
        .iter()
        .map(|(n, p)| format!("{n}={}", p.display()))
        .collect();
    let tls = config.tls.is_some();
    let mut worker = start(config).await?;
    println!(
        "fedsql worker listening on {} ({}; tables: {})",
        worker.addr(),
        if tls { "TLS" } else { "plain text" },
        names.join(", ")
    );
    use std::io::Write;
    std::io::stdout().flush()?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        ended = &mut worker.handle => {
            return match ended {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(FedError::Plan(format!("the worker stopped: {e}"))),
                Err(e) => Err(FedError::Plan(format!("the worker stopped: {e}"))),
            };
        }
    }
    worker.shutdown().await;
    Ok(())
}

/// Refuses scans of anything but served tables and inline shared rows,
/// and plan nodes that write or define anything.
fn check_nodes(plan: &LogicalPlan) -> Result<()> {
    let mut refusal = None;
    plan.apply_with_subqueries(|node| {
        let problem = match node {
            LogicalPlan::TableScan(scan) => match source_as_provider(&scan.source) {
                Ok(p) if FederatedTable::from_provider(p.as_ref()).is_some() => None,
                Ok(p) if p.downcast_ref::<InlineTable>().is_some() => None,
                _ => Some(format!(
                    "the plan scans `{}`, which is not a table this worker serves",
                    scan.table_name
                )),
            },
            LogicalPlan::Copy(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Ddl(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Extension(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
            | LogicalPlan::DescribeTable(_) => Some(format!(
                "plan node `{}` is not allowed in an encoder",
                node.display()
            )),
            _ => None,
        };
        if let Some(problem) = problem {
            refusal = Some(FedError::refused(problem, None));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    refusal.map_or(Ok(()), Err)
}

/// The names of the aggregate functions at the plan's root, for the log.
fn aggregate_names(plan: &LogicalPlan) -> String {
    let LogicalPlan::Aggregate(agg) = plan else {
        return String::new();
    };
    let mut names = Vec::new();
    for expr in &agg.aggr_expr {
        let _ = expr.apply(|e| {
            if let Expr::AggregateFunction(f) = e {
                names.push(f.func.name().to_string());
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn config_file_and_flags_combine() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join("secret.txt"), "tok\n").unwrap();
        let config = dir.path().join("worker.toml");
        std::fs::write(
            &config,
            "listen = \"127.0.0.1:50051\"\ntoken_file = \"secret.txt\"\n[tables]\nclinic = \"data/clinic.parquet\"\n",
        )
        .unwrap();
        let args = WorkerArgs {
            config: Some(config.clone()),
            tables: vec!["visits=/srv/visits/".into()],
            ..Default::default()
        };
        let c = WorkerConfig::from_args(&args).await.unwrap();
        assert_eq!(c.listen, "127.0.0.1:50051".parse().unwrap());
        assert_eq!(c.token, "tok");
        assert_eq!(
            c.tables,
            [
                ("clinic".to_string(), dir.path().join("data/clinic.parquet")),
                ("visits".to_string(), PathBuf::from("/srv/visits/"))
            ]
        );
        // The flag wins over the file.
        let args = WorkerArgs {
            listen: Some("127.0.0.1:7".into()),
            ..args
        };
        assert_eq!(
            WorkerConfig::from_args(&args).await.unwrap().listen.port(),
            7
        );

        std::fs::write(&config, "listen = \"x\"\nport = 3\n").unwrap();
        let err = WorkerConfig::from_args(&WorkerArgs {
            config: Some(config),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("port"), "{err}");
        let err = WorkerConfig::from_args(&WorkerArgs {
            listen: Some("127.0.0.1:0".into()),
            token_file: Some(dir.path().join("secret.txt")),
            tables: vec!["no-equals-sign".into()],
            ..Default::default()
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("NAME=PATH"), "{err}");
    }
}
