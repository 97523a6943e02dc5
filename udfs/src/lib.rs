//! Mergeable aggregate functions and shared-only math for fedsql.
//!
//! Every aggregate here has a fixed-size state that merges as a commutative
//! monoid, so fedsql can run its partial half at each client and merge the
//! states on the coordinator. [`register_all`] adds them to a context, and
//! [`is_bounded`] tells fedsql's exposure check that they are safe to run
//! over federated rows; [`is_secure`] names those whose state is a sum mod
//! 2^64 that clients may mask (secure aggregation). [`linalg`] is the linear algebra the decoders run on
//! merged matrices.

pub mod centered_moments;
pub mod comoments;
pub mod constant_argument;
pub mod correlation_matrix;
pub mod covariance_matrix;
pub mod cox_step;
pub mod dp;
pub mod family;
pub mod flat_state;
pub mod gram;
pub mod histogram;
pub mod irls_canonical;
pub mod irls_step;
pub mod kmeans_step;
pub mod labeled;
pub mod lanes;
pub mod life_table;
pub mod linalg;
pub mod normal_equations;
pub mod ols;
pub mod quantizer;
pub mod secure_avg;
pub mod secure_count;
pub mod secure_quantized;
pub mod secure_sum;
pub mod secure_sum_vec;
pub mod sgd_step;
#[cfg(test)]
mod testing;

pub use secure_quantized::is_secure;

use datafusion::logical_expr::AggregateUDF;
use datafusion::prelude::SessionContext;

/// Every aggregate function of this crate.
pub fn all() -> Vec<AggregateUDF> {
    vec![
        covariance_matrix::covariance_matrix(),
        correlation_matrix::correlation_matrix(),
        normal_equations::normal_equations(),
        normal_equations::normal_equations_no_intercept(),
        centered_moments::centered_moments(),
        AggregateUDF::from(irls_step::IrlsStep::default()),
        sgd_step::sgd_gradient(),
        sgd_step::sgd_newton(),
        kmeans_step::kmeans_step(),
        life_table::life_table(),
        cox_step::cox_step(),
        secure_sum::secure_sum(),
        secure_avg::secure_avg(),
        secure_count::secure_count(),
        secure_sum_vec::secure_sum_vec(),
        histogram::histogram(),
    ]
    .into_iter()
    .chain(dp::all())
    .collect()
}

/// Registers every aggregate function of this crate.
pub fn register_all(ctx: &SessionContext) {
    for udaf in all() {
        ctx.register_udaf(udaf);
    }
    use datafusion::execution::FunctionRegistry;
    let planner = std::sync::Arc::new(dp::planner::DpCountStarPlanner);
    let _ = ctx.state_ref().write().register_expr_planner(planner);
}

/// The cells a state releases counts of, which a disclosure policy holds
/// to its minimum at each site: per cluster the rows of `kmeans_step`
/// (called with `args` arguments), per interval the events and the
/// censorings of `life_table` (and the rows before and beyond its grid).
/// `None` for any other aggregate, or a state of another length.
pub fn released_cells(name: &str, args: usize, state: &[f64]) -> Option<Vec<f64>> {
    match name {
        "kmeans_step" => {
            let width = args.checked_sub(1)? + 2;
            let blocks = state.len().checked_sub(1)?;
            (blocks % width == 0).then(|| state[..blocks].chunks(width).map(|b| b[0]).collect())
        }
        "life_table" => {
            let table = (state.len() >= 5 && state.len() % 2 == 1)
                .then(|| life_table::LifeTable::from_slice(state))?;
            let mut cells = table.events;
            cells.extend(table.censored);
            cells.extend([table.before, table.beyond]);
            Some(cells)
        }
        _ => None,
    }
}

/// How many model parameters (design columns) a call of a model-round or
/// matrix aggregate with `args` arguments estimates, for a site's
/// `max_parameter_ratio` policy; `None` for other aggregates.
pub fn model_parameters(name: &str, args: usize) -> Option<usize> {
    let leading = match name {
        // config, y, trials, offset, weight, x...
        "irls_step" => 5,
        // config, y, offset, x...
        "sgd_gradient" | "sgd_newton" => 3,
        // config, stratum, time, event, weight, x...
        "cox_step" => 5,
        // y, x... with the intercept: as many parameters as arguments
        "normal_equations" => 0,
        "normal_equations_no_intercept" => 1,
        "centered_moments" | "covariance_matrix" | "correlation_matrix" => 0,
        _ => return None,
    };
    Some(args.saturating_sub(leading))
}

/// Whether `name` is one of this crate's (bounded-state) aggregates.
pub fn is_bounded(name: &str) -> bool {
    all()
        .iter()
        .any(|f| f.name() == name || f.aliases().iter().any(|a| a == name))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    #[test]
    fn names_are_unique() {
        let mut seen = HashSet::new();
        for f in super::all() {
            for name in std::iter::once(f.name().to_string()).chain(f.aliases().iter().cloned()) {
                assert!(seen.insert(name.clone()), "duplicate aggregate name {name}");
            }
        }
    }

    #[tokio::test]
    async fn every_registered_aggregate_merges_like_one_pass() {
        for f in super::all() {
            let call = match f.name() {
                // Leading arguments: config, y, trials, offset, weight.
                "irls_step" => {
                    "irls_step('family=gaussian;beta=1.0,0.5', c, 1.0, 0.0, 1.0, a, b)".to_string()
                }
                "sgd_gradient" | "sgd_newton" => {
                    format!("{}('model=linear;theta=1.0,0.5', c, 0.0, a, b)", f.name())
                }
                "secure_sum" | "secure_avg" => format!("{}(a, 990, 1010)", f.name()),
                "secure_count" => "secure_count(b)".to_string(),
                "secure_sum_vec" => "secure_sum_vec([a, b], [990, -1], [1010, 1])".to_string(),
                "histogram" => "histogram(a, 995, 1008, 7)".to_string(),
                "dp_count" => "dp_count(a)".to_string(),
                "dp_sum" | "dp_avg" | "dp_var" => format!("{}(a, 990, 1010)", f.name()),
                "dp_histogram" => "dp_histogram(a, 995, 1008, 7)".to_string(),
                "kmeans_step" => "kmeans_step('centers=1000,0;1003,0.01', a, b)".to_string(),
                "life_table" => "life_table('breaks=999,1000,1004', a, 1)".to_string(),
                "cox_step" => {
                    "cox_step('beta=0.1', 0, a, CASE WHEN b > 0 THEN 1 ELSE 0 END, 1.0, c)"
                        .to_string()
                }
                name => format!("{name}(a, b, c)"),
            };
            crate::testing::assert_split_invariant(&call).await;
        }
    }
}
