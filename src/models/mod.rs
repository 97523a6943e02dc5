//! Statistical models fitted from SQL, as table functions. Each fit is an
//! iterative typed program of federated rounds: only fixed-size aggregate
//! states leave the clients, and only shared values (levels, coefficients)
//! are sent to them.

pub(crate) mod coxph;
mod docs;
pub mod fedsgd;
pub(crate) mod glm;
pub(crate) mod glm_fit;
pub(crate) mod inference;
pub(crate) mod kmeans;
pub(crate) mod lm;
pub(crate) mod lmm;
pub(crate) mod meta;
pub(crate) mod optimizer;
pub(crate) mod pca;
pub(crate) mod robust;
pub(crate) mod source;
pub(crate) mod step_rounds;
pub(crate) mod survival;
pub(crate) mod survival_grid;

use datafusion::prelude::SessionContext;

use crate::coordinator::function_docs::register_table_function as register;

/// Registers the model table functions (`lm`, `lm_stats`, `lm_vcov`, `glm`,
/// `glm_stats`, `glm_vcov`, `glm_nb`, `glm_nb_stats`, `glm_nb_vcov`,
/// `fedsgd`, `fedsgd_history`) and the analyses (`pca`, `pca_loadings`,
/// `kmeans`, `kmeans_summary`, `kaplan_meier`, `logrank_test`, `coxph`,
/// `coxph_stats`) and the meta-analyses of per-site fits (`lm_meta`,
/// `glm_meta`, `coxph_meta`) and the linear mixed models (`lmm`,
/// `lmm_varcomp`, `lmm_stats`, `lmm_ranef`).
pub fn register_all(ctx: &SessionContext) {
    register(
        ctx,
        "lm",
        &docs::LM_DOC,
        lm::LmFunction {
            output: lm::LmOutput::Coefficients,
        },
    );
    register(
        ctx,
        "lm_stats",
        &docs::LM_STATS_DOC,
        lm::LmFunction {
            output: lm::LmOutput::Stats,
        },
    );
    register(
        ctx,
        "lm_vcov",
        &docs::LM_VCOV_DOC,
        lm::LmFunction {
            output: lm::LmOutput::Vcov,
        },
    );
    register(
        ctx,
        "glm_vcov",
        &docs::GLM_VCOV_DOC,
        glm::GlmFunction {
            output: glm::GlmOutput::Vcov,
        },
    );
    register(
        ctx,
        "glm",
        &docs::GLM_DOC,
        glm::GlmFunction {
            output: glm::GlmOutput::Coefficients,
        },
    );
    register(
        ctx,
        "glm_stats",
        &docs::GLM_STATS_DOC,
        glm::GlmFunction {
            output: glm::GlmOutput::Stats,
        },
    );
    for (name, doc, output) in [
        ("glm_nb", &glm::nb::GLM_NB_DOC, glm::GlmOutput::Coefficients),
        (
            "glm_nb_stats",
            &glm::nb::GLM_NB_STATS_DOC,
            glm::GlmOutput::Stats,
        ),
        (
            "glm_nb_vcov",
            &glm::nb::GLM_NB_VCOV_DOC,
            glm::GlmOutput::Vcov,
        ),
    ] {
        register(ctx, name, doc, glm::nb::GlmNbFunction { output });
    }
    register(
        ctx,
        "fedsgd",
        &docs::FEDSGD_DOC,
        fedsgd::FedSgdFunction {
            output: fedsgd::FedSgdOutput::Coefficients,
        },
    );
    register(
        ctx,
        "fedsgd_history",
        &docs::FEDSGD_HISTORY_DOC,
        fedsgd::FedSgdFunction {
            output: fedsgd::FedSgdOutput::History,
        },
    );
    register_analyses(ctx);
}

/// The multivariate and survival analyses.
fn register_analyses(ctx: &SessionContext) {
    use pca::{PcaFunction, PcaOutput};
    register(
        ctx,
        "pca",
        &docs::PCA_DOC,
        PcaFunction {
            output: PcaOutput::Components,
        },
    );
    register(
        ctx,
        "pca_loadings",
        &docs::PCA_LOADINGS_DOC,
        PcaFunction {
            output: PcaOutput::Loadings,
        },
    );
    use kmeans::{KmeansFunction, KmeansOutput};
    register(
        ctx,
        "kmeans",
        &docs::KMEANS_DOC,
        KmeansFunction {
            output: KmeansOutput::Clusters,
        },
    );
    register(
        ctx,
        "kmeans_summary",
        &docs::KMEANS_SUMMARY_DOC,
        KmeansFunction {
            output: KmeansOutput::Summary,
        },
    );
    use survival::{SurvivalFunction, SurvivalOutput};
    register(
        ctx,
        "kaplan_meier",
        &docs::KAPLAN_MEIER_DOC,
        SurvivalFunction {
            output: SurvivalOutput::KaplanMeier,
        },
    );
    register(
        ctx,
        "logrank_test",
        &docs::LOGRANK_TEST_DOC,
        SurvivalFunction {
            output: SurvivalOutput::LogRank,
        },
    );
    use coxph::{CoxFunction, CoxOutput};
    register(
        ctx,
        "coxph",
        &docs::COXPH_DOC,
        CoxFunction {
            output: CoxOutput::Coefficients,
        },
    );
    register(
        ctx,
        "coxph_stats",
        &docs::COXPH_STATS_DOC,
        CoxFunction {
            output: CoxOutput::Stats,
        },
    );
    use meta::{MetaFunction, MetaModel, docs as meta_docs};
    for (name, doc, model) in [
        ("lm_meta", &meta_docs::LM_META_DOC, MetaModel::Lm),
        ("glm_meta", &meta_docs::GLM_META_DOC, MetaModel::Glm),
        ("coxph_meta", &meta_docs::COXPH_META_DOC, MetaModel::Coxph),
    ] {
        register(ctx, name, doc, MetaFunction { model });
    }
    use lmm::{LmmFunction, LmmOutput, docs as lmm_docs};
    for (name, doc, output) in [
        ("lmm", &lmm_docs::LMM_DOC, LmmOutput::FixedEffects),
        (
            "lmm_varcomp",
            &lmm_docs::LMM_VARCOMP_DOC,
            LmmOutput::VarComp,
        ),
        ("lmm_stats", &lmm_docs::LMM_STATS_DOC, LmmOutput::Stats),
        (
            "lmm_ranef",
            &lmm_docs::LMM_RANEF_DOC,
            LmmOutput::RandomEffects,
        ),
    ] {
        register(ctx, name, doc, LmmFunction { output });
    }
}
