//! Statistical models fitted from SQL, as table functions. Each fit is an
//! iterative typed program of federated rounds: only fixed-size aggregate
//! states leave the clients, and only shared values (levels, coefficients)
//! are sent to them.

pub mod fedsgd;
pub mod fit_table;
pub mod glm;
pub mod inference;
pub mod lm;
pub mod optimizer;
pub mod options;
pub mod source;

use std::sync::Arc;

use datafusion::prelude::SessionContext;

/// Registers the model table functions (`lm`, `lm_stats`, `glm`, `glm_stats`,
/// `fedsgd`, `fedsgd_history`).
pub fn register_all(ctx: &SessionContext) {
    ctx.register_udtf(
        "lm",
        Arc::new(lm::LmFunction {
            output: lm::LmOutput::Coefficients,
        }),
    );
    ctx.register_udtf(
        "lm_stats",
        Arc::new(lm::LmFunction {
            output: lm::LmOutput::Stats,
        }),
    );
    ctx.register_udtf(
        "glm",
        Arc::new(glm::GlmFunction {
            output: glm::GlmOutput::Coefficients,
        }),
    );
    ctx.register_udtf(
        "glm_stats",
        Arc::new(glm::GlmFunction {
            output: glm::GlmOutput::Stats,
        }),
    );
    ctx.register_udtf(
        "fedsgd",
        Arc::new(fedsgd::FedSgdFunction {
            output: fedsgd::FedSgdOutput::Coefficients,
        }),
    );
    ctx.register_udtf(
        "fedsgd_history",
        Arc::new(fedsgd::FedSgdFunction {
            output: fedsgd::FedSgdOutput::History,
        }),
    );
}
