//! Exposure discipline: which plans may run against federated tables.
//!
//! Every node of a logical plan is either *shared* (computed from shared
//! values only) or *federated* (it still has the record axis of one federated
//! table, and so can only run at that table's clients, each over its own
//! rows). The only way from federated to shared is an aggregate whose state
//! is bounded and merges as a commutative monoid: that aggregate is a *cut*,
//! where the encoder ends and the merge begins.
//!
//! [`check`] walks a plan bottom-up and refuses, with an error naming the
//! operator or function and the bounded alternative, anything that would need
//! raw rows or row-count-sized state to leave a client: a federated result at
//! the root, DISTINCT ON, window functions, LIMIT over rows, joins or unions of
//! federated rows, outer joins that keep unmatched shared rows (they would be
//! counted once per client), and aggregates whose state is unbounded.
//!
//! The same walk runs on the plan as the user wrote it (for messages in the
//! user's terms), on the optimized plan that actually runs (so the guarantee
//! holds whatever the optimizer did), and again at every site on the encoder
//! it receives ([`crate::protocol::encoder::Encoder::try_new`]): one checker for
//! both sides of the boundary.

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Aggregate, Distinct, Expr, JoinType, LogicalPlan, TableScan};

use crate::error::{FedError, Result};
use crate::protocol::federated_scan::FederatedScan;

/// Whether an aggregate function may run over federated rows: it is in
/// the catalogue of functions a site runs, whose every aggregate has a
/// state bounded whatever the row count.
pub(crate) fn is_bounded_aggregate(name: &str) -> bool {
    fedsql_udfs::catalogue::aggregate(name).is_some()
}

/// The bounded alternative to an unbounded aggregate, where there is one.
fn bounded_alternative(name: &str) -> Option<&'static str> {
    fedsql_udfs::catalogue::alternative(name)
}

/// What a part of a plan is: shared, or the rows of a federated table.
#[derive(Debug, Clone)]
pub(crate) enum Locality {
    Shared,
    /// Still has the record axis of this federated table.
    Federated(Arc<dyn TableProvider>),
}

impl Locality {
    fn table_name(&self) -> &str {
        match self {
            Locality::Shared => "",
            Locality::Federated(p) => FederatedScan::of(p.as_ref()).map_or("", |t| t.name()),
        }
    }
}

/// The federated table a scan reads, if it reads one.
pub(crate) fn federated_scan(scan: &TableScan) -> Option<Arc<dyn TableProvider>> {
    let provider = source_as_provider(&scan.source).ok()?;
    FederatedScan::of(provider.as_ref())
        .is_some()
        .then_some(provider)
}

/// Whether any part of the plan (subqueries included) reads a federated table.
pub(crate) fn touches_federated(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && federated_scan(scan).is_some()
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Checks that the whole plan ends shared: every federated part is cut by a
/// bounded aggregate. `root_label` names the query for the raw-rows message
/// (e.g. "`SELECT *`").
pub(crate) fn check(plan: &LogicalPlan, root_label: &str) -> Result<()> {
    match locality(plan)? {
        Locality::Shared => Ok(()),
        fed => Err(FedError::refused(
            format!(
                "{root_label} returns raw rows of federated table `{}`; only aggregates may leave a client",
                fed.table_name()
            ),
            Some("aggregate the rows instead, e.g. SELECT count(*), avg(col) FROM t GROUP BY key"),
        )),
    }
}

/// The locality of a plan, refusing operators that cannot run at clients.
pub(crate) fn locality(plan: &LogicalPlan) -> Result<Locality> {
    // Subqueries inside expressions: a shared subquery is fine (it may hold
    // cuts of its own); one that returns federated rows is refused.
    let mut subquery_err = None;
    plan.apply_subqueries(|sub| {
        if let LogicalPlan::Subquery(sub) = sub {
            match locality(&sub.subquery) {
                Ok(Locality::Shared) => {}
                Ok(fed) => {
                    subquery_err = Some(FedError::refused(
                        format!(
                            "a subquery returns raw rows of federated table `{}` (IN/EXISTS/scalar subqueries over rows need them to leave a client)",
                            fed.table_name()
                        ),
                        Some("aggregate inside the subquery, e.g. WHERE x > (SELECT avg(x) FROM t)"),
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
                Err(e) => {
                    subquery_err = Some(e);
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if let Some(e) = subquery_err {
        return Err(e);
    }

    let inputs = plan.inputs();
    let children = inputs
        .iter()
        .map(|p| locality(p))
        .collect::<Result<Vec<_>>>()?;
    let federated: Vec<&Locality> = children
        .iter()
        .filter(|l| matches!(l, Locality::Federated(_)))
        .collect();

    match plan {
        LogicalPlan::TableScan(scan) => Ok(match federated_scan(scan) {
            Some(provider) => Locality::Federated(provider),
            None => Locality::Shared,
        }),
        _ if federated.is_empty() => Ok(Locality::Shared),
        LogicalPlan::Aggregate(agg) => {
            check_aggregates(agg, federated[0].table_name())?;
            Ok(Locality::Shared)
        }
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Subquery(_) => Ok(federated[0].clone()),
        LogicalPlan::Unnest(_) => Err(refuse_rows(
            "UNNEST",
            federated[0],
            "it makes several rows of one, which every count and threshold would then count as people",
            Some("aggregate the rows themselves; a list's elements are not rows a site counts"),
        )),
        LogicalPlan::Repartition(_) => Ok(federated[0].clone()),
        LogicalPlan::Sort(sort) if sort.fetch.is_none() => Ok(federated[0].clone()),
        LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => Err(refuse_rows(
            "LIMIT",
            federated[0],
            "a LIMIT over rows picks rows across clients",
            Some("aggregate first, then ORDER BY/LIMIT the aggregated result"),
        )),
        // `SELECT DISTINCT cols` asks what `GROUP BY cols` asks: the
        // optimizer turns it into that aggregate, a cut like any other.
        LogicalPlan::Distinct(Distinct::All(_)) => Ok(Locality::Shared),
        LogicalPlan::Distinct(Distinct::On(_)) => Err(refuse_rows(
            "DISTINCT ON",
            federated[0],
            "DISTINCT ON picks one row per key",
            Some("GROUP BY the key with aggregates of the other columns"),
        )),
        LogicalPlan::Window(window) => {
            let name = window
                .window_expr
                .first()
                .map(|e| format!("window function `{}`", e.schema_name()))
                .unwrap_or_else(|| "window function".into());
            Err(refuse_rows(
                &name,
                federated[0],
                "a window function keeps one output per row",
                Some("aggregate first; window functions over an aggregated subquery are fine"),
            ))
        }
        LogicalPlan::Join(join) => {
            if federated.len() == 2 {
                let (l, r) = (children[0].table_name(), children[1].table_name());
                return Err(FedError::refused(
                    format!(
                        "JOIN of federated `{l}` with federated `{r}`: matching rows across clients would need raw rows to leave a client"
                    ),
                    Some(
                        "aggregate each side first and join the aggregated results, or join a federated table with a shared table",
                    ),
                ));
            }
            let federated_left = matches!(children[0], Locality::Federated(_));
            let keeps_only_federated_rows = match join.join_type {
                JoinType::Inner => true,
                JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                    federated_left
                }
                JoinType::Right
                | JoinType::RightSemi
                | JoinType::RightAnti
                | JoinType::RightMark => !federated_left,
                JoinType::Full => false,
            };
            if keeps_only_federated_rows {
                Ok(federated[0].clone())
            } else {
                Err(FedError::refused(
                    format!(
                        "{} JOIN keeps unmatched rows of the shared side, which every client of `{}` would add once",
                        join.join_type.to_string().to_uppercase(),
                        federated[0].table_name()
                    ),
                    Some(
                        "use an INNER JOIN, or an outer join that keeps the federated table's rows",
                    ),
                ))
            }
        }
        LogicalPlan::Union(_) => Err(FedError::refused(
            format!(
                "UNION over rows of federated table `{}`: union the aggregated results instead",
                federated[0].table_name()
            ),
            Some("aggregate each branch, then UNION ALL the aggregates"),
        )),
        other => Err(FedError::refused(
            format!(
                "operator `{}` cannot run over the rows of federated table `{}` at the clients",
                other.display().to_string().split(':').next().unwrap_or("?"),
                federated[0].table_name()
            ),
            None,
        )),
    }
}

fn refuse_rows(operator: &str, fed: &Locality, why: &str, hint: Option<&str>) -> FedError {
    FedError::refused(
        format!(
            "{operator} over rows of federated table `{}`: {why}, so raw rows would leave a client",
            fed.table_name()
        ),
        hint,
    )
}

/// Refuses DISTINCT aggregates and aggregates whose state grows with the rows.
fn check_aggregates(agg: &Aggregate, table: &str) -> Result<()> {
    for expr in &agg.aggr_expr {
        let mut refusal = None;
        expr.apply(|e| {
            if let Expr::AggregateFunction(f) = e {
                let name = f.func.name().to_ascii_lowercase();
                if f.params.distinct {
                    let hint = (name == "count")
                        .then_some("count the groups instead: SELECT count(*) FROM (SELECT x FROM t GROUP BY x) AS g (exact; each value's group is held to a site's k), or approx_distinct(x) (a HyperLogLog estimate, refused under a disclosure policy: its registers are hashes of values)");
                    refusal = Some(FedError::refused(
                        format!(
                            "{}(DISTINCT ...) over federated table `{table}`: a DISTINCT aggregate keeps every distinct value in its state",
                            f.func.name()
                        ),
                        hint,
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
                if let Err(e) = check_sizes(f) {
                    refusal = Some(e);
                    return Ok(TreeNodeRecursion::Stop);
                }
                let bounded = is_bounded_aggregate(&name) || f.func.aliases().iter().any(|a| is_bounded_aggregate(a));
                if !bounded {
                    refusal = Some(FedError::refused(
                        format!(
                            "aggregate `{}` over federated table `{table}` keeps every value in its state, which would leave the client",
                            f.func.name()
                        ),
                        bounded_alternative(&name),
                    ));
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if let Some(e) = refusal {
            return Err(e);
        }
    }
    Ok(())
}

/// Refuses a call whose state the catalogue sizes by an argument (a
/// histogram's bins) unless that argument is a constant within bounds:
/// checked on both sides before anything is allocated.
pub(crate) fn check_sizes(f: &datafusion::logical_expr::expr::AggregateFunction) -> Result<()> {
    let Some(at) = fedsql_udfs::catalogue::aggregate(f.func.name()).and_then(|a| a.sized_by) else {
        return Ok(());
    };
    let Some(arg) = f.params.args.get(at) else {
        return Ok(()); // the function's own signature refuses it
    };
    let mut value = arg;
    while let Expr::Cast(c) = value {
        value = &c.expr;
    }
    let bins = match value {
        Expr::Literal(v, _) => v.to_string().parse::<f64>().ok(),
        _ => None,
    };
    match bins {
        Some(b) if b <= fedsql_udfs::catalogue::MAX_BINS as f64 => Ok(()),
        _ => Err(FedError::refused(
            format!(
                "{}: at most {} bins, given as a constant",
                f.func.name(),
                fedsql_udfs::catalogue::MAX_BINS
            ),
            Some("use fewer bins"),
        )),
    }
}

/// Refuses plan nodes that write or define anything, or that a site would
/// not know how to run: an encoder only reads, filters, projects, joins
/// shared rows and aggregates.
pub(crate) fn check_encoder_nodes(plan: &LogicalPlan) -> Result<()> {
    let mut refusal = None;
    plan.apply_with_subqueries(|node| {
        if matches!(
            node,
            LogicalPlan::Copy(_)
                | LogicalPlan::Dml(_)
                | LogicalPlan::Ddl(_)
                | LogicalPlan::Statement(_)
                | LogicalPlan::Extension(_)
                | LogicalPlan::Explain(_)
                | LogicalPlan::Analyze(_)
                | LogicalPlan::DescribeTable(_)
        ) {
            refusal = Some(FedError::refused(
                format!(
                    "plan node `{}` is not allowed in an encoder",
                    node.display()
                ),
                None,
            ));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    refusal.map_or(Ok(()), Err)
}
