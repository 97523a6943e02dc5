//! What every call of a worker's Flight service goes through: the
//! service's state ([`WorkerService`]), authorization, the request limits
//! (a call that runs past them, or whose caller goes away, is stopped and
//! logged), and the checks and run of a received encoder.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan};
use prost::Message;
use tonic::{Request, Status};

use super::audited::{Described, Outcome, describe};
use crate::error::{FedError, Result};
use crate::protocol::codec::{self, TableBinder};
use crate::protocol::encoder::Encoder;
use crate::protocol::flight::{EncodeRequest, POLICY_REFUSAL};
use crate::protocol::site::{Analyst, SiteRequest};
use crate::site::local::{LocalClient, site_session};
use crate::site::worker::approvals::{Approvals, Decision};
use crate::site::worker::audit::{AuditEntry, AuditLog, now_rfc3339};
use crate::site::worker::checked_plans::CheckedPlans;
use crate::site::worker::config::ALL_TABLES;
use crate::site::worker::config::RequestLimits;
use crate::site::worker::fit_connections::FitConnections;
use crate::site::worker::log::{LogSink, WorkerLog};
use crate::site::worker::metrics::Metrics;
use crate::site::worker::profiles::Profiles;
use crate::site::worker::tables::{Binder, ServedTable, check_scans};
use crate::site::worker::token_check::bearer;
use crate::site::worker::tokens::{DEFAULT_ANALYST, Tokens};

/// A plan that passed the worker's checks, bound to a served table.
pub(super) struct Checked {
    pub(super) encoder: Encoder,
    pub(super) table: Arc<ServedTable>,
    pub(super) client: Arc<LocalClient>,
}

/// The Flight service of a worker.
pub struct WorkerService {
    pub(super) tables: Arc<BTreeMap<String, Arc<ServedTable>>>,
    /// Every accepted token by analyst name (DP budgets are per analyst).
    pub(super) tokens: Tokens,
    /// Decodes plans (knows fedsql's functions) and plans encoders: a
    /// snapshot of the worker's session, and its task context, made once.
    pub(super) state: SessionState,
    pub(super) task_ctx: Arc<TaskContext>,
    pub(super) splits: CheckedPlans,
    pub(super) log: WorkerLog,
    pub(super) limits: RequestLimits,
    /// The audit trail; `None`: not kept.
    pub(super) audit: Option<Arc<AuditLog>>,
    /// Analyst profiles, and the tables opened under a profile's stricter
    /// policy or DP settings (by profile name).
    pub(super) profiles: Profiles,
    pub(super) profile_tables: BTreeMap<String, Arc<BTreeMap<String, Arc<ServedTable>>>>,
    /// Manual approval: the approvals file, and the tables that need it
    /// for everyone ([`ALL_TABLES`]: every table).
    pub(super) approvals: Option<Arc<Approvals>>,
    pub(super) approval_tables: BTreeSet<String>,
    /// Requests by decision, bytes released, durations (`/metrics`).
    pub(super) metrics: Arc<Metrics>,
    /// The fits each open connection sent rounds of (their kept rows are
    /// dropped when it closes).
    pub(super) fits: Arc<FitConnections>,
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
            audit: None,
            profiles: Profiles::default(),
            profile_tables: BTreeMap::new(),
            approvals: None,
            approval_tables: BTreeSet::new(),
            metrics: Arc::default(),
            fits: Arc::default(),
        }
    }

    /// The registry of the connections that sent a fit's rounds (the
    /// worker's accepted connections report to it when they close).
    pub(crate) fn fit_connections(&self) -> Arc<FitConnections> {
        Arc::clone(&self.fits)
    }

    /// Drops what every table kept for fit `scope`; says whether any
    /// rows were kept for it.
    pub(crate) fn release_fit(&self, scope: u64) -> bool {
        self.every_table()
            .filter(|table| table.release_fit(scope))
            .count()
            > 0
    }

    /// How many fits' rows the worker keeps now (`/metrics`).
    pub(crate) fn kept_fits(&self) -> usize {
        self.every_table().map(|table| table.kept_fits()).sum()
    }

    /// The same service under analyst profiles; `tables`: the served
    /// tables opened under a profile's own policy, by profile name.
    pub fn with_profiles(
        mut self,
        profiles: Profiles,
        tables: BTreeMap<String, Vec<ServedTable>>,
    ) -> Self {
        self.profiles = profiles;
        self.profile_tables = tables
            .into_iter()
            .map(|(name, tables)| {
                let tables = tables
                    .into_iter()
                    .map(|t| (t.name.clone(), Arc::new(t)))
                    .collect();
                (name, Arc::new(tables))
            })
            .collect();
        self
    }

    /// The same service holding new requests of `tables` (and of profiles
    /// that say so) for the data owner's approval in `approvals`.
    pub fn with_approvals(
        mut self,
        approvals: Option<Arc<Approvals>>,
        tables: BTreeSet<String>,
    ) -> Self {
        self.approvals = approvals;
        self.approval_tables = tables;
        self
    }

    /// The tables as `analyst` reaches them: opened under their profile's
    /// own policy where it has one.
    pub(super) fn tables_of(&self, analyst: &Analyst) -> Arc<BTreeMap<String, Arc<ServedTable>>> {
        self.profiles
            .of(analyst.name())
            .and_then(|p| self.profile_tables.get(&p.name))
            .map_or_else(|| Arc::clone(&self.tables), Arc::clone)
    }

    /// Every opened table, the profiles' own included (for releasing a fit).
    pub(super) fn every_table(&self) -> impl Iterator<Item = &Arc<ServedTable>> {
        self.tables
            .values()
            .chain(self.profile_tables.values().flat_map(|t| t.values()))
    }

    /// Whether `analyst`'s new requests over `table` wait for approval.
    fn needs_approval(&self, analyst: &Analyst, table: &str) -> bool {
        self.approval_tables.contains(table)
            || self.approval_tables.contains(ALL_TABLES)
            || self
                .profiles
                .of(analyst.name())
                .is_some_and(|p| p.manual_approval)
    }

    /// Manual approval: `Ok` when the request may run; otherwise the
    /// refusal (pending or denied) and whether it is pending.
    pub(super) fn approval(
        &self,
        analyst: &Analyst,
        table: &str,
        described: &Described,
    ) -> Result<(), (Status, bool)> {
        if !self.needs_approval(analyst, table) {
            return Ok(());
        }
        let Some(approvals) = &self.approvals else {
            return Err((
                Status::internal(
                    "this worker holds requests for approval but has no approvals file",
                ),
                false,
            ));
        };
        match approvals.decide(analyst.name(), table, &described.fingerprint, &described.request) {
            Ok(Decision::Approved) => Ok(()),
            Ok(Decision::Pending(id)) => Err((
                Status::permission_denied(
                    FedError::refused(
                        format!("request {id} awaits the data owner's approval at this site (approval = \"manual\")"),
                        Some(&format!("ask the data owner to approve request {id} (`fedsql approvals approve {id}` or the admin page), then run the query again")),
                    )
                    .to_string(),
                ),
                true,
            )),
            Ok(Decision::Denied(id)) => Err((
                Status::permission_denied(
                    FedError::refused(
                        format!("request {id} was denied by the data owner at this site"),
                        Some("ask the data owner why, or change the query"),
                    )
                    .to_string(),
                ),
                false,
            )),
            Err(e) => Err((
                Status::unavailable(format!(
                    "this worker cannot read or write its approvals file: {e}"
                )),
                false,
            )),
        }
    }

    /// Runs one request's work under the worker's time limit. If the
    /// caller goes away first (it timed out, was cancelled or
    /// disconnected), tonic drops this future, which stops the work — the
    /// encoder's DataFusion tasks are aborted with it — and the log says so.
    pub(super) async fn limited<T>(
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
        // A panic while answering (a bug, e.g. an assertion in a library
        // on input nothing checked before) fails this request only, as an
        // internal error; what panicked goes to the worker's log, not to
        // the coordinator.
        let work = async {
            use futures::FutureExt;
            match std::panic::AssertUnwindSafe(work).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => {
                    let what = crate::error::panic_message(panic.as_ref());
                    self.log(
                        peer,
                        &format!("{call}: failed on an internal error: {what}"),
                    );
                    Err(Status::internal(
                        "the worker failed on an internal error while answering (logged at the worker); nothing was released",
                    ))
                }
            }
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

    /// The same service recording every encoder run in `audit`.
    pub fn with_audit(mut self, audit: Option<Arc<AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// The same service accepting these (named) tokens.
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// The analyst a request's token names (checked by [`Self::authorize`]).
    /// The request carries no other name: whatever a coordinator claims,
    /// the ledger is the token's.
    pub(super) fn analyst<T>(&self, request: &Request<T>) -> Analyst {
        Analyst::named(
            bearer(request.metadata())
                .and_then(|t| self.tokens.analyst(t.as_bytes()))
                .unwrap_or(DEFAULT_ANALYST),
        )
    }

    pub(crate) fn log(&self, peer: &str, line: &str) {
        self.log.line(peer, line);
    }

    /// Refuses (and logs) a request.
    pub(super) fn refuse(&self, peer: &str, call: &str, status: Status) -> Status {
        self.log.refuse(peer, call, status)
    }

    /// Checks the request's token, in constant time.
    pub(super) fn authorize<T>(&self, request: &Request<T>, call: &str) -> Result<String, Status> {
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
    pub(super) async fn check(
        &self,
        request: &EncodeRequest,
        analyst: &Analyst,
    ) -> Result<Checked, Status> {
        let tables = self.tables_of(analyst);
        let binder: Arc<dyn TableBinder> = Arc::new(Binder {
            tables: Arc::clone(&tables),
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
        let table = tables
            .get(encoder.table())
            .cloned()
            .ok_or_else(|| Status::internal("a bound table that is not served"))?;
        if let Some(profile) = self.profiles.of(analyst.name()) {
            profile
                .check(&table.name, encoder.plan())
                .map_err(|e| Status::permission_denied(e.to_string()))?;
        }
        let client = table
            .client_for(&encoder.table_schema())
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        Ok(Checked {
            encoder,
            table,
            client,
        })
    }

    pub(super) fn decode_request(
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

    /// Checks and runs an encoder; logs the state it releases and records
    /// the request in the audit trail before the answer leaves.
    pub(super) async fn run_encoder(
        &self,
        (peer, analyst): (&str, &Analyst),
        request: EncodeRequest,
    ) -> Result<datafusion::arrow::record_batch::RecordBatch, Status> {
        let started = Instant::now();
        let who = (peer, analyst);
        let checked = match self.check(&request, analyst).await {
            Ok(checked) => checked,
            Err(status) => {
                let status = self.refuse(peer, "encode", status);
                self.record(
                    who,
                    started,
                    Outcome {
                        refusal: Some(&status),
                        ..Outcome::default()
                    },
                )?;
                return Err(status);
            }
        };
        let table = &checked.table.name;
        let described = describe(checked.encoder.plan(), request.fit_scope.is_some());
        if let Err((status, pending)) = self.approval(analyst, table, &described) {
            let status = self.refuse(peer, "encode", status);
            self.record(
                who,
                started,
                Outcome {
                    table,
                    described: Some(&described),
                    refusal: Some(&status),
                    pending,
                    ..Outcome::default()
                },
            )?;
            return Err(status);
        }
        self.log(
            peer,
            &format!(
                "table={table}: running encoder [{}]",
                aggregate_names(checked.encoder.plan())
            ),
        );
        let spent_before = checked.table.dp.budget_line(table, analyst.name()).spent;
        let encoded = checked
            .client
            .encode_counted(&SiteRequest::new(&checked.encoder, analyst))
            .await;
        let epsilon =
            (checked.table.dp.budget_line(table, analyst.name()).spent - spent_before).max(0.0);
        let (state, rows) = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                let status = self.site_status(peer, &format!("encode table={table}"), table, e);
                self.record(
                    who,
                    started,
                    Outcome {
                        table,
                        described: Some(&described),
                        refusal: Some(&status),
                        epsilon,
                        ..Outcome::default()
                    },
                )?;
                return Err(status);
            }
        };
        let batch = state.batch().clone();
        self.record(
            who,
            started,
            Outcome {
                table,
                described: Some(&described),
                refusal: None,
                groups: batch.num_rows() as u64,
                rows,
                epsilon,
                bytes: state.size_bytes() as u64,
                pending: false,
            },
        )?;
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
    /// Records one request; an error (the file cannot be written) is the
    /// refusal the caller gets instead of the answer.
    pub(super) fn record(
        &self,
        (peer, analyst): (&str, &Analyst),
        started: Instant,
        outcome: Outcome<'_>,
    ) -> Result<(), Status> {
        let decision = if outcome.pending {
            "pending"
        } else if outcome.refusal.is_some() {
            "refused"
        } else {
            "released"
        };
        self.metrics
            .observe(decision, outcome.bytes, started.elapsed().as_secs_f64());
        let Some(audit) = &self.audit else {
            return Ok(());
        };
        let entry = AuditEntry {
            time: now_rfc3339(),
            analyst: analyst.name().to_string(),
            peer: peer.to_string(),
            table: outcome.table.to_string(),
            request: outcome
                .described
                .map(|d| d.request.clone())
                .unwrap_or_default(),
            fingerprint: outcome
                .described
                .map(|d| d.fingerprint.clone())
                .unwrap_or_default(),
            decision: decision.to_string(),
            rule: outcome.refusal.map(|status| {
                status
                    .message()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string()
            }),
            groups: outcome.groups,
            rows: outcome.rows,
            epsilon: outcome.epsilon,
            bytes: outcome.bytes,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        audit.append(entry).map_err(|e| {
            self.refuse(
                peer,
                "audit",
                Status::unavailable(format!(
                    "this worker answers no request it cannot audit: {e}\nhint: ask the data owner to check the worker's --audit-log file and disk"
                )),
            )
        })
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

/// The names of the aggregate functions at the plan's root, for the log.
pub(super) fn aggregate_names(plan: &LogicalPlan) -> String {
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

impl crate::site::worker::fit_connections::FitReleaser for WorkerService {
    fn release_fit(&self, scope: u64) -> bool {
        WorkerService::release_fit(self, scope)
    }

    fn log(&self, peer: &str, line: &str) {
        WorkerService::log(self, peer, line)
    }
}
