//! The rounds: a query run as rounds of encode → merge → decode.
//!
//! The optimized plan is checked (see [`crate::protocol::exposure`]), then each *cut*
//! (an aggregate over the rows of a federated table) becomes one round,
//! lowest first: its [`Encoder`] runs at every client concurrently, the
//! clients' state batches are merged and decoded by the final aggregate on
//! the coordinator, and the cut is replaced in the plan by its (shared)
//! result. A later round may use an earlier round's result as shared input
//! (e.g. `WHERE age > (SELECT avg(age) FROM clinic)`). When no cut is left,
//! the rest of the plan — the decoder — is shared-only and runs on the
//! coordinator.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::{ExecutionPlan, collect};
use futures::future::try_join_all;

use crate::coordinator::analyst;
use crate::coordinator::merge::{StreamingMerge, merge_and_decode};
use crate::coordinator::secure::{collect_masked_states, round_threshold};
use crate::coordinator::split::{Round, lowest_cut, plan_round, shared_result, substitute};
use crate::error::{FedError, Result};
use crate::notices::{RoundEvent, RoundProgress};
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::site::{Analyst, Site, SiteRequest, Traffic};
use crate::protocol::{exposure, secure};

/// How many clients across a network a round runs at once: enough to keep
/// a network busy, few enough that a thousand clients do not hold a
/// thousand plans and streams at the same time.
const CLIENTS_AT_ONCE: usize = 64;

/// How many in-process clients a round runs at once, per core: their work
/// is the machine's own, and more at once only adds memory and switching
/// (1,000 clients: 1.62 s at 64 at once, 1.54 s at two per core).
const LOCAL_CLIENTS_PER_CORE: usize = 2;

/// How many of these clients a round runs at once.
fn clients_at_once(clients: &[Arc<dyn Site>]) -> usize {
    if clients.iter().all(|c| c.in_process()) {
        LOCAL_CLIENTS_PER_CORE * cores()
    } else {
        CLIENTS_AT_ONCE
    }
}

/// The cores this process may use, asked once: the standard library reads
/// the cgroup's CPU quota from three files on every call, a fixed cost
/// that a small round paid each time.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// What one round of a query did, for EXPLAIN and the communication figures.
#[derive(Debug, Clone)]
pub struct RoundReport {
    pub table: String,
    /// What each site computed: the encoder's aggregates and grouping.
    pub computes: String,
    /// Per client: name, state rows, state bytes, time.
    pub clients: Vec<(String, usize, usize, Duration)>,
    /// Per client, in the same order: the bytes sent and received.
    pub traffic: Vec<Traffic>,
    /// A secure round: who took part (and who dropped out).
    pub secure: Option<String>,
}

/// Every round run in a session while it carries this extension — those
/// of the query itself and those a model fit runs inside it — for
/// `EXPLAIN ANALYZE FEDERATED`.
#[derive(Debug, Default)]
pub(crate) struct RoundLog {
    reports: Mutex<Vec<RoundReport>>,
}

impl RoundLog {
    /// The rounds logged so far, in the order they ran.
    pub(crate) fn take(&self) -> Vec<RoundReport> {
        std::mem::take(&mut *self.reports.lock().expect("not poisoned"))
    }

    fn log(state: &SessionState, report: &RoundReport) {
        if let Some(log) = state.config().get_extension::<RoundLog>() {
            log.reports
                .lock()
                .expect("not poisoned")
                .push(report.clone());
        }
    }
}

/// What a round's encoder computes, in a line: its aggregate calls (with
/// their argument count) and its grouping.
pub(crate) fn computes(encoder: &Encoder) -> String {
    let LogicalPlan::Aggregate(agg) = encoder.plan() else {
        return encoder.plan().display().to_string();
    };
    let calls: Vec<String> = agg
        .aggr_expr
        .iter()
        .map(|e| {
            let mut call = e.schema_name().to_string();
            let _ = e.apply(|node| {
                if let Expr::AggregateFunction(f) = node {
                    let args = f.params.args.len();
                    call = match args {
                        0 => format!("{}()", f.func.name()),
                        1 if call.len() <= 40 => call.clone(),
                        n => format!("{}({n} args)", f.func.name()),
                    };
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            });
            call
        })
        .collect();
    let groups: Vec<String> = agg
        .group_expr
        .iter()
        .map(|g| g.schema_name().to_string())
        .collect();
    if groups.is_empty() {
        calls.join(", ")
    } else {
        format!("{} GROUP BY {}", calls.join(", "), groups.join(", "))
    }
}

/// Runs an optimized plan that touches federated tables.
pub(crate) async fn execute(
    state: &SessionState,
    plan: LogicalPlan,
) -> Result<(Vec<RecordBatch>, Vec<RoundReport>)> {
    exposure::check(&plan, "the query")?;
    let mut plan = plan;
    let mut reports = Vec::new();
    while let Some(cut) = lowest_cut(&plan) {
        let round = plan_round(state, &cut).await?;
        let (result, report) = run_round(state, &round).await?;
        RoundLog::log(state, &report);
        reports.push(report);
        plan = substitute(plan, &cut, shared_result(&cut, &result)?)?;
    }
    Ok((run_shared(state, &plan).await?, reports))
}

/// Runs what is left of a plan once every cut is replaced by its result:
/// the decoder, shared-only, on the coordinator.
async fn run_shared(state: &SessionState, plan: &LogicalPlan) -> Result<Vec<RecordBatch>> {
    let physical = state
        .query_planner()
        .create_physical_plan(plan, state)
        .await?;
    Ok(collect(physical, state.task_ctx()).await?)
}

/// A query of one round planned once, for a program that runs it many
/// times with a new config (the IRLS rounds of `glm`): the optimized plan,
/// its one cut and the cut's planned round.
pub(crate) struct PreparedQuery {
    plan: LogicalPlan,
    cut: LogicalPlan,
    round: Round,
}

impl PreparedQuery {
    /// Plans `plan` (optimized) when it has exactly one cut; `None` when
    /// it has none or several (run it with [`execute`] then).
    pub(crate) async fn plan(state: &SessionState, plan: LogicalPlan) -> Result<Option<Self>> {
        exposure::check(&plan, "the query")?;
        let Some(cut) = lowest_cut(&plan) else {
            return Ok(None);
        };
        let rest = substitute(plan.clone(), &cut, shared_result(&cut, &[])?)?;
        if lowest_cut(&rest).is_some() {
            return Ok(None);
        }
        let round = plan_round(state, &cut).await?;
        Ok(Some(Self { plan, cut, round }))
    }

    /// Runs the round, then the rest of the plan on its result.
    pub(crate) async fn run(&self, state: &SessionState) -> Result<Vec<RecordBatch>> {
        let (result, report) = run_round(state, &self.round).await?;
        RoundLog::log(state, &report);
        let plan = substitute(
            self.plan.clone(),
            &self.cut,
            shared_result(&self.cut, &result)?,
        )?;
        run_shared(state, &plan).await
    }

    /// The same query with the config text `old` replaced by `new` (see
    /// [`Round::rebound`]); `None` when it cannot be rebound.
    pub(crate) fn rebound(&self, old: &str, new: &str) -> Result<Option<Self>> {
        Ok(self.round.rebound(old, new)?.map(|round| Self {
            plan: self.plan.clone(),
            cut: self.cut.clone(),
            round,
        }))
    }
}

/// One client's own answer to the last cut of a query (see [`execute_per_client`]).
#[derive(Debug, Clone)]
pub struct ClientAnswer {
    pub client: String,
    /// The cut's output over this client's rows alone.
    pub batches: Vec<RecordBatch>,
}

/// Runs an optimized plan whose last cut is answered client by client, for
/// programs that weigh or sample clients (federated SGD): earlier cuts (the
/// subqueries of a source) run as usual; the last cut runs at the clients
/// that `choose` picks from the table's client names, and each client's
/// state is decoded on its own. Returns the cut's output per client, in the
/// order chosen; the rest of the plan above the cut is not run.
pub(crate) async fn execute_per_client(
    state: &SessionState,
    plan: LogicalPlan,
    choose: impl FnOnce(&[&str]) -> Result<Vec<usize>>,
) -> Result<Vec<ClientAnswer>> {
    let round = prepare_per_client(state, plan).await?;
    run_per_client(state, &round, choose).await
}

/// The planned last cut of a per-client query (see [`execute_per_client`]),
/// after running the cuts below it: a program that runs many such rounds
/// plans it once and rebinds its config ([`Round::rebound`]).
pub(crate) async fn prepare_per_client(state: &SessionState, plan: LogicalPlan) -> Result<Round> {
    exposure::check(&plan, "the query")?;
    let mut plan = plan;
    loop {
        let cut = lowest_cut(&plan).ok_or_else(|| {
            FedError::Internal("a per-client query must aggregate federated rows".into())
        })?;
        let round = plan_round(state, &cut).await?;
        let rest = substitute(plan.clone(), &cut, shared_result(&cut, &[])?)?;
        if lowest_cut(&rest).is_none() {
            return Ok(round);
        }
        let (result, report) = run_round(state, &round).await?;
        RoundLog::log(state, &report);
        plan = substitute(plan, &cut, shared_result(&cut, &result)?)?;
    }
}

/// Runs a planned round at the clients `choose` picks, each client's state
/// decoded on its own.
pub(crate) async fn run_per_client(
    state: &SessionState,
    round: &Round,
    choose: impl FnOnce(&[&str]) -> Result<Vec<usize>>,
) -> Result<Vec<ClientAnswer>> {
    let clients = round.table().clients();
    let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
    let chosen = choose(&names)?;
    let analyst = &analyst::of(state.config());
    let answers = try_join_all(chosen.into_iter().map(|i| async move {
        let client = clients
            .get(i)
            .ok_or_else(|| FedError::Internal(format!("client {i} chosen of {}", clients.len())))?;
        let start = Instant::now();
        let encoder = round.encoder_for(client.name())?;
        let (client_state, traffic) = client
            .encode_with_traffic(&SiteRequest::new(&encoder, analyst))
            .await?;
        let figures = (
            client.name().to_string(),
            client_state.batch().num_rows(),
            client_state.size_bytes(),
            start.elapsed(),
        );
        let decode = merge_and_decode(&round.partial, &[client_state])?;
        let answer = ClientAnswer {
            client: client.name().to_string(),
            batches: collect(decode, state.task_ctx()).await?,
        };
        Ok::<_, FedError>((answer, figures, traffic))
    }))
    .await?;
    RoundLog::log(
        state,
        &RoundReport {
            secure: None,
            table: round.table().name().to_string(),
            computes: computes(&round.encoder),
            clients: answers.iter().map(|(_, f, _)| f.clone()).collect(),
            traffic: answers.iter().map(|(_, _, t)| *t).collect(),
        },
    );
    Ok(answers.into_iter().map(|(a, _, _)| a).collect())
}

/// A round's clients, run by a few runners that each take the next client
/// until none is left (see [`run_round`]).
struct ClientsRun {
    clients: Vec<Arc<dyn Site>>,
    /// Per client, the encoder bound for it.
    encoders: Vec<Encoder>,
    /// Who the round runs for.
    analyst: Analyst,
    /// The next client to run.
    next: AtomicUsize,
    /// Where states are merged; `None` when they are kept (DP states).
    merge: Option<Arc<StreamingMerge>>,
    progress: Option<Arc<RoundProgress>>,
    /// Whether each state's bytes are measured: only for a round whose
    /// report is read (a [`RoundLog`] listens). Measuring encodes the
    /// state as it would cross a wire.
    measured: bool,
}

/// What one client answered: its index, its state's rows and bytes, its
/// time and traffic, and the state itself when it is kept rather than
/// merged.
type Answered = (usize, usize, usize, Duration, Traffic, Option<StateBatch>);

impl ClientsRun {
    /// Runs clients until none is left; stops at the first that fails.
    async fn run(self: Arc<Self>) -> Result<Vec<Answered>> {
        let mut answered = Vec::new();
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(client) = self.clients.get(i) else {
                return Ok(answered);
            };
            answered.push(self.run_one(i, client.as_ref()).await?);
        }
    }

    /// Runs client `i` and merges (or keeps) its state.
    async fn run_one(&self, i: usize, client: &dyn Site) -> Result<Answered> {
        let start = Instant::now();
        let request = SiteRequest::new(&self.encoders[i], &self.analyst);
        let (state, traffic) = if self.measured || !client.in_process() {
            client.encode_with_traffic(&request).await?
        } else {
            // Nothing crosses a wire, and no one asks what would have.
            (client.encode(&request).await?, Traffic::default())
        };
        let time = start.elapsed();
        if let Some(progress) = &self.progress {
            progress.report(RoundEvent::SiteAnswered);
        }
        let rows = state.batch().num_rows();
        let bytes = if self.measured { state.size_bytes() } else { 0 };
        let kept = match &self.merge {
            Some(merge) => {
                merge.add(i, &state).await?;
                None
            }
            None => Some(state),
        };
        Ok((i, rows, bytes, time, traffic, kept))
    }
}

/// A client's task that panicked or was cancelled, as an error.
fn join_error(e: tokio::task::JoinError) -> FedError {
    if e.is_panic() {
        FedError::Internal(format!("a client's encode panicked: {e}"))
    } else {
        FedError::Internal(format!("a client's encode was cancelled: {e}"))
    }
}

/// Runs one round: the encoder at every client, [`clients_at_once`] at a
/// time, each state merged as it arrives, then the decode.
///
/// Every site request carries the analyst the session runs for
/// ([`analyst::of`]): their DP ledger at in-process sites, their token at
/// workers (or, where the session requires a token of their own and they
/// have none, a refusal).
pub(crate) async fn run_round(
    state: &SessionState,
    round: &Round,
) -> Result<(Vec<RecordBatch>, RoundReport)> {
    let analyst = analyst::of(state.config());
    let table = round.table();
    // The REPL's progress line (sites answered / total), when one listens.
    let progress = state.config().get_extension::<RoundProgress>();
    let report = |event| {
        if let Some(progress) = &progress {
            progress.report(event);
        }
    };
    report(RoundEvent::Started {
        sites: table.clients().len(),
    });
    let clients = table.clients();
    // Masked states and DP states are merged at the end, all at once (the
    // noise notices read every state); the others as they arrive.
    let masked = secure::check_round(&round.partial)?;
    let dp = crate::protocol::dp::has_dp(&round.partial);
    let mut kept: Vec<StateBatch> = Vec::new();
    let mut secure_summary = None;
    // Into how many shares each site splits a DP call's noise under the
    // masks (the session's d: t, or t − c with peers, the least over the
    // sites): s survivors carry s/d draws.
    let mut shares = None;
    let mut figures: Vec<Option<(usize, usize, Duration, Traffic)>> = vec![None; clients.len()];
    let merge = Arc::new(StreamingMerge::new(
        &round.partial,
        clients.len(),
        state.task_ctx(),
    ));
    let encoders = clients
        .iter()
        .map(|c| round.encoder_for(c.name()))
        .collect::<Result<Vec<_>>>()?;
    if masked {
        // Every site must run the same encoder (each signs its digest): a
        // query that reads `_client` is one encoder per site, and would
        // give each site's sum on its own besides.
        if round.unbound_for_any_client() {
            return Err(FedError::InvalidArgument(
                "a secure aggregate cannot read _client: each site would run its own query (WHERE or GROUP BY _client picks out one site's sum), and the sites refuse to unmask a round whose queries differ\nhint: use plain aggregates for a per-client breakdown, or leave _client out".into(),
            ));
        }
        // Masked states: what arrives is the masked state itself; the
        // first survivor's carries the removal of the round's masks.
        let requested =
            match crate::coordinator::settings::fedsql_options_of(state).secure_threshold {
                0 => table.secure_threshold(),
                t => Some(t),
            };
        let threshold = round_threshold(clients, requested);
        shares = Some((
            crate::coordinator::secure::noise_shares(clients, threshold),
            threshold,
        ));
        let secure_round =
            collect_masked_states(clients, &encoders, &analyst, &round.partial, threshold).await?;
        if let Some(line) = secure_round.participation.notice()
            && let Some(notices) = state.config().get_extension::<crate::notices::Notices>()
        {
            notices.push(line);
        }
        secure_summary = Some(secure_round.participation.summary());
        for (i, masked_state, time) in secure_round.states {
            report(RoundEvent::SiteAnswered);
            let received = masked_state.size_bytes();
            let traffic = Traffic {
                sent: None,
                received,
            };
            figures[i] = Some((masked_state.batch().num_rows(), received, time, traffic));
            kept.push(masked_state);
        }
    } else {
        let run = Arc::new(ClientsRun {
            clients: clients.to_vec(),
            encoders,
            analyst,
            next: AtomicUsize::new(0),
            // DP states are merged at the end, all at once.
            merge: (!dp).then(|| Arc::clone(&merge)),
            progress: progress.clone(),
            measured: state.config().get_extension::<RoundLog>().is_some(),
        });
        // With more clients than run at once, the clients are run by
        // runner tasks of their own, so that in-process clients run on
        // every core: polled inside this one task, a thousand small
        // clients ran on one core at a time. Each runner takes the next
        // client until none is left and merges what it made, so a client
        // costs no wake-up of another thread. A few clients are polled
        // here, as a task costs a small round a wake-up of another thread.
        // The first failure ends the round, and dropping the round (a
        // failure, a cancelled query) aborts the runners. The analyst
        // travels in each request the runners make.
        let at_once = clients_at_once(clients);
        let spawn = clients.len() > at_once;
        let runs = (0..at_once.min(clients.len())).map(|_| {
            let work = Arc::clone(&run).run();
            async move {
                match spawn {
                    true => SpawnedTask::spawn(work).join().await.map_err(join_error)?,
                    false => work.await,
                }
            }
        });
        let mut dp_states = Vec::new();
        for (i, rows, bytes, time, traffic, dp_state) in
            try_join_all(runs).await?.into_iter().flatten()
        {
            figures[i] = Some((rows, bytes, time, traffic));
            dp_states.extend(dp_state.map(|s| (i, s)));
        }
        // In the order of the sites, as the merge of the others.
        dp_states.sort_by_key(|(i, _)| *i);
        kept.extend(dp_states.into_iter().map(|(_, s)| s));
    }
    let report = RoundReport {
        secure: secure_summary,
        table: table.name().to_string(),
        computes: computes(&round.encoder),
        clients: clients
            .iter()
            .zip(&figures)
            .filter_map(|(c, f)| {
                f.map(|(rows, bytes, time, _)| (c.name().to_string(), rows, bytes, time))
            })
            .collect(),
        traffic: figures.iter().flatten().map(|(_, _, _, t)| *t).collect(),
    };
    // The noise of each DP result, stated (the sites added it).
    if dp && let Some(notices) = state.config().get_extension::<crate::notices::Notices>() {
        for line in crate::coordinator::dp::noise_notices(&round.partial, &kept, shares)? {
            notices.push(line);
        }
    }
    let decode: Arc<dyn ExecutionPlan> = if masked || dp {
        merge_and_decode(&round.partial, &kept)?
    } else {
        merge.finish()?
    };
    Ok((collect(decode, state.task_ctx()).await?, report))
}
