//! Under a disclosure policy, a row's values never decide whether a query
//! fails: a `CAST` that fails on one person's value, or a division by zero
//! inside `CASE WHEN <one person> ...`, would tell the analyst one bit per
//! query. After decoding the encoder and before planning it, the site
//! rewrites `CAST` to `TRY_CAST` and `a / b`, `a % b` to `a / nullif(b, 0)`,
//! `a % nullif(b, 0)`, so such rows give NULL instead of an error. Each
//! rewritten expression keeps its name, so the state's columns are the
//! ones the coordinator expects.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::functions::core::expr_fn::nullif;
use datafusion::logical_expr::{
    BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan, Operator, TryCast,
};

use crate::error::Result;

/// The plan with every failing cast and division made NULL-giving.
pub fn never_fail_on_data(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            // Joins keep their keys as written (they compare, not compute).
            if matches!(node, LogicalPlan::Join(_)) {
                return Ok(Transformed::no(node));
            }
            let inputs = node.inputs();
            let schema: DFSchema = match inputs.as_slice() {
                [input] => input.schema().as_ref().clone(),
                _ => node.schema().as_ref().clone(),
            };
            let keeps_names = !matches!(node, LogicalPlan::Filter(_));
            node.map_expressions(|expr| {
                let name = expr.schema_name().to_string();
                let rewritten = expr.transform_up(|e| rewrite(e, &schema))?;
                if rewritten.transformed && keeps_names && !matches!(rewritten.data, Expr::Alias(_))
                {
                    Ok(Transformed::yes(rewritten.data.alias(name)))
                } else {
                    Ok(rewritten)
                }
            })
        })?
        .data)
}

fn rewrite(e: Expr, schema: &DFSchema) -> datafusion::error::Result<Transformed<Expr>> {
    Ok(match e {
        Expr::Cast(Cast { expr, field }) => {
            Transformed::yes(Expr::TryCast(TryCast { expr, field }))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Divide | Operator::Modulo) && !is_nonzero_literal(&right) =>
        {
            match right
                .get_type(schema)
                .ok()
                .and_then(|t| ScalarValue::new_zero(&t).ok())
            {
                Some(zero) => Transformed::yes(Expr::BinaryExpr(BinaryExpr {
                    left,
                    op,
                    right: Box::new(nullif(*right, Expr::Literal(zero, None))),
                })),
                None => Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })),
            }
        }
        other => Transformed::no(other),
    })
}

/// A constant divisor other than zero (and NULL) fails on no row: the
/// rewrite would only cost a function call per batch.
fn is_nonzero_literal(divisor: &Expr) -> bool {
    match divisor {
        Expr::Literal(value, _) => {
            !value.is_null()
                && ScalarValue::new_zero(&value.data_type()).is_ok_and(|zero| *value != zero)
        }
        _ => false,
    }
}
