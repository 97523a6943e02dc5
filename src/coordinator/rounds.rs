//! The rounds: a query run as rounds of encode → merge → decode.
//!
//! The optimized plan is checked (see [`crate::wire::exposure`]), then each *cut*
//! (an aggregate over the rows of a federated table) becomes one round,
//! lowest first: its [`Encoder`] runs at every client concurrently, the
//! clients' state batches are merged and decoded by the final aggregate on
//! the coordinator, and the cut is replaced in the plan by its (shared)
//! result. A later round may use an earlier round's result as shared input
//! (e.g. `WHERE age > (SELECT avg(age) FROM clinic)`). When no cut is left,
//! the rest of the plan — the decoder — is shared-only and runs on the
//! coordinator.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::{ExecutionPlan, collect};
use futures::future::try_join_all;

use crate::coordinator::merge::merge_and_decode;
use crate::coordinator::secure::collect_masked_states;
use crate::coordinator::split::{Round, lowest_cut, plan_round, shared_result, substitute};
use crate::error::{FedError, Result};
use crate::notices::{RoundEvent, RoundProgress};
use crate::site::runner::{ClientRunner, Traffic};
use crate::wire::encoder::{Encoder, StateBatch};
use crate::wire::{exposure, secure};

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
}

/// Every round run in a session while it carries this extension — those
/// of the query itself and those a model fit runs inside it — for
/// `EXPLAIN ANALYZE FEDERATED`.
#[derive(Debug, Default)]
pub struct RoundLog {
    reports: Mutex<Vec<RoundReport>>,
}

impl RoundLog {
    /// The rounds logged so far, in the order they ran.
    pub fn take(&self) -> Vec<RoundReport> {
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
pub fn computes(encoder: &Encoder) -> String {
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
pub async fn execute(
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
    let physical = state
        .query_planner()
        .create_physical_plan(&plan, state)
        .await?;
    Ok((collect(physical, state.task_ctx()).await?, reports))
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
pub async fn execute_per_client(
    state: &SessionState,
    plan: LogicalPlan,
    choose: impl FnOnce(&[&str]) -> Result<Vec<usize>>,
) -> Result<Vec<ClientAnswer>> {
    exposure::check(&plan, "the query")?;
    let mut plan = plan;
    loop {
        let cut = lowest_cut(&plan).ok_or_else(|| {
            FedError::Internal("a per-client query must aggregate federated rows".into())
        })?;
        let round = plan_round(state, &cut).await?;
        let rest = substitute(plan.clone(), &cut, shared_result(&cut, &[])?)?;
        if lowest_cut(&rest).is_some() {
            let (result, report) = run_round(state, &round).await?;
            RoundLog::log(state, &report);
            plan = substitute(plan, &cut, shared_result(&cut, &result)?)?;
            continue;
        }
        let clients = round.table().clients();
        let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
        let chosen = choose(&names)?;
        let answers = try_join_all(chosen.into_iter().map(|i| {
            let round = &round;
            async move {
                let client = clients.get(i).ok_or_else(|| {
                    FedError::Internal(format!("client {i} chosen of {}", clients.len()))
                })?;
                let start = Instant::now();
                let encoder = round.encoder_for(client.name())?;
                let (client_state, traffic) = encode_retrying(client.as_ref(), &encoder).await?;
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
            }
        }))
        .await?;
        RoundLog::log(
            state,
            &RoundReport {
                table: round.table().name().to_string(),
                computes: computes(&round.encoder),
                clients: answers.iter().map(|(_, f, _)| f.clone()).collect(),
                traffic: answers.iter().map(|(_, _, t)| *t).collect(),
            },
        );
        return Ok(answers.into_iter().map(|(a, _, _)| a).collect());
    }
}

/// One client's encode, tried once more when a client across a network
/// fails with anything but a refusal (a worker restarted, a connection
/// dropped): its connection is remade and the same encoder sent again.
async fn encode_retrying(
    client: &dyn ClientRunner,
    encoder: &Encoder,
) -> Result<(StateBatch, Traffic)> {
    match client.encode_with_traffic(encoder).await {
        Err(FedError::Client { .. }) if client.retries() => {
            client.encode_with_traffic(encoder).await
        }
        other => other,
    }
}

/// Runs one round: the encoder at every client at once, then merge + decode.
pub async fn run_round(
    state: &SessionState,
    round: &Round,
) -> Result<(Vec<RecordBatch>, RoundReport)> {
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
    let states: Vec<(StateBatch, Duration, Traffic)> = if secure::check_round(&round.partial)? {
        // Masked states: what arrives is the masked state itself.
        let encoders = table
            .clients()
            .iter()
            .map(|c| round.encoder_for(c.name()))
            .collect::<Result<Vec<_>>>()?;
        collect_masked_states(table.clients(), &encoders)
            .await?
            .into_iter()
            .map(|(state, time)| {
                report(RoundEvent::SiteAnswered);
                let received = state.size_bytes();
                (
                    state,
                    time,
                    Traffic {
                        sent: None,
                        received,
                    },
                )
            })
            .collect()
    } else {
        try_join_all(table.clients().iter().map(|client| async {
            let start = Instant::now();
            let encoder = round.encoder_for(client.name())?;
            let (state, traffic) = encode_retrying(client.as_ref(), &encoder).await?;
            report(RoundEvent::SiteAnswered);
            Ok::<_, FedError>((state, start.elapsed(), traffic))
        }))
        .await?
    };
    let report = RoundReport {
        table: table.name().to_string(),
        computes: computes(&round.encoder),
        clients: table
            .clients()
            .iter()
            .zip(&states)
            .map(|(c, (s, t, _))| {
                (
                    c.name().to_string(),
                    s.batch().num_rows(),
                    s.size_bytes(),
                    *t,
                )
            })
            .collect(),
        traffic: states.iter().map(|(_, _, traffic)| *traffic).collect(),
    };
    let states: Vec<StateBatch> = states.into_iter().map(|(s, _, _)| s).collect();
    // The noise of each DP result, stated (the sites added it).
    if crate::wire::dp::has_dp(&round.partial)
        && let Some(notices) = state.config().get_extension::<crate::notices::Notices>()
    {
        for line in crate::coordinator::dp::noise_notices(&round.partial, &states)? {
            notices.push(line);
        }
    }
    let decode: Arc<dyn ExecutionPlan> = merge_and_decode(&round.partial, &states)?;
    Ok((collect(decode, state.task_ctx()).await?, report))
}
