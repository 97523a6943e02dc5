//! Mergeable aggregate functions and shared-only math for fedsql.
//!
//! Every aggregate here has a fixed-size state that merges as a commutative
//! monoid, so fedsql can run its partial half at each client and merge the
//! states on the coordinator. [`register_all`] adds them to a context;
//! [`catalogue`] holds the facts a site needs about every function it lets
//! run over its rows (these aggregates and DataFusion's), and is the only
//! place that lists them. [`linalg`] is the linear algebra the decoders run
//! on merged matrices.

pub mod catalogue;
pub mod centered_moments;
pub mod comoments;
pub mod constant_argument;
pub mod correlation_matrix;
pub mod covariance_matrix;
pub mod cox_step;
pub mod distribution;
pub mod dp;
pub mod family;
pub mod flat_state;
pub mod function_doc;
pub mod gram;
pub mod histogram;
pub mod irls_canonical;
pub mod irls_step;
pub mod kmeans_step;
pub mod labeled;
pub mod lanes;
pub mod life_table;
pub mod linalg;
pub mod nb_theta_step;
pub mod normal_equations;
pub mod ols;
pub mod quantizer;
pub mod sandwich_step;
pub mod secure_avg;
pub mod secure_count;
pub mod secure_quantized;
pub mod secure_sum;
pub mod secure_sum_vec;
pub mod sgd_step;
#[cfg(test)]
mod testing;

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
        AggregateUDF::from(sandwich_step::SandwichStep::default()),
        AggregateUDF::from(nb_theta_step::NbThetaStep::default()),
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
                "sandwich_step" => {
                    "sandwich_step('family=gaussian;beta=1.0,0.5', c, 1.0, 0.0, 1.0, a, b)"
                        .to_string()
                }
                "nb_theta_step" => {
                    "nb_theta_step('theta=2.5;beta=0.006,0.0', c, 1.0, 0.0, 1.0, a, b)".to_string()
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
                "secure_dp_count" => "secure_dp_count(a)".to_string(),
                "secure_dp_sum" | "secure_dp_avg" => format!("{}(a, 990, 1010)", f.name()),
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
