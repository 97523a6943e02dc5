//! Statistical models fitted from SQL, as table functions. Each fit is an
//! iterative typed program of federated rounds: only fixed-size aggregate
//! states leave the clients, and only shared values (levels, coefficients)
//! are sent to them.

pub(crate) mod coxph;
pub mod fedsgd;
pub(crate) mod glm;
pub(crate) mod glm_fit;
pub(crate) mod inference;
pub(crate) mod kmeans;
pub(crate) mod lm;
pub(crate) mod optimizer;
pub(crate) mod pca;
pub(crate) mod source;
pub(crate) mod step_rounds;
pub(crate) mod survival;

use std::sync::Arc;

use datafusion::prelude::SessionContext;

/// Registers the model table functions (`lm`, `lm_stats`, `lm_vcov`, `glm`,
/// `glm_stats`, `glm_vcov`,
/// `fedsgd`, `fedsgd_history`) and the analyses (`pca`, `pca_loadings`,
/// `kmeans`, `kmeans_summary`, `kaplan_meier`, `logrank_test`, `coxph`,
/// `coxph_stats`).
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
        "lm_vcov",
        Arc::new(lm::LmFunction {
            output: lm::LmOutput::Vcov,
        }),
    );
    ctx.register_udtf(
        "glm_vcov",
        Arc::new(glm::GlmFunction {
            output: glm::GlmOutput::Vcov,
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
    register_analyses(ctx);
}

/// The multivariate and survival analyses.
fn register_analyses(ctx: &SessionContext) {
    use pca::{PcaFunction, PcaOutput};
    ctx.register_udtf(
        "pca",
        Arc::new(PcaFunction {
            output: PcaOutput::Components,
        }),
    );
    ctx.register_udtf(
        "pca_loadings",
        Arc::new(PcaFunction {
            output: PcaOutput::Loadings,
        }),
    );
    use kmeans::{KmeansFunction, KmeansOutput};
    ctx.register_udtf(
        "kmeans",
        Arc::new(KmeansFunction {
            output: KmeansOutput::Clusters,
        }),
    );
    ctx.register_udtf(
        "kmeans_summary",
        Arc::new(KmeansFunction {
            output: KmeansOutput::Summary,
        }),
    );
    use survival::{SurvivalFunction, SurvivalOutput};
    ctx.register_udtf(
        "kaplan_meier",
        Arc::new(SurvivalFunction {
            output: SurvivalOutput::KaplanMeier,
        }),
    );
    ctx.register_udtf(
        "logrank_test",
        Arc::new(SurvivalFunction {
            output: SurvivalOutput::LogRank,
        }),
    );
    use coxph::{CoxFunction, CoxOutput};
    ctx.register_udtf(
        "coxph",
        Arc::new(CoxFunction {
            output: CoxOutput::Coefficients,
        }),
    );
    ctx.register_udtf(
        "coxph_stats",
        Arc::new(CoxFunction {
            output: CoxOutput::Stats,
        }),
    );
}
