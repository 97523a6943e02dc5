//! The split of a plan into rounds: where a query's cuts are, and what
//! each round's encoder and merge are.
//!
//! A *cut* is an aggregate over the rows of a federated table (see
//! [`crate::wire::exposure`]): the encoder ends there and the merge begins.
//! [`lowest_cut`] finds the next one to run, [`plan_round`] splits it, and
//! once it has run, [`substitute`] puts its (shared) result in its place.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Distinct, EmptyRelation, Expr, LogicalPlan, Values};
use datafusion::physical_plan::aggregates::AggregateExec;

use crate::coordinator::client_column;
use crate::coordinator::federated_table::FederatedTable;
use crate::coordinator::fit_scope::FitScope;
use crate::error::{FedError, Result};
use crate::wire::encoder::Encoder;
use crate::wire::exposure;

/// One planned round: the encoder, the coordinator's partial aggregate
/// (whose final half merges and decodes the states) and the table whose
/// sites run it.
pub struct Round {
    pub encoder: Encoder,
    pub partial: AggregateExec,
    provider: Arc<dyn TableProvider>,
}

impl Round {
    /// The encoder as one client runs it, its `_client` bound to the
    /// client's name (see [`crate::coordinator::client_column`]).
    pub fn encoder_for(&self, client: &str) -> Result<Encoder> {
        client_column::bind_client_name(&self.encoder, client)
    }

    /// The federated table whose sites run this round.
    pub fn table(&self) -> &FederatedTable {
        FederatedTable::from_provider(self.provider.as_ref())
            .expect("a round's provider is a federated table")
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
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
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
        // Before optimization, `SELECT DISTINCT` stands for its GROUP BY.
        LogicalPlan::Distinct(Distinct::All(input)) if exposure::touches_federated(input) => {
            Some(plan.clone())
        }
        _ => None,
    }
}

/// Plans one round: the encoder and the coordinator's partial aggregate.
pub async fn plan_round(state: &SessionState, cut: &LogicalPlan) -> Result<Round> {
    let provider = federated_provider(cut)?;
    let (encoder, partial) = Encoder::split(state, cut).await?;
    let scope = state.config().get_extension::<FitScope>().map(|s| s.id());
    Ok(Round {
        encoder: encoder.in_fit(scope),
        partial,
        provider,
    })
}

/// The coordinator's federated table a cut reads.
fn federated_provider(cut: &LogicalPlan) -> Result<Arc<dyn TableProvider>> {
    let mut found = None;
    cut.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
            && FederatedTable::from_provider(provider.as_ref()).is_some()
        {
            found = Some(provider);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    found.ok_or_else(|| FedError::Internal("a round must read a federated table".into()))
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
