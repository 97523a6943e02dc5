//! A planned round with new constants. The rounds of an iterative fit
//! differ only in the constant arguments of their step aggregate (the
//! config string that carries the coefficients), so the coordinator and
//! the sites keep the plans of a fit's first round and rebind those
//! literals in later rounds instead of parsing and planning each round
//! again.
//!
//! A rebound encoder keeps the output names of the round it was made from
//! (each changed call is aliased with its old name), so its state has the
//! same schema wherever it is planned, rebound or not. Rebinding is exact
//! or refused: two encoders differ "only in argument literals" when their
//! input, grouping and output schema are equal and their aggregate calls
//! are equal once every literal argument is blanked, each changed literal
//! keeping its type; anything else is planned anew.

use std::sync::Arc;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::aggregates::AggregateExec;
use fedsql_udfs::constant_argument::{ConstantArgument, literal_value};

use crate::error::Result;

/// A literal argument that changed: the aggregate's position, the
/// argument's position and its new value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArgumentChange {
    pub aggregate: usize,
    pub argument: usize,
    pub value: ScalarValue,
}

/// The literal arguments in which `new` differs from `old`, when the two
/// aggregate plans differ in nothing else; `None` otherwise.
pub(crate) fn argument_changes(
    old: &LogicalPlan,
    new: &LogicalPlan,
) -> Option<Vec<ArgumentChange>> {
    let (LogicalPlan::Aggregate(old), LogicalPlan::Aggregate(new)) = (old, new) else {
        return None;
    };
    let same_frame = old.input == new.input
        && old.group_expr == new.group_expr
        && old.schema == new.schema
        && old.aggr_expr.len() == new.aggr_expr.len();
    if !same_frame {
        return None;
    }
    let mut changes = Vec::new();
    for (aggregate, (a, b)) in old.aggr_expr.iter().zip(&new.aggr_expr).enumerate() {
        let (a, b) = (call(a)?, call(b)?);
        if blanked(a)? != blanked(b)? {
            return None;
        }
        for (argument, (x, y)) in a.params.args.iter().zip(&b.params.args).enumerate() {
            if let (Expr::Literal(x, _), Expr::Literal(y, _)) = (x, y)
                && x != y
            {
                if x.data_type() != y.data_type() {
                    return None;
                }
                changes.push(ArgumentChange {
                    aggregate,
                    argument,
                    value: y.clone(),
                });
            }
        }
    }
    Some(changes)
}

/// The logical aggregate with the text of each string literal argument of
/// its calls that reads `old` replaced by `new` (a dictionary-encoded
/// literal stays dictionary-encoded), each changed call keeping its output
/// name; `None` when no argument reads `old`.
pub(crate) fn replace_text_argument(
    plan: &LogicalPlan,
    old: &str,
    new: &str,
) -> Option<LogicalPlan> {
    let LogicalPlan::Aggregate(agg) = plan else {
        return None;
    };
    let mut agg = agg.clone();
    let mut replaced = false;
    for e in agg.aggr_expr.iter_mut() {
        let name = e.schema_name().to_string();
        let mut changed = false;
        for arg in call_mut(e)?.params.args.iter_mut() {
            if let Expr::Literal(value, _) = arg
                && let Some(text) = text_mut(value)
                && text == old
            {
                *text = new.to_string();
                changed = true;
            }
        }
        if changed && !matches!(e, Expr::Alias(_)) {
            *e = e.clone().alias(name);
        }
        replaced |= changed;
    }
    replaced.then_some(LogicalPlan::Aggregate(agg))
}

/// The text of a string literal, under a dictionary encoding if any.
fn text_mut(value: &mut ScalarValue) -> Option<&mut String> {
    match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s),
        ScalarValue::Dictionary(_, inner) => text_mut(inner),
        _ => None,
    }
}

/// The physical aggregate planned for the old plan, with the changed
/// arguments rebound; `None` when an argument is not a literal there, plain
/// or shared between batches (then the caller plans anew).
pub(crate) fn rebind(
    exec: &AggregateExec,
    changes: &[ArgumentChange],
) -> Result<Option<AggregateExec>> {
    let mut aggregates = exec.aggr_expr().to_vec();
    for change in changes {
        let Some(aggregate) = aggregates.get(change.aggregate) else {
            return Ok(None);
        };
        let mut args = aggregate.expressions();
        let Some(arg) = args.get_mut(change.argument) else {
            return Ok(None);
        };
        let Some(old) = literal_value(arg) else {
            return Ok(None);
        };
        if old.data_type() != change.value.data_type() {
            return Ok(None);
        }
        // A literal the site shares between batches stays shared.
        let literal = Literal::new(change.value.clone());
        *arg = if arg.downcast_ref::<ConstantArgument>().is_some() {
            Arc::new(ConstantArgument::new(literal)) as Arc<dyn PhysicalExpr>
        } else {
            Arc::new(literal)
        };
        let order_by = aggregate
            .order_bys()
            .iter()
            .map(|s| Arc::clone(&s.expr))
            .collect();
        let Some(rebound) = aggregate.with_new_expressions(args, order_by) else {
            return Ok(None);
        };
        aggregates[change.aggregate] = Arc::new(rebound);
    }
    Ok(Some(AggregateExec::try_new(
        *exec.mode(),
        exec.group_expr().clone(),
        aggregates,
        exec.filter_expr().to_vec(),
        Arc::clone(exec.input()),
        exec.input_schema(),
    )?))
}

/// An aggregate call with every literal argument blanked (a typed NULL),
/// for comparing two rounds' calls.
fn blanked(f: &AggregateFunction) -> Option<AggregateFunction> {
    let mut f = f.clone();
    for arg in f.params.args.iter_mut() {
        if let Expr::Literal(value, _) = arg {
            *value = ScalarValue::try_from(value.data_type()).ok()?;
        }
    }
    Some(f)
}

/// The aggregate call of an output expression (under its alias).
fn call(e: &Expr) -> Option<&AggregateFunction> {
    match e {
        Expr::AggregateFunction(f) => Some(f),
        Expr::Alias(alias) => call(&alias.expr),
        _ => None,
    }
}

fn call_mut(e: &mut Expr) -> Option<&mut AggregateFunction> {
    match e {
        Expr::AggregateFunction(f) => Some(f),
        Expr::Alias(alias) => call_mut(&mut alias.expr),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Float64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::physical_plan::{ExecutionPlan, collect};
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::protocol::encoder::partial_aggregate;

    /// A table `t(x, y, g)` and fedsql's aggregates.
    fn context() -> SessionContext {
        let ctx = SessionContext::new();
        fedsql_udfs::register_all(&ctx);
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, false),
            Field::new("y", DataType::Float64, false),
            Field::new("g", DataType::Float64, false),
        ]));
        let column = |f: fn(u32) -> f64| Arc::new(Float64Array::from_iter_values((0..100).map(f)));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                column(|i| f64::from((i * 37) % 101) / 50.0),
                column(|i| f64::from((i * 13) % 7)),
                column(|i| f64::from(i % 3)),
            ],
        )
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        ctx
    }

    /// The optimized plan's aggregate node.
    pub(crate) async fn aggregate(ctx: &SessionContext, sql: &str) -> LogicalPlan {
        let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        let mut found = None;
        plan.apply(|node| {
            if matches!(node, LogicalPlan::Aggregate(_)) {
                found = Some(node.clone());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        found.expect("an aggregate")
    }

    /// The partial aggregate DataFusion plans for an aggregate node.
    pub(crate) async fn partial(ctx: &SessionContext, plan: &LogicalPlan) -> AggregateExec {
        let physical = ctx.state().create_physical_plan(plan).await.unwrap();
        partial_aggregate(&physical).unwrap()
    }

    /// The state batches an aggregate computes.
    pub(crate) async fn run(ctx: &SessionContext, exec: AggregateExec) -> Vec<RecordBatch> {
        let exec: Arc<dyn ExecutionPlan> = Arc::new(exec);
        collect(exec, ctx.task_ctx()).await.unwrap()
    }

    const OLD: &str = "family=poisson;beta=0.5,0.1";
    const NEW: &str = "family=poisson;beta=-0.25,0.75";
    const STEP: &str = "SELECT irls_step('family=poisson;beta=0.5,0.1', y, 1.0, 0.0, 1.0, 1.0, x), count(*) FROM t GROUP BY g";

    #[tokio::test]
    async fn a_rebound_config_is_the_only_change_and_keeps_the_names() {
        let ctx = context();
        let old = aggregate(&ctx, STEP).await;
        assert!(argument_changes(&old, &old).unwrap().is_empty());
        let new = replace_text_argument(&old, OLD, NEW).unwrap();
        assert_eq!(new.schema(), old.schema());
        let changes = argument_changes(&old, &new).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!((changes[0].aggregate, changes[0].argument), (0, 0));
        // The same calls as the SQL with the new config, under the old name.
        let LogicalPlan::Aggregate(planned) = aggregate(&ctx, &STEP.replace(OLD, NEW)).await else {
            unreachable!()
        };
        let LogicalPlan::Aggregate(rebound) = &new else {
            unreachable!()
        };
        assert_eq!(call(&rebound.aggr_expr[0]), call(&planned.aggr_expr[0]));
        assert!(replace_text_argument(&old, "family=gamma", NEW).is_none());
    }

    #[tokio::test]
    async fn other_changes_are_planned_anew() {
        let ctx = context();
        let old = aggregate(&ctx, STEP).await;
        for other in [
            // A fresh plan of another config names its output after it.
            STEP.replace(OLD, NEW),
            STEP.replace("1.0, x)", "1.0, y)"),
            STEP.replace("GROUP BY g", "GROUP BY y"),
            STEP.replace("count(*)", "sum(x)"),
        ] {
            let other = aggregate(&ctx, &other).await;
            assert!(argument_changes(&old, &other).is_none(), "{other}");
        }
    }

    #[tokio::test]
    async fn a_rebound_partial_aggregate_computes_what_a_fresh_plan_does() {
        let ctx = context();
        let old = aggregate(&ctx, STEP).await;
        let new = replace_text_argument(&old, OLD, NEW).unwrap();
        let planned = partial(&ctx, &old).await;
        let rebound = rebind(&planned, &argument_changes(&old, &new).unwrap())
            .unwrap()
            .expect("a literal argument rebinds");
        // What a site that plans the rebound encoder anew computes ...
        let anew = run(&ctx, partial(&ctx, &new).await).await;
        assert_eq!(run(&ctx, rebound).await, anew);
        // ... is the new config's state (under the old name), not the old.
        let fresh = run(
            &ctx,
            partial(&ctx, &aggregate(&ctx, &STEP.replace(OLD, NEW)).await).await,
        )
        .await;
        assert_eq!(anew[0].columns(), fresh[0].columns());
        assert_ne!(run(&ctx, planned).await[0].columns(), fresh[0].columns());
    }
}
