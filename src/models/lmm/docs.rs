//! The documentation of `lmm`, `lmm_varcomp`, `lmm_stats` and `lmm_ranef`
//! (what `SHOW FUNCTIONS`, `\h NAME` and `docs/reference/functions.md` say).

use fedsql_udfs::function_doc::{DocOption, FunctionDoc, FunctionFamily};

const ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "formula",
        "lme4's syntax: fixed effects as `lm`'s, plus one random-effect term `(1 | _client)`, `(1 + x | _client)`, `(0 + x | _client)` or `(1 | g)` for a column `g` whose levels lie within sites",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

const OPTIONS: &[DocOption] = &[DocOption {
    name: "reml",
    default: "true",
    meaning: "fit by REML (as `lmer`'s default) or, with `false`, by maximum likelihood",
}];

const RELEASES: &str = "one round: per group (a site, or a level of the grouping column at a site) one `centered_moments(y, x…, z…)` state — n, the means and the centred cross products, whatever its rows — released only for groups of at least the site's minimum rows; nothing per optimizer step (the criterion is optimised at the coordinator). With factors, a `GROUP BY` round of their levels first.";

/// The documentation of `lmm`.
pub(crate) const LMM_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "A linear mixed model with a random effect per site (or per level of a factor nested within sites), exact as R's `lme4::lmer`: the fixed effects.",
    syntax: "lmm(source, formula [, options])",
    arguments: ARGUMENTS,
    options: OPTIONS,
    returns: "one row per fixed effect: `term, estimate, std_error, statistic` (t, as lmer prints it)",
    releases: RELEASES,
    example: "SELECT * FROM lmm('clinic', 'systolic ~ age + bmi + (1 | _client)')",
};

/// The documentation of `lmm_varcomp`.
pub(crate) const LMM_VARCOMP_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The variance components of a linear mixed model, as `as.data.frame(VarCorr(lmer(...)))`.",
    syntax: "lmm_varcomp(source, formula [, options])",
    arguments: ARGUMENTS,
    options: OPTIONS,
    returns: "one row per variance (`group, term1, variance, std_dev`), per covariance (`term2` and `corr` set) and the residual: `group, term1, term2, variance, std_dev, corr`",
    releases: RELEASES,
    example: "SELECT * FROM lmm_varcomp('clinic', 'systolic ~ age + (1 + age | _client)')",
};

/// The documentation of `lmm_stats`.
pub(crate) const LMM_STATS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The fit statistics of a linear mixed model, as lmer's summary prints them: one row.",
    syntax: "lmm_stats(source, formula [, options])",
    arguments: ARGUMENTS,
    options: OPTIONS,
    returns: "one row: `nobs, ngroups, sigma, log_likelihood, aic, bic, reml_criterion` (NULL for an ML fit), `converged, iterations` (criterion evaluations)",
    releases: RELEASES,
    example: "SELECT * FROM lmm_stats('clinic', 'systolic ~ age + (1 | _client)')",
};

/// The documentation of `lmm_ranef`.
pub(crate) const LMM_RANEF_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The conditional modes of a linear mixed model's random effects, as `ranef(lmer(...), condVar = TRUE)`.",
    syntax: "lmm_ranef(source, formula [, options])",
    arguments: ARGUMENTS,
    options: OPTIONS,
    returns: "one row per random effect and group: `group, level, term, estimate, cond_std_error`",
    releases: RELEASES,
    example: "SELECT * FROM lmm_ranef('clinic', 'systolic ~ age + (1 | _client)')",
};
