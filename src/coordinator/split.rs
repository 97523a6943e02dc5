//! The split of a plan into rounds: where a query's cuts are, and what
//! each round's encoder and merge are.
//!
//! A *cut* is an aggregate over the rows of a federated table (see
//! [`crate::protocol::exposure`]): the encoder ends there and the merge begins.
//! [`lowest_cut`] finds the next one to run, [`plan_round`] splits it, and
//! once it has run, [`substitute`] puts its (shared) result in its place.

use std::sync::{Arc, OnceLock};

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
use crate::protocol::encoder::Encoder;
use crate::protocol::{exposure, rebind};

/// One planned round: the encoder, the coordinator's partial aggregate
/// (whose final half merges and decodes the states) and the table whose
/// sites run it.
pub struct Round {
    pub encoder: Encoder,
    pub partial: AggregateExec,
    provider: Arc<dyn TableProvider>,
    /// The encoder bound once for every client, when its binding names no
    /// client (see [`client_column::bind_for_any_client`]).
    for_any_client: OnceLock<Option<Encoder>>,
}

impl Round {
    /// The encoder as one client runs it, its `_client` bound to the
    /// client's name (see [`crate::coordinator::client_column`]).
    pub fn encoder_for(&self, client: &str) -> Result<Encoder> {
        let shared = self.for_any_client.get_or_init(|| {
            // A failed binding is left to the per-client one to report.
            client_column::bind_for_any_client(&self.encoder)
                .ok()
                .flatten()
        });
        match shared {
            Some(encoder) => Ok(encoder.clone()),
            None => client_column::bind_client_name(&self.encoder, client),
        }
    }

    /// Whether the encoder reads `_client` so that each client runs its
    /// own binding of it.
    pub fn unbound_for_any_client(&self) -> bool {
        self.for_any_client
            .get_or_init(|| {
                client_column::bind_for_any_client(&self.encoder)
                    .ok()
                    .flatten()
            })
            .is_none()
    }

    /// The same round with the text of its string literal arguments that
    /// read `old` replaced by `new`: the next round of a fit, whose step
    /// config differs, without planning it again (see
    /// [`crate::protocol::rebind`]). `None` when no argument reads `old` or the
    /// planned aggregate cannot be rebound; then plan the round anew.
    pub fn rebound(&self, old: &str, new: &str) -> Result<Option<Round>> {
        let Some(plan) = rebind::replace_text_argument(self.encoder.plan(), old, new) else {
            return Ok(None);
        };
        let Some(changes) = rebind::argument_changes(self.encoder.plan(), &plan) else {
            return Ok(None);
        };
        let Some(partial) = rebind::rebind(&self.partial, &changes)? else {
            return Ok(None);
        };
        Ok(Some(Round {
            encoder: self.encoder.rewritten(|_| Ok(plan))?,
            partial,
            provider: Arc::clone(&self.provider),
            for_any_client: OnceLock::new(),
        }))
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
    // The sites' own allow-lists, checked early to explain (every site
    // checks again, and its check is the one that counts).
    crate::site::release::gate::admit(encoder.plan())?;
    let scope = state
        .config()
        .get_extension::<FitScope>()
        .filter(|s| s.keeps_rows())
        .map(|s| s.id());
    Ok(Round {
        encoder: encoder.in_fit(scope),
        partial,
        provider,
        for_any_client: OnceLock::new(),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::FedContext;
    use crate::coordinator::fit_scope::FitScope;

    const STEP: &str =
        "SELECT irls_step('family=poisson;beta=0.5,0.1', y, 1.0, 0.0, 1.0, 1.0, x) FROM t";

    async fn round(ctx: &FedContext, scope: &Arc<FitScope>, sql: &str) -> Round {
        let mut state = ctx.session().state();
        state.config_mut().set_extension(Arc::clone(scope));
        let plan = state.create_logical_plan(sql).await.unwrap();
        let plan = state.optimize(&plan).unwrap();
        plan_round(&state, &lowest_cut(&plan).unwrap())
            .await
            .unwrap()
    }

    /// Each client's state for a round, in client order.
    async fn states(round: &Round) -> Vec<RecordBatch> {
        let mut states = Vec::new();
        for client in round.table().clients() {
            let encoder = round.encoder_for(client.name()).unwrap();
            let analyst = crate::protocol::site::Analyst::session();
            let request = crate::protocol::site::SiteRequest::new(&encoder, &analyst);
            states.push(client.encode(&request).await.unwrap().batch().clone());
        }
        states
    }

    /// Two clients (four rows and one) holding `t(x, y)`.
    async fn two_clients(dir: &tempfile::TempDir) -> FedContext {
        let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
        std::fs::write(&a, "x,y\n0.5,1\n1.5,0\n2.0,3\n-1.0,2\n").unwrap();
        std::fs::write(&b, "x,y\n0.25,4\n").unwrap();
        let ctx = FedContext::new();
        ctx.sql(&format!(
            "CREATE FEDERATED TABLE t (x DOUBLE, y DOUBLE) CLIENTS ('a' = '{}', 'b' = '{}')",
            a.display(),
            b.display()
        ))
        .await
        .unwrap();
        ctx
    }

    #[tokio::test]
    async fn a_rebound_query_answers_as_its_sql_does() {
        let dir = tempfile::TempDir::new().unwrap();
        let ctx = two_clients(&dir).await;
        let sql = STEP.replace("SELECT ", "SELECT count(*) AS total, ");
        let (old, new) = (
            "family=poisson;beta=0.5,0.1",
            "family=poisson;beta=-0.25,0.75",
        );
        let prepared = ctx.sql(&sql).await.unwrap().prepare().await.unwrap();
        let prepared = prepared.expect("a query of one round");
        let first = prepared.collect().await.unwrap();
        assert_eq!(first, ctx.sql(&sql).await.unwrap().collect().await.unwrap());
        let rebound = prepared
            .rebound(old, new)
            .unwrap()
            .expect("a config rebinds");
        let expected = ctx
            .sql(&sql.replace(old, new))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let got = rebound.collect().await.unwrap();
        // The same values (the rebound query keeps the first one's names).
        assert_eq!(got[0].columns(), expected[0].columns());
        assert_ne!(got[0].columns(), first[0].columns());
    }

    #[tokio::test]
    async fn a_rebound_round_is_the_round_planned_from_its_sql() {
        let dir = tempfile::TempDir::new().unwrap();
        let ctx = two_clients(&dir).await;
        let scope = FitScope::new();
        let first = round(&ctx, &scope, STEP).await;
        // The first round keeps the rows (and its plan) at each client.
        states(&first).await;
        let (old, new) = (
            "family=poisson;beta=0.5,0.1",
            "family=poisson;beta=-0.25,0.75",
        );
        let rebound = first.rebound(old, new).unwrap().expect("a config rebinds");
        let planned = round(&ctx, &scope, &STEP.replace(old, new)).await;
        // The calls of the new config's SQL, under the first round's names.
        let (LogicalPlan::Aggregate(r), LogicalPlan::Aggregate(p)) =
            (rebound.encoder.plan(), planned.encoder.plan())
        else {
            unreachable!("encoders are aggregates")
        };
        let calls =
            |exprs: &[Expr]| -> Vec<Expr> { exprs.iter().map(|e| e.clone().unalias()).collect() };
        assert_eq!(calls(&r.aggr_expr), calls(&p.aggr_expr));
        assert_eq!(
            rebound.encoder.plan().schema(),
            first.encoder.plan().schema()
        );
        // The clients rebind their plans too: the same states as a fit
        // that plans the new config from the files.
        let fresh = round(&ctx, &FitScope::new(), &STEP.replace(old, new)).await;
        let columns = |states: Vec<RecordBatch>| -> Vec<_> {
            states.iter().map(|s| s.columns().to_vec()).collect()
        };
        assert_eq!(
            columns(states(&rebound).await),
            columns(states(&fresh).await)
        );
        assert_ne!(columns(states(&first).await), columns(states(&fresh).await));
        assert!(first.rebound("family=gamma", new).unwrap().is_none());
    }
}
