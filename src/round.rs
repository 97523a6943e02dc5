//! Factorized execution: a query as rounds of encode → merge → decode.
//!
//! The optimized plan is checked (see [`crate::exposure`]), then each *cut*
//! (an aggregate over the rows of a federated table) becomes one round,
//! lowest first: its [`Encoder`] runs at every client concurrently, the
//! clients' state batches are merged and decoded by the final aggregate on
//! the coordinator, and the cut is replaced in the plan by its (shared)
//! result. A later round may use an earlier round's result as shared input
//! (e.g. `WHERE age > (SELECT avg(age) FROM clinic)`). When no cut is left,
//! the rest of the plan — the decoder — is shared-only and runs on the
//! coordinator.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::Transformed;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{EmptyRelation, Expr, LogicalPlan, Values};
use datafusion::physical_plan::{ExecutionPlan, collect};
use futures::future::try_join_all;

use crate::client::Traffic;
use crate::encoder::{self, Encoder, StateBatch};
use crate::error::{FedError, Result};
use crate::exposure;
use crate::fit_cache::FitScope;
use crate::secure;

/// What one round of a query did, for EXPLAIN and the communication figures.
#[derive(Debug, Clone)]
pub struct RoundReport {
    pub table: String,
    /// Per client: name, state rows, state bytes, time.
    pub clients: Vec<(String, usize, usize, Duration)>,
    /// Per client, in the same order: the bytes sent and received.
    pub traffic: Vec<Traffic>,
}

/// One planned round: the encoder and the coordinator's partial aggregate
/// (whose final half merges and decodes the states).
pub struct Round {
    pub encoder: Encoder,
    pub partial: datafusion::physical_plan::aggregates::AggregateExec,
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
            FedError::Plan("internal: a per-client query must aggregate federated rows".into())
        })?;
        let round = plan_round(state, &cut).await?;
        let rest = substitute(plan.clone(), &cut, shared_result(&cut, &[])?)?;
        if lowest_cut(&rest).is_some() {
            let (result, _) = run_round(state, &round).await?;
            plan = substitute(plan, &cut, shared_result(&cut, &result)?)?;
            continue;
        }
        let clients = round.encoder.table().clients();
        let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
        let chosen = choose(&names)?;
        return try_join_all(chosen.into_iter().map(|i| {
            let (client, round) = (&clients[i], &round);
            async move {
                let client_state = client.encode(&round.encoder).await?;
                let decode = encoder::merge_and_decode(&round.partial, &[client_state])?;
                Ok::<_, FedError>(ClientAnswer {
                    client: client.name().to_string(),
                    batches: collect(decode, state.task_ctx()).await?,
                })
            }
        }))
        .await;
    }
}

/// The lowest aggregate over federated rows (one with no other cut below it).
pub fn lowest_cut(plan: &LogicalPlan) -> Option<LogicalPlan> {
    let mut below = None;
    let _ = plan.apply_subqueries(|sub| {
        if let LogicalPlan::Subquery(sub) = sub {
            below = lowest_cut(&sub.subquery);
        }
        Ok(if below.is_some() {
            datafusion::common::tree_node::TreeNodeRecursion::Stop
        } else {
            datafusion::common::tree_node::TreeNodeRecursion::Continue
        })
    });
    if below.is_some() {
        return below;
    }
    for input in plan.inputs() {
        if let Some(cut) = lowest_cut(input) {
            return Some(cut);
        }
    }
    match plan {
        LogicalPlan::Aggregate(agg) if exposure::touches_federated(&agg.input) => {
            Some(plan.clone())
        }
        _ => None,
    }
}

/// Plans one round: the encoder and the coordinator's partial aggregate.
pub async fn plan_round(state: &SessionState, cut: &LogicalPlan) -> Result<Round> {
    let physical = state
        .query_planner()
        .create_physical_plan(cut, state)
        .await?;
    let partial = encoder::partial_aggregate(&physical)?;
    // Bad secure_sum bounds fail here, before any client runs.
    secure::check_round(&partial)?;
    let scope = state.config().get_extension::<FitScope>().map(|s| s.id());
    let encoder = Encoder::try_new(cut.clone(), partial.schema())?.in_fit(scope);
    Ok(Round { encoder, partial })
}

/// Runs one round: the encoder at every client at once, then merge + decode.
pub async fn run_round(
    state: &SessionState,
    round: &Round,
) -> Result<(Vec<RecordBatch>, RoundReport)> {
    let table = round.encoder.table();
    let states: Vec<(StateBatch, Duration, Traffic)> = if secure::check_round(&round.partial)? {
        // Masked states: what arrives is the masked state itself.
        secure::collect_masked_states(table.clients(), &round.encoder)
            .await?
            .into_iter()
            .map(|(state, time)| {
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
            let (state, traffic) = client.encode_with_traffic(&round.encoder).await?;
            Ok::<_, FedError>((state, start.elapsed(), traffic))
        }))
        .await?
    };
    let report = RoundReport {
        table: table.name().to_string(),
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
    let decode: Arc<dyn ExecutionPlan> = encoder::merge_and_decode(&round.partial, &states)?;
    Ok((collect(decode, state.task_ctx()).await?, report))
}

/// A cut's result as a shared plan node with the cut's exact output schema.
pub fn shared_result(cut: &LogicalPlan, batches: &[RecordBatch]) -> Result<LogicalPlan> {
    let schema = Arc::clone(cut.schema());
    let mut values = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let row = batch
                .columns()
                .iter()
                .map(|col| Ok(Expr::Literal(ScalarValue::try_from_array(col, row)?, None)))
                .collect::<Result<Vec<_>>>()?;
            values.push(row);
        }
    }
    Ok(if values.is_empty() {
        LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema,
        })
    } else {
        LogicalPlan::Values(Values { schema, values })
    })
}

/// Replaces every occurrence of `cut` in the plan (subqueries included).
pub fn substitute(
    plan: LogicalPlan,
    cut: &LogicalPlan,
    result: LogicalPlan,
) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            if &node == cut {
                Ok(Transformed::yes(result.clone()))
            } else {
                Ok(Transformed::no(node))
            }
        })?
        .data)
}
