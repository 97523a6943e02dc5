//! What may run beside the data: the site's allow-lists, checked on every
//! encoder before anything of it is planned (in process and at workers
//! alike; the coordinator may run the same check early, never instead).
//!
//! **Plan shape.** Over federated rows an encoder is scan → filter and
//! projection → joins with shared rows → exactly one aggregate at the root.
//! Any other operator over the rows — an aggregate, window, limit, sort,
//! union or subquery below the root, `Unnest`, a recursive CTE — can repeat
//! or single out rows, and is refused with its name. A join side that
//! reads the federated table is not shared: a hostile coordinator's
//! `t CROSS JOIN (SELECT max(x) FROM t)` is refused here. The shared side
//! of a join holds no federated rows; it may still not unnest, recurse or
//! call what the catalogue does not know.
//!
//! **Functions.** Every aggregate and scalar function of the plan must be
//! in [`fedsql_udfs::catalogue`]; what is not is refused. Window
//! functions, subqueries in expressions, lambdas and placeholders are not
//! expressions a site evaluates, and a pattern (`LIKE`, `SIMILAR TO`, `~`)
//! must be a constant: a pattern taken from the rows can fail on them.

use datafusion::common::NullEquality;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Operator};
use fedsql_udfs::catalogue;

use crate::error::{FedError, Result};
use crate::protocol::exposure::{check_sizes, federated_scan, touches_federated};

/// Admits an encoder's plan, or refuses it naming the operator or function.
pub fn admit(plan: &LogicalPlan) -> Result<()> {
    let LogicalPlan::Aggregate(agg) = plan else {
        return Err(refused(format!(
            "the plan's root is `{}`, not an aggregate",
            operator(plan)
        )));
    };
    for expr in &agg.group_expr {
        check_expr(expr)?;
    }
    for expr in &agg.aggr_expr {
        check_aggregate(expr)?;
    }
    rows(&agg.input)
}

/// The part of the plan that carries the federated table's rows.
fn rows(plan: &LogicalPlan) -> Result<()> {
    match plan {
        LogicalPlan::TableScan(scan) if federated_scan(scan).is_some() => {
            scan.filters.iter().try_for_each(check_expr)
        }
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            plan.expressions().iter().try_for_each(check_expr)?;
            match plan.inputs().as_slice() {
                [input] => rows(input),
                _ => Err(refused(format!("`{}` without one input", operator(plan)))),
            }
        }
        LogicalPlan::Join(join) => {
            plan.expressions().iter().try_for_each(check_expr)?;
            // NULL keys that match each other (`IS NOT DISTINCT FROM`)
            // would let one row meet every NULL key of the shared side.
            if join.null_equality == NullEquality::NullEqualsNull {
                return Err(refused(
                    "a join whose NULL keys match each other (IS NOT DISTINCT FROM): one row would meet every NULL key of the shared side".into(),
                ));
            }
            let (left, right) = (
                touches_federated(&join.left),
                touches_federated(&join.right),
            );
            match (left, right) {
                (true, false) => {
                    rows(&join.left)?;
                    shared(&join.right)
                }
                (false, true) => {
                    shared(&join.left)?;
                    rows(&join.right)
                }
                _ => Err(refused(
                    "a join whose both sides read the federated table: a side that reads it is not shared"
                        .into(),
                )),
            }
        }
        other => Err(refused(format!(
            "operator `{}` over the federated table's rows: an encoder is scan, filter, projection and joins with shared rows under one aggregate",
            operator(other)
        ))),
    }
}

/// A join's shared side: rows the plan carries, never the federated table's.
fn shared(plan: &LogicalPlan) -> Result<()> {
    if touches_federated(plan) {
        return Err(refused(
            "a join side reads the federated table: it is not shared".into(),
        ));
    }
    let mut refusal = None;
    plan.apply_with_subqueries(|node| {
        let allowed = matches!(
            node,
            LogicalPlan::Projection(_)
                | LogicalPlan::Filter(_)
                | LogicalPlan::SubqueryAlias(_)
                | LogicalPlan::TableScan(_)
                | LogicalPlan::Values(_)
                | LogicalPlan::EmptyRelation(_)
                | LogicalPlan::Join(_)
                | LogicalPlan::Distinct(_)
                | LogicalPlan::Aggregate(_)
                | LogicalPlan::Sort(_)
                | LogicalPlan::Limit(_)
                | LogicalPlan::Union(_)
                | LogicalPlan::Subquery(_)
        );
        let checked = if allowed {
            node.expressions().iter().try_for_each(|e| match node {
                // A shared side may aggregate its own (shared) rows.
                LogicalPlan::Aggregate(_) => check_aggregate(e),
                _ => check_expr(e),
            })
        } else {
            Err(refused(format!(
                "operator `{}` on a join's shared side",
                operator(node)
            )))
        };
        match checked {
            Ok(()) => Ok(TreeNodeRecursion::Continue),
            Err(e) => {
                refusal = Some(e);
                Ok(TreeNodeRecursion::Stop)
            }
        }
    })?;
    refusal.map_or(Ok(()), Err)
}

/// An aggregate expression at the root: catalogued aggregates whose
/// arguments, FILTER and ORDER BY are row expressions.
fn check_aggregate(expr: &Expr) -> Result<()> {
    let mut result = Ok(());
    expr.apply(|e| {
        let Expr::AggregateFunction(f) = e else {
            return Ok(match check_node(e) {
                Ok(()) => TreeNodeRecursion::Continue,
                Err(err) => {
                    result = Err(err);
                    TreeNodeRecursion::Stop
                }
            });
        };
        let known = catalogue::aggregate(f.func.name()).is_some()
            || f.func
                .aliases()
                .iter()
                .any(|a| catalogue::aggregate(a).is_some());
        result = if known {
            check_sizes(f)
                .and_then(|()| check_fixed_list(f))
                .and_then(|()| {
                    f.params
                        .args
                        .iter()
                        .chain(f.params.filter.as_deref())
                        .chain(f.params.order_by.iter().map(|s| &s.expr))
                        .try_for_each(check_expr)
                })
        } else {
            Err(refused(format!(
                "aggregate `{}`: it is not in the catalogue of functions a site runs",
                f.func.name()
            )))
        };
        Ok(match result {
            Ok(()) => TreeNodeRecursion::Jump,
            Err(_) => TreeNodeRecursion::Stop,
        })
    })?;
    result
}

/// The catalogue's `fixed_list` argument of an aggregate must be a list
/// written out (`[a, b]`): its length is then the plan's, not a row's.
fn check_fixed_list(f: &datafusion::logical_expr::expr::AggregateFunction) -> Result<()> {
    let facts = catalogue::aggregate(f.func.name()).or_else(|| {
        f.func
            .aliases()
            .iter()
            .find_map(|a| catalogue::aggregate(a))
    });
    let Some(at) = facts.and_then(|a| a.fixed_list) else {
        return Ok(());
    };
    let mut arg = f.params.args.get(at);
    while let Some(Expr::Alias(a)) = arg {
        arg = Some(&a.expr);
    }
    match arg {
        Some(Expr::ScalarFunction(list))
            if catalogue::scalar(list.func.name()).is_some_and(|s| s.writes_out_list) =>
        {
            Ok(())
        }
        Some(Expr::Literal(..)) | None => Ok(()),
        Some(_) => Err(refused(format!(
            "`{}` over a list that is not written out: write it as [a, b], so that no row decides its length",
            f.func.name()
        ))),
    }
}

/// A row expression: catalogued scalar functions over the row's values.
fn check_expr(expr: &Expr) -> Result<()> {
    let mut result = Ok(());
    expr.apply(|e| {
        Ok(match check_node(e) {
            Ok(()) => TreeNodeRecursion::Continue,
            Err(err) => {
                result = Err(err);
                TreeNodeRecursion::Stop
            }
        })
    })?;
    result
}

/// One node of a row expression.
fn check_node(e: &Expr) -> Result<()> {
    match e {
        Expr::ScalarFunction(f) if catalogue::scalar(f.func.name()).is_some() => Ok(()),
        Expr::ScalarFunction(f) => Err(refused(format!(
            "function `{}`: it is not in the catalogue of functions a site runs",
            f.func.name()
        ))),
        Expr::AggregateFunction(f) => Err(refused(format!(
            "aggregate `{}` inside another expression: a site runs exactly one aggregate, at the root",
            f.func.name()
        ))),
        Expr::WindowFunction(w) => Err(refused(format!(
            "window function `{}` over rows",
            w.fun
        ))),
        Expr::ScalarSubquery(_)
        | Expr::InSubquery(_)
        | Expr::Exists(_)
        | Expr::SetComparison(_) => Err(refused("a subquery inside an expression".into())),
        Expr::Unnest(_) => Err(refused("`unnest`: it makes several rows of one".into())),
        Expr::HigherOrderFunction(_) | Expr::Lambda(_) | Expr::LambdaVariable(_) => {
            Err(refused("a lambda function".into()))
        }
        Expr::Placeholder(_) | Expr::OuterReferenceColumn(..) | Expr::ScalarVariable(..) => {
            Err(refused(format!("expression `{e}`")))
        }
        Expr::Like(like) | Expr::SimilarTo(like) if !is_constant(&like.pattern) => Err(refused(
            "a LIKE / SIMILAR TO pattern that is not a constant (a pattern from the rows can fail on them)".into(),
        )),
        Expr::BinaryExpr(b) if is_regex(b.op) && !is_constant(&b.right) => Err(refused(
            "a regular expression that is not a constant (a pattern from the rows can fail on them)".into(),
        )),
        _ => Ok(()),
    }
}

fn is_regex(op: Operator) -> bool {
    matches!(
        op,
        Operator::RegexMatch
            | Operator::RegexIMatch
            | Operator::RegexNotMatch
            | Operator::RegexNotIMatch
            | Operator::LikeMatch
            | Operator::ILikeMatch
            | Operator::NotLikeMatch
            | Operator::NotILikeMatch
    )
}

/// A literal, possibly cast (the planner casts a pattern to the column's
/// string type).
fn is_constant(e: &Expr) -> bool {
    match e {
        Expr::Literal(..) => true,
        Expr::Cast(c) => is_constant(&c.expr),
        Expr::TryCast(c) => is_constant(&c.expr),
        Expr::Alias(a) => is_constant(&a.expr),
        _ => false,
    }
}

/// The operator's name, as a plan's first line shows it.
fn operator(plan: &LogicalPlan) -> String {
    plan.display()
        .to_string()
        .split(':')
        .next()
        .unwrap_or("?")
        .to_string()
}

fn refused(what: String) -> FedError {
    FedError::refused(
        format!("a site refuses {what}"),
        Some("docs/security/threat-model.md lists what a site runs, and why"),
    )
}
