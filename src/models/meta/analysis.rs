//! The vocabulary of a meta-analysis: which model is fitted at each site,
//! how the estimates are pooled, and the pooled result per term (shared by
//! the table functions and the printout).

use super::pooling::{Method, Pooled, Test};

/// Which per-site model is pooled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaModel {
    Lm,
    Glm,
    Coxph,
}

impl MetaModel {
    pub(crate) fn name(self) -> &'static str {
        match self {
            MetaModel::Lm => "lm_meta",
            MetaModel::Glm => "glm_meta",
            MetaModel::Coxph => "coxph_meta",
        }
    }

    pub(crate) fn usage(self) -> &'static str {
        match self {
            MetaModel::Lm => {
                "lm_meta('table', 'y ~ x1 + x2' [, 'method=REML|DL|PM|FE, level=0.95, test=z|knha'])"
            }
            MetaModel::Glm => {
                "glm_meta('table', 'y ~ x1 + x2', 'family[(link)]' [, 'method=REML|DL|PM|FE, level=0.95, test=z|knha, maxit=25, epsilon=1e-8, weights=col'])"
            }
            MetaModel::Coxph => {
                "coxph_meta('table', 'Surv(time, event) ~ x1 + x2' [, 'method=REML|DL|PM|FE, level=0.95, test=z|knha, ties=efron, max_iter=20, tolerance=1e-9, weights=col'])"
            }
        }
    }

    /// The model's own option keys.
    pub(crate) fn model_options(self) -> &'static [&'static str] {
        match self {
            MetaModel::Lm => &[],
            MetaModel::Glm => &["maxit", "epsilon", "weights"],
            MetaModel::Coxph => &["ties", "max_iter", "tolerance", "weights"],
        }
    }

    /// The R function fitted at each site.
    pub(crate) fn r_function(self) -> &'static str {
        match self {
            MetaModel::Lm => "lm",
            MetaModel::Glm => "glm",
            MetaModel::Coxph => "coxph",
        }
    }
}

/// How the per-site estimates are pooled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MetaOptions {
    pub method: Method,
    pub level: f64,
    pub test: Test,
}

/// One term's per-site estimates and its pooled models.
#[derive(Debug, Clone)]
pub(crate) struct TermAnalysis {
    pub term: String,
    /// (site, estimate, standard error), in the table's order of sites.
    pub sites: Vec<(String, f64, f64)>,
    pub fixed: Pooled,
    /// `None` for `method=FE`.
    pub random: Option<Pooled>,
}

/// A whole meta-analysis.
#[derive(Debug, Clone)]
pub(crate) struct Analysis {
    pub options: MetaOptions,
    pub terms: Vec<TermAnalysis>,
}

impl TermAnalysis {
    /// The model whose weights the site rows show: the random-effects one,
    /// or the fixed-effect one for `method=FE`.
    pub(crate) fn main(&self) -> &Pooled {
        self.random.as_ref().unwrap_or(&self.fixed)
    }
}
