//! No row amplification: under a disclosure policy a join of the site's
//! rows with a shared table must not repeat any of its rows, so that each
//! person counts once (a 5-row `VALUES` cross-joined with the table would
//! make one person five rows and pass any k of 5). The shared side of every
//! join must be a lookup: its join key unique among its non-NULL keys.
//! Checked at the site, by running the shared side (inline rows carried by
//! the plan) before any of the site's rows are read.

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::functions_aggregate::count::count_all;
use datafusion::logical_expr::{Expr, Join, JoinType, LogicalPlan, LogicalPlanBuilder, col, lit};
use datafusion::prelude::SessionContext;

use crate::error::{FedError, Result};
use crate::protocol::exposure::touches_federated;

/// Refuses `plan` (an encoder, before its scans are bound) if any join of
/// federated rows could repeat one of them.
pub(crate) async fn check_no_amplification(
    client: &str,
    plan: &LogicalPlan,
    session: &SessionContext,
) -> Result<()> {
    let mut joins = Vec::new();
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Join(join) = node {
            joins.push(join.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    for join in joins {
        if let Some((shared, keys)) = shared_side(&join) {
            if keys.is_empty() {
                return Err(amplifying(
                    client,
                    "a join without equal keys repeats each of its rows",
                ));
            }
            if !unique(shared, keys, session).await? {
                return Err(amplifying(
                    client,
                    "the shared side's join key is not unique, so some of its rows would count more than once",
                ));
            }
        }
    }
    Ok(())
}

/// The shared side of a join that can repeat federated rows, and its join
/// keys; `None` for a join that cannot (semi, anti and mark joins keep
/// each row at most once; a join of shared tables only is no concern).
fn shared_side(join: &Join) -> Option<(&LogicalPlan, Vec<Expr>)> {
    let left = touches_federated(&join.left);
    let right = touches_federated(&join.right);
    let repeats = matches!(
        join.join_type,
        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
    );
    if !repeats || left == right {
        return None;
    }
    Some(if left {
        (
            join.right.as_ref(),
            join.on.iter().map(|(_, r)| r.clone()).collect(),
        )
    } else {
        (
            join.left.as_ref(),
            join.on.iter().map(|(l, _)| l.clone()).collect(),
        )
    })
}

/// Whether `keys` are unique over the rows of `shared` (NULL keys match
/// nothing, so they are left out).
async fn unique(shared: &LogicalPlan, keys: Vec<Expr>, session: &SessionContext) -> Result<bool> {
    let not_null = keys
        .iter()
        .cloned()
        .map(Expr::is_not_null)
        .reduce(Expr::and)
        .unwrap_or(lit(true));
    let duplicates = LogicalPlanBuilder::from(shared.clone())
        .filter(not_null)?
        .aggregate(keys, vec![count_all().alias("n")])?
        .filter(col("n").gt(lit(1i64)))?
        .limit(0, Some(1))?
        .build()?;
    let batches = session
        .execute_logical_plan(duplicates)
        .await?
        .collect()
        .await?;
    Ok(batches.iter().all(|b| b.num_rows() == 0))
}

fn amplifying(client: &str, why: &str) -> FedError {
    FedError::Policy {
        client: client.to_string(),
        rule: format!("{why} (no row amplification under its disclosure policy)"),
        hint: Some(
            "join with a table whose join key is unique (a lookup), or aggregate the shared table first".into(),
        ),
    }
}
