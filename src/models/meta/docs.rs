//! The documentation of `lm_meta`, `glm_meta` and `coxph_meta` (what
//! `SHOW FUNCTIONS`, `\h NAME` and `docs/reference/functions.md` say).

use fedsql_udfs::function_doc::{DocOption, FunctionDoc, FunctionFamily};

/// The options of every meta-analysis (the model's own follow them).
const META_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "method",
        default: "REML",
        meaning: "the between-site variance τ²: `REML` (Fisher scoring, as metafor), `DL` (DerSimonian–Laird), `PM` (Paule–Mandel) or `FE` (fixed effect only)",
    },
    DocOption {
        name: "level",
        default: "0.95",
        meaning: "the confidence level of the intervals",
    },
    DocOption {
        name: "test",
        default: "z",
        meaning: "the test of the pooled estimates: `z`, or `knha` (Knapp–Hartung, t with k − 1 df)",
    },
];

/// `glm_meta`'s options: the pooling's, then `glm`'s.
const GLM_META_OPTIONS: &[DocOption] = &[
    META_OPTIONS[0],
    META_OPTIONS[1],
    META_OPTIONS[2],
    DocOption {
        name: "maxit",
        default: "25",
        meaning: "each site's fit: the most IRLS rounds",
    },
    DocOption {
        name: "epsilon",
        default: "1e-8",
        meaning: "each site's fit: the relative deviance change that ends IRLS",
    },
    DocOption {
        name: "weights",
        default: "none",
        meaning: "each site's fit: a column of prior weights",
    },
];

/// `coxph_meta`'s options: the pooling's, then `coxph`'s.
const COXPH_META_OPTIONS: &[DocOption] = &[
    META_OPTIONS[0],
    META_OPTIONS[1],
    META_OPTIONS[2],
    DocOption {
        name: "ties",
        default: "efron",
        meaning: "each site's fit: `efron` or `breslow`",
    },
    DocOption {
        name: "max_iter",
        default: "20",
        meaning: "each site's fit: the most Newton rounds",
    },
    DocOption {
        name: "tolerance",
        default: "1e-9",
        meaning: "each site's fit: the relative log-likelihood change that ends it",
    },
    DocOption {
        name: "weights",
        default: "none",
        meaning: "each site's fit: a column of case weights",
    },
];

const RETURNS: &str = "per term, one `site` row per site kept (its estimate, `std_error`, z `statistic`, `p_value`, interval, and its `weight` in percent in the pooled model), then the pooled `fixed` row and, unless `method=FE`, the `random` row with `tau2`, `i2` (percent), Cochran's `q`, `q_df` and `q_p_value`: columns `term, level, site, estimate, std_error, statistic, p_value, conf_low, conf_high, weight, tau2, i2, q, q_df, q_p_value`";

const RELEASES: &str = "at each site, exactly what the model's own fit at that site alone releases, under that site's disclosure policy (a site that refuses, fails or does not converge is left out with a notice naming it); the pooling runs at the coordinator on the released estimates.";

/// The documentation of `lm_meta`.
pub(crate) const LM_META_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "Meta-analysis of per-site linear regressions, as `metafor::rma(yi, sei = se, method)` on R's `lm` at each site (DataSHIELD's `ds.glmSLMA`).",
    syntax: "lm_meta(source, formula [, options])",
    arguments: &[
        (
            "source",
            "a federated table's name, or a query string over one",
        ),
        ("formula", "an R formula, as `lm`'s"),
        ("options", "optional `key=value, ...` (the options below)"),
    ],
    options: META_OPTIONS,
    returns: RETURNS,
    releases: RELEASES,
    example: "SELECT * FROM lm_meta('clinic', 'systolic ~ age + bmi')",
};

/// The documentation of `glm_meta`.
pub(crate) const GLM_META_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "Meta-analysis of per-site GLMs, as `metafor::rma(yi, sei = se, method)` on R's `glm` at each site (DataSHIELD's `ds.glmSLMA`).",
    syntax: "glm_meta(source, formula, family [, options])",
    arguments: &[
        (
            "source",
            "a federated table's name, or a query string over one",
        ),
        ("formula", "an R formula, as `glm`'s"),
        (
            "family",
            "as `glm`'s: `binomial`, `poisson`, `gaussian`, `gamma(log)`, ...",
        ),
        (
            "options",
            "optional `key=value, ...`: the options below, and `glm`'s `maxit`, `epsilon`, `weights`",
        ),
    ],
    options: GLM_META_OPTIONS,
    returns: RETURNS,
    releases: RELEASES,
    example: "SELECT * FROM glm_meta('clinic', 'event ~ age + smoker', 'binomial')",
};

/// The documentation of `coxph_meta`.
pub(crate) const COXPH_META_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "Meta-analysis of per-site Cox models, as `metafor::rma(yi, sei = se, method)` on R's `coxph` at each site.",
    syntax: "coxph_meta(source, formula [, options])",
    arguments: &[
        (
            "source",
            "a federated table's name, or a query string over one",
        ),
        ("formula", "`Surv(time, event) ~ terms`, as `coxph`'s"),
        (
            "options",
            "optional `key=value, ...`: the options below, and `coxph`'s `ties`, `max_iter`, `tolerance`, `weights`",
        ),
    ],
    options: COXPH_META_OPTIONS,
    returns: RETURNS,
    releases: RELEASES,
    example: "SELECT * FROM coxph_meta('lung', 'Surv(time, status) ~ age + sex')",
};
