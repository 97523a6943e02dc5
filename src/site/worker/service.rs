//! A worker's Flight service: each call authorized, every plan decoded and
//! checked here, whatever the coordinator checked, and every state it
//! releases logged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::error::{FedError, Result};
use crate::protocol::codec::{self, TableBinder};
use crate::protocol::encoder::Encoder;
use crate::protocol::flight::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_PRIVACY_BUDGET, ACTION_RELEASE_FIT,
    ACTION_SECURE_SETUP, EncodeMaskedRequest, EncodeRequest, POLICY_REFUSAL, ReleaseFit,
    SecureSetupReply, SecureSetupRequest, SessionMessage, TicketCommand, batch_from_ipc,
    batch_to_ipc, public_key, ticket_command,
};
use crate::protocol::secure::{MaskRequest, SecureSession, SignedKey};
use crate::protocol::site::{Analyst, BudgetLine, Site, SiteRequest};
use crate::site::local::{LocalClient, site_session};
use crate::site::release::policy::error_kind;
use crate::site::worker::checked_plans::CheckedPlans;
use crate::site::worker::config::RequestLimits;
use crate::site::worker::log::{LogSink, WorkerLog};
use crate::site::worker::tables::{Binder, ServedTable, check_scans};
pub(crate) use crate::site::worker::token_check::TokenCheck;
use crate::site::worker::token_check::bearer;
use crate::site::worker::tokens::{DEFAULT_ANALYST, Tokens};

/// A plan that passed the worker's checks, bound to a served table.
struct Checked {
    encoder: Encoder,
    table: Arc<ServedTable>,
    client: Arc<LocalClient>,
}

/// The Flight service of a worker.
pub struct WorkerService {
    tables: Arc<BTreeMap<String, Arc<ServedTable>>>,
    /// Every accepted token by analyst name (DP budgets are per analyst).
    tokens: Tokens,
    /// Decodes plans (knows fedsql's functions) and plans encoders: a
    /// snapshot of the worker's session, and its task context, made once.
    state: SessionState,
    task_ctx: Arc<TaskContext>,
    splits: CheckedPlans,
    log: WorkerLog,
    limits: RequestLimits,
}

impl WorkerService {
    /// A service over already opened tables.
    pub fn new(
        tables: Vec<ServedTable>,
        token: &str,
        log: Option<LogSink>,
        limits: RequestLimits,
    ) -> Self {
        let session = site_session();
        fedsql_udfs::register_all(&session);
        let log = WorkerLog::new(log);
        Self {
            tables: Arc::new(
                tables
                    .into_iter()
                    .map(|t| (t.name.clone(), Arc::new(t)))
                    .collect(),
            ),
            tokens: Tokens::new(token, &[]),
            task_ctx: session.task_ctx(),
            state: session.state(),
            splits: CheckedPlans::default(),
            log,
            limits,
        }
    }

    /// Runs one request's work under the worker's time limit. If the
    /// caller goes away first (it timed out, was cancelled or
    /// disconnected), tonic drops this future, which stops the work — the
    /// encoder's DataFusion tasks are aborted with it — and the log says so.
    async fn limited<T>(
        &self,
        peer: &str,
        call: &str,
        work: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let mut watch = CallWatch {
            log: self.log.clone(),
            peer: peer.to_string(),
            call: call.to_string(),
            started: Instant::now(),
            finished: false,
        };
        let result = match self.limits.timeout {
            None => work.await,
            Some(limit) => match tokio::time::timeout(limit, work).await {
                Ok(result) => result,
                Err(_) => Err(self.refuse(
                    peer,
                    call,
                    Status::resource_exhausted(format!(
                        "{POLICY_REFUSAL}the request ran longer than {limit:?} (its request_timeout)\nhint: use a narrower filter or fewer groups, or ask the data owner for a longer request_timeout"
                    )),
                )),
            },
        };
        watch.finished = true;
        result
    }

    /// The same service accepting these (named) tokens.
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// The analyst a request's token names (checked by [`Self::authorize`]).
    /// The request carries no other name: whatever a coordinator claims,
    /// the ledger is the token's.
    fn analyst<T>(&self, request: &Request<T>) -> Analyst {
        Analyst::named(
            bearer(request.metadata())
                .and_then(|t| self.tokens.analyst(t.as_bytes()))
                .unwrap_or(DEFAULT_ANALYST),
        )
    }

    fn log(&self, peer: &str, line: &str) {
        self.log.line(peer, line);
    }

    /// Refuses (and logs) a request.
    fn refuse(&self, peer: &str, call: &str, status: Status) -> Status {
        self.log.refuse(peer, call, status)
    }

    /// Checks the request's token, in constant time.
    fn authorize<T>(&self, request: &Request<T>, call: &str) -> Result<String, Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        match bearer(request.metadata()) {
            None => Err(self.refuse(
                &peer,
                call,
                Status::unauthenticated("no token: send `authorization: Bearer <token>`"),
            )),
            Some(token) if self.tokens.analyst(token.as_bytes()).is_some() => Ok(peer),
            Some(_) => Err(self.refuse(&peer, call, Status::unauthenticated("wrong token"))),
        }
    }

    /// Decodes and checks a plan; see the module documentation.
    async fn check(&self, request: &EncodeRequest) -> Result<Checked, Status> {
        let binder: Arc<dyn TableBinder> = Arc::new(Binder {
            tables: Arc::clone(&self.tables),
        });
        let plan = codec::plan_from_bytes(&request.plan, &self.task_ctx, binder).map_err(|e| {
            match e.find_root() {
                DataFusionError::External(inner) if inner.downcast_ref::<FedError>().is_some() => {
                    Status::permission_denied(inner.to_string())
                }
                _ => Status::invalid_argument(format!("not a plan this worker can read: {e}")),
            }
        })?;
        check_scans(&plan, self.limits.max_shared_rows)
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        let encoder = self
            .splits
            .split(&self.state, &plan)
            .await
            .map_err(|e| match e {
                FedError::Refused { .. } => Status::permission_denied(e.to_string()),
                other => Status::invalid_argument(format!("refused: {other}")),
            })?;
        let encoder = encoder.in_fit(request.fit_scope);
        let table = self
            .tables
            .get(encoder.table())
            .cloned()
            .ok_or_else(|| Status::internal("a bound table that is not served"))?;
        let client = table
            .client_for(&encoder.table_schema())
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
        (peer, analyst): (&str, &Analyst),
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
            .encode_counted(&SiteRequest::new(&checked.encoder, analyst))
            .await
            .map_err(|e| self.site_status(peer, &format!("encode table={table}"), table, e))?;
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
    /// How a site's error crosses the wire, refused and logged: a policy
    /// refusal as a refusal the coordinator can name (rule and hint), a
    /// plan refusal as it is; any other error as its kind and a reference
    /// to the full message in this worker's log — never data values, row
    /// text or the worker's paths.
    fn site_status(&self, peer: &str, call: &str, table: &str, e: FedError) -> Status {
        let status = match e {
            FedError::Policy { rule, hint, .. } => Status::permission_denied(format!(
                "{POLICY_REFUSAL}{rule}{}",
                hint.map(|h| format!("\nhint: {h}")).unwrap_or_default()
            )),
            refused @ FedError::Refused { .. } => Status::permission_denied(refused.to_string()),
            // Under a policy: the same words for every failure; the detail
            // stays in this worker's log, found by a reference that carries
            // nothing of the failure.
            FedError::Withheld { detail } => {
                let reference = format!("{:08x}", rand::random::<u32>());
                self.log(
                    peer,
                    &format!("error {reference} (table={table}): {detail}"),
                );
                Status::permission_denied(format!(
                    "refused: {} (reference {reference} in the worker's log)",
                    crate::error::EVALUATION_REFUSAL
                ))
            }
            other => {
                let full = other.to_string();
                let reference = format!("{:08x}", rand::random::<u32>());
                self.log(peer, &format!("error {reference} (table={table}): {full}"));
                Status::internal(format!(
                    "{} error in table `{table}` (reference {reference}: the full message is in the worker's log)",
                    error_kind(&full)
                ))
            }
        };
        self.refuse(peer, call, status)
    }

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

    /// The physical plan an encoder would run here, for `EXPLAIN FEDERATED`.
    async fn explain(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let encode = self.decode_request(peer, ACTION_EXPLAIN, body)?;
        let checked = match self.check(&encode).await {
            Ok(checked) => checked,
            Err(status) => return Err(self.refuse(peer, ACTION_EXPLAIN, status)),
        };
        let text = checked
            .client
            .explain(&SiteRequest::new(&checked.encoder, analyst))
            .await
            .map_err(|e| self.site_status(peer, ACTION_EXPLAIN, &checked.table.name, e))?;
        self.log(peer, &format!("table={}: explain", checked.table.name));
        Ok(text.into_bytes())
    }

    /// Secure aggregation, step 1: checks the encoder, runs it, keeps its
    /// state with a fresh key pair, and answers with the public key and
    /// the group keys.
    async fn secure_setup(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_SETUP;
        let request =
            SecureSetupRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure(peer, call, request.encode, request.session)
            .await?;
        let setup = checked
            .client
            .secure_setup(&SiteRequest::new(&checked.encoder, analyst), &session)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
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
            identity: setup
                .signed
                .map(|s| s.identity.to_vec())
                .unwrap_or_default(),
            signature: setup
                .signed
                .map(|s| s.signature.to_vec())
                .unwrap_or_default(),
        }
        .encode_to_vec())
    }

    /// Secure aggregation, step 2: the kept state, aligned to the
    /// coordinator's groups and masked.
    async fn encode_masked(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
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
        let signed = if request.identities.is_empty() && request.signatures.is_empty() {
            Vec::new()
        } else if request.identities.len() != public_keys.len()
            || request.signatures.len() != public_keys.len()
        {
            return Err(self.malformed(
                peer,
                call,
                "one identity and one signature per public key, or none",
            ));
        } else {
            request
                .identities
                .iter()
                .zip(&request.signatures)
                .map(|(identity, signature)| SignedKey::from_wire(identity, signature))
                .collect::<Result<Vec<_>>>()
                .map_err(|e| self.malformed(peer, call, e))?
        };
        let mask = MaskRequest {
            session,
            public_keys,
            signed,
            groups,
        };
        let state = checked
            .client
            .encode_masked(&SiteRequest::new(&checked.encoder, analyst), &mask)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
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
        let analyst = self.analyst(&request);
        let command = TicketCommand::decode(request.get_ref().ticket.as_ref()).map_err(|e| {
            self.refuse(
                &peer,
                "DoGet",
                Status::invalid_argument(format!("malformed ticket: {e}")),
            )
        })?;
        let batch = match command.command {
            Some(ticket_command::Command::Encode(encode)) => {
                self.limited(&peer, "DoGet", self.run_encoder((&peer, &analyst), encode))
                    .await?
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
        let analyst = self.analyst(&request);
        let action = request.into_inner();
        let body = match action.r#type.as_str() {
            ACTION_EXPLAIN => {
                self.limited(
                    &peer,
                    ACTION_EXPLAIN,
                    self.explain((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_RELEASE_FIT => {
                let release = ReleaseFit::decode(action.body.as_ref()).map_err(|e| {
                    self.refuse(
                        &peer,
                        ACTION_RELEASE_FIT,
                        Status::invalid_argument(format!("malformed request: {e}")),
                    )
                })?;
                // Only the session that started the fit knows its (random)
                // scope id: a release names nothing else's rows.
                let released = self
                    .tables
                    .values()
                    .filter(|table| table.release_fit(release.scope))
                    .count()
                    > 0;
                self.log(
                    &peer,
                    &if released {
                        format!("released fit {}", release.scope)
                    } else {
                        format!(
                            "release of fit {}: no rows kept under that id",
                            release.scope
                        )
                    },
                );
                Vec::new()
            }
            ACTION_SECURE_SETUP => {
                self.limited(
                    &peer,
                    ACTION_SECURE_SETUP,
                    self.secure_setup((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_PRIVACY_BUDGET => {
                let name = String::from_utf8_lossy(&action.body).to_string();
                let table = self.tables.get(&name).ok_or_else(|| {
                    self.refuse(
                        &peer,
                        ACTION_PRIVACY_BUDGET,
                        Status::not_found(format!("this worker serves no table `{name}`")),
                    )
                })?;
                let line = table.dp.budget_line(&name, analyst.name());
                self.log(
                    &peer,
                    &format!("table={name}: privacy budget of analyst {}", analyst.name()),
                );
                privacy_budget_body(&line).into_bytes()
            }
            ACTION_ENCODE_MASKED => {
                self.limited(
                    &peer,
                    ACTION_ENCODE_MASKED,
                    self.encode_masked((&peer, &analyst), &action.body),
                )
                .await?
            }
            other => {
                return Err(self.refuse(
                    &peer,
                    "DoAction",
                    Status::invalid_argument(format!(
                        "unknown action `{other}` (known: {ACTION_EXPLAIN}, {ACTION_RELEASE_FIT}, {ACTION_SECURE_SETUP}, {ACTION_ENCODE_MASKED}, {ACTION_PRIVACY_BUDGET})"
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

/// Logs a call whose future was dropped before it finished: its caller
/// went away (timed out, cancelled, disconnected) and its work stopped.
struct CallWatch {
    log: WorkerLog,
    peer: String,
    call: String,
    started: Instant,
    finished: bool,
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        if !self.finished {
            self.log.line(
                &self.peer,
                &format!(
                    "{} CANCELLED after {} ms: the caller went away; its work here was stopped",
                    self.call,
                    self.started.elapsed().as_millis()
                ),
            );
        }
    }
}

/// The reply of [`ACTION_PRIVACY_BUDGET`]: `<budget or unlimited> <spent>`.
fn privacy_budget_body(line: &BudgetLine) -> String {
    format!(
        "{} {}",
        line.budget
            .map_or_else(|| "unlimited".to_string(), |b| b.to_string()),
        line.spent
    )
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
