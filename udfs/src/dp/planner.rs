//! The SQL planner hook for `dp_count(*)` and `secure_dp_count(*)`:
//! DataFusion turns `*` into a wildcard that it rewrites only for `count`;
//! this [`ExprPlanner`] turns `dp_count(*[, epsilon])` into
//! `dp_count(1[, epsilon])` (and the same for `secure_dp_count`) and keeps
//! the display name `dp_count(*)`, as DataFusion does for `count(*)`.

use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr::{AggregateFunction, AggregateFunctionParams};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawAggregateExpr};

/// Plans `dp_count(*)` (see the module docs).
#[derive(Debug, Default)]
pub struct DpCountStarPlanner;

impl ExprPlanner for DpCountStarPlanner {
    fn plan_aggregate(&self, raw: RawAggregateExpr) -> Result<PlannerResult<RawAggregateExpr>> {
        #[expect(deprecated)]
        let star = matches!(raw.func.name(), "dp_count" | "secure_dp_count")
            && matches!(raw.args.first(), Some(Expr::Wildcard { .. }));
        if !star {
            return Ok(PlannerResult::Original(raw));
        }
        let RawAggregateExpr {
            func,
            mut args,
            distinct,
            filter,
            order_by,
            null_treatment,
        } = raw;
        // The name as written: `dp_count(*)` (and the epsilon, if given).
        let written = Expr::AggregateFunction(AggregateFunction {
            func: func.clone(),
            params: AggregateFunctionParams {
                args: args.clone(),
                distinct,
                filter: filter.clone(),
                order_by: order_by.clone(),
                null_treatment,
            },
        });
        let saved = NamePreserver::new_for_projection().save(&written);
        args[0] = Expr::Literal(ScalarValue::Int64(Some(1)), None);
        let planned = Expr::AggregateFunction(AggregateFunction::new_udf(
            func,
            args,
            distinct,
            filter,
            order_by,
            null_treatment,
        ));
        Ok(PlannerResult::Planned(saved.restore(planned)))
    }
}
