//! Which state columns of a round carry differentially private state, and
//! how much noise each gets: what the site uses to add the noise (once per
//! released state row) and the coordinator uses to check the constants
//! before any client runs, to explain the mechanism and to state the noise
//! of each DP result.

use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use fedsql_udfs::dp::{DpRelease, release_of};

use crate::error::{FedError, Result};

/// One DP aggregate call of a round.
#[derive(Debug, Clone)]
pub(crate) struct DpCall {
    /// The call's name in the plan (its output column).
    pub name: String,
    /// Its mechanism, ε and per-column noise.
    pub release: DpRelease,
    /// The index of its first state column in the state batch.
    pub first_column: usize,
}

/// The DP calls of a partial (or partial-reduce) aggregate, with where
/// their state columns are; fails on non-constant or out-of-range bounds,
/// bins or ε.
pub(crate) fn dp_calls(agg: &AggregateExec) -> Result<Vec<DpCall>> {
    // Most rounds have none: their state's fields are not worth naming.
    if !has_dp(agg) {
        return Ok(Vec::new());
    }
    let mut widths = Vec::with_capacity(agg.aggr_expr().len());
    for expr in agg.aggr_expr() {
        widths.push(expr.state_fields()?.len());
    }
    let groups = agg
        .schema()
        .fields()
        .len()
        .checked_sub(widths.iter().sum::<usize>())
        .ok_or_else(|| FedError::Internal("a state narrower than its aggregates".into()))?;
    let mut column = groups;
    let mut calls = Vec::new();
    for (expr, width) in agg.aggr_expr().iter().zip(widths) {
        if let Some(release) = release_of(expr.fun().name(), &expr.expressions())? {
            if release.columns.len() != width {
                return Err(FedError::Internal(format!(
                    "{} has {width} state columns, its release describes {}",
                    expr.name(),
                    release.columns.len()
                )));
            }
            calls.push(DpCall {
                name: expr.name().to_string(),
                release,
                first_column: column,
            });
        }
        column += width;
    }
    Ok(calls)
}

/// The top aggregate of a site's (or the coordinator's) physical plan.
pub(crate) fn top_aggregate(plan: &Arc<dyn ExecutionPlan>) -> Option<&AggregateExec> {
    if let Some(agg) = plan.downcast_ref::<AggregateExec>() {
        return Some(agg);
    }
    plan.children().into_iter().find_map(top_aggregate)
}

/// Whether any aggregate of the round is a DP aggregate.
pub(crate) fn has_dp(agg: &AggregateExec) -> bool {
    agg.aggr_expr()
        .iter()
        .any(|e| fedsql_udfs::catalogue::is_dp(e.fun().name()))
}

/// Checks the constants of every DP call of a round (before any client
/// runs).
pub(crate) fn check_round(partial: &AggregateExec) -> Result<()> {
    dp_calls(partial).map(|_| ())
}

/// The lines EXPLAIN FEDERATED shows for the DP state of a round.
pub(crate) fn explain_lines(partial: &AggregateExec, clients: usize) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for call in dp_calls(partial)? {
        let r = &call.release;
        lines.push(if r.under_masks {
            format!(
                "{}: {}, ε = {} per client (each client adds a 1/d share of the noise before masking: d is the secure round's threshold t, or with peers t − c for the c colluders the sites tolerate, the least over the sites, and a site that would cut finer refuses: any t clients' shares, less the colluders', make the full noise; no client's state is readable alone)",
                call.name,
                r.mechanism(),
                r.epsilon
            )
        } else {
            format!(
                "{}: {}, ε = {} per client (each client's state alone is ε-DP)",
                call.name,
                r.mechanism(),
                r.epsilon
            )
        });
        for (i, c) in r.columns.iter().enumerate() {
            lines.push(format!(
                "  state column {}: {}: ε = {:.6}, sensitivity {} × {:.6e}, scale {:.6e} (value units), noise std dev {:.6e} per client, {:.6e} over {clients}",
                call.first_column + i,
                c.what,
                c.epsilon,
                c.sensitivity,
                c.step,
                c.scale.value() * c.step,
                c.std_dev(1),
                c.std_dev(clients)
            ));
        }
    }
    Ok(lines)
}
