//! The documentation of the model table functions: what `SHOW FUNCTIONS`,
//! `\h NAME` and `docs/reference/functions.md` say about each (see
//! `fedsql_udfs::function_doc`). [`super::register_all`] registers every
//! function with its entry here.

use fedsql_udfs::function_doc::{DocOption, FunctionDoc, FunctionFamily};

// `lm`
/// The arguments of the functions documented below.
const LM_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "formula",
        "an R formula: `y ~ a + b`, factors `C(g)`, `factor(g)`, `relevel(g, \"ref\")`, interactions `a:b`, `a*b`, `- 1`, `I(...)`, `log(x)`, `y ~ .`",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of `lm`, `lm_stats` and `lm_vcov`.
const LM_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "se",
        default: "classical",
        meaning: "`HC0`, `HC1`, `HC2`, `HC3` (sandwich::vcovHC) or `cluster` (sandwich::vcovCL, HC1, clusters = sites unless `cluster=`)",
    },
    DocOption {
        name: "cluster",
        default: "the site",
        meaning: "the column whose values are the clusters of `se=cluster` (alone, it implies it)",
    },
    DocOption {
        name: "names",
        default: "patsy",
        meaning: "`r`: terms named as R names them (`sexM`, `age:sexM`)",
    },
    DocOption {
        name: "weights",
        default: "none",
        meaning: "a column of non-negative prior weights (R's `lm(weights=)`: weighted least squares; rows of weight 0 are dropped)",
    },
];

/// The documentation of `lm`.
pub(crate) const LM_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "Linear regression by least squares, R's `lm`: one row per term with its estimate and inference.",
    syntax: "lm(source, formula [, options])",
    arguments: LM_ARGUMENTS,
    options: LM_OPTIONS,
    returns: "one row per term: `term, estimate, std_error, statistic` (t), `p_value, conf_low, conf_high` (95%); an aliased term has a NULL estimate",
    releases: "one `centered_moments(y, x1, ..., xk)` state: n, k + 1 means and the (k + 1)² centred cross products, whatever its rows; with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM lm('clinic', 'systolic ~ age + bmi + smoker')",
};

/// The documentation of `lm_stats`.
pub(crate) const LM_STATS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The fit statistics of a linear regression, R's `summary(lm(...))`: one row.",
    syntax: "lm_stats(source, formula [, options])",
    arguments: LM_ARGUMENTS,
    options: LM_OPTIONS,
    returns: "one row: `nobs, df_model, df_residual, r_squared, adj_r_squared, sigma, f_statistic, f_p_value, log_likelihood, aic, bic, rows_dropped`",
    releases: "one `centered_moments(y, x1, ..., xk)` state: n, k + 1 means and the (k + 1)² centred cross products, whatever its rows; with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM lm_stats('clinic', 'systolic ~ age + bmi + smoker')",
};

/// The documentation of `lm_vcov`.
pub(crate) const LM_VCOV_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The covariance matrix of a linear regression's estimates, R's `vcov(lm(...))`, in long form.",
    syntax: "lm_vcov(source, formula [, options])",
    arguments: LM_ARGUMENTS,
    options: LM_OPTIONS,
    returns: "one row per pair of terms: `term1, term2, covariance` (NULL for an aliased term); the REPL's table format shows it as a matrix",
    releases: "one `centered_moments(y, x1, ..., xk)` state: n, k + 1 means and the (k + 1)² centred cross products, whatever its rows; with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM lm_vcov('clinic', 'systolic ~ age + bmi')",
};

// `glm`
/// The arguments of the functions documented below.
const GLM_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "formula",
        "an R formula: `y ~ a + b`, factors `C(g)`, `factor(g)`, `relevel(g, \"ref\")`, interactions `a:b`, `a*b`, `- 1`, `I(...)`, `log(x)`, `y ~ .`; `cbind(successes, failures)`, logical and text binomial responses, `offset(expr)`",
    ),
    (
        "family",
        "`gaussian`, `binomial`, `poisson`, `gamma`, `inverse_gaussian`, `quasibinomial`, `quasipoisson` or `negative.binomial(theta)`, optionally with a link: `gamma(log)`",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of the functions documented below.
const GLM_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "maxit",
        default: "25",
        meaning: "the most IRLS rounds",
    },
    DocOption {
        name: "epsilon",
        default: "1e-8",
        meaning: "stop when abs(dev − dev_old) / (abs(dev) + 0.1) < epsilon",
    },
    DocOption {
        name: "weights",
        default: "none",
        meaning: "a column of prior weights",
    },
    DocOption {
        name: "se",
        default: "classical",
        meaning: "`HC0`, `HC1`, `HC2`, `HC3` (sandwich::vcovHC) or `cluster` (sandwich::vcovCL, HC0, clusters = sites unless `cluster=`)",
    },
    DocOption {
        name: "cluster",
        default: "the site",
        meaning: "the column whose values are the clusters of `se=cluster` (alone, it implies it)",
    },
    DocOption {
        name: "names",
        default: "patsy",
        meaning: "`r`: terms named as R names them (`sexM`, `age:sexM`)",
    },
];

/// The documentation of `glm`.
pub(crate) const GLM_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "A generalized linear model by federated IRLS, R's `glm`: one row per term.",
    syntax: "glm(source, formula, family [, options])",
    arguments: GLM_ARGUMENTS,
    options: GLM_OPTIONS,
    returns: "one row per term: `term, estimate, std_error, statistic, p_value, conf_low, conf_high` (Wald, 95%); `statistic` is z for binomial and poisson, t for the families with an estimated dispersion",
    releases: "per IRLS round one `irls_step` state: X'WX, X'Wz, its deviance, Pearson χ², log-likelihood terms and counts (k² + k + 12 numbers, whatever its rows); with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM glm('clinic', 'event ~ age + bmi + smoker', 'binomial')",
};

/// The documentation of `glm_stats`.
pub(crate) const GLM_STATS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The fit statistics of a generalized linear model: one row.",
    syntax: "glm_stats(source, formula, family [, options])",
    arguments: GLM_ARGUMENTS,
    options: GLM_OPTIONS,
    returns: "one row: `family, link, nobs, rows_dropped, df_null, df_residual, null_deviance, deviance, dispersion, log_likelihood, aic, bic, iterations, converged`",
    releases: "per IRLS round one `irls_step` state: X'WX, X'Wz, its deviance, Pearson χ², log-likelihood terms and counts (k² + k + 12 numbers, whatever its rows); with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM glm_stats('clinic', 'event ~ age + bmi + smoker', 'binomial')",
};

/// The documentation of `glm_vcov`.
pub(crate) const GLM_VCOV_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The covariance matrix of a generalized linear model's estimates, R's `vcov(glm(...))`, in long form.",
    syntax: "glm_vcov(source, formula, family [, options])",
    arguments: GLM_ARGUMENTS,
    options: GLM_OPTIONS,
    returns: "one row per pair of terms: `term1, term2, covariance` (NULL for an aliased term)",
    releases: "per IRLS round one `irls_step` state: X'WX, X'Wz, its deviance, Pearson χ², log-likelihood terms and counts (k² + k + 12 numbers, whatever its rows); with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM glm_vcov('clinic', 'event ~ age + bmi', 'binomial')",
};

// `fedsgd`
/// The arguments of the functions documented below.
const FEDSGD_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "formula",
        "an R formula: `y ~ a + b`, factors `C(g)`, interactions `a:b`, `a*b`, `- 1`, `I(...)`, `log(x)`, `y ~ .`; `offset(col)`",
    ),
    ("model", "`linear`, `logistic` or `poisson`"),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of the functions documented below.
const FEDSGD_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "optimizer",
        default: "sgd",
        meaning: "`sgd`, `momentum`, `adam`, `adagrad` or `newton`",
    },
    DocOption {
        name: "learning_rate",
        default: "0.01 (sgd, momentum), 0.001 (adam, adagrad), 1 (newton)",
        meaning: "the step size, positive",
    },
    DocOption {
        name: "rounds",
        default: "100",
        meaning: "rounds to run, at least 1",
    },
    DocOption {
        name: "tolerance",
        default: "0 (off)",
        meaning: "stop when the gradient norm falls below it",
    },
    DocOption {
        name: "l2",
        default: "0",
        meaning: "L2 penalty on every coefficient but the intercept",
    },
    DocOption {
        name: "weighting",
        default: "num_examples",
        meaning: "`num_examples`: the mean gradient over all examples; `uniform`: the mean of the sites' mean gradients",
    },
    DocOption {
        name: "clients_per_round",
        default: "all",
        meaning: "sample that many sites per round, without replacement",
    },
    DocOption {
        name: "seed",
        default: "0",
        meaning: "the seed of the sampling",
    },
    DocOption {
        name: "standardize",
        default: "false",
        meaning: "fit on (x − mean) / sd from one more round first; coefficients are reported on the original scale",
    },
    DocOption {
        name: "start",
        default: "mean",
        meaning: "`mean`: the intercept starts at the intercept-only fit; `zero`: everything at 0",
    },
    DocOption {
        name: "momentum, nesterov",
        default: "0.9, false",
        meaning: "momentum optimizer: heavy ball, or Nesterov's",
    },
    DocOption {
        name: "beta1, beta2, epsilon",
        default: "0.9, 0.999, 1e-7",
        meaning: "adam",
    },
    DocOption {
        name: "initial_accumulator_value, epsilon",
        default: "0.1, 1e-7",
        meaning: "adagrad",
    },
    DocOption {
        name: "damping",
        default: "0",
        meaning: "newton: θ ← θ − η (H + λI)⁻¹ g with λ = damping",
    },
];

/// The documentation of `fedsgd`.
pub(crate) const FEDSGD_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "Federated SGD (FedSGD) with a server-side optimizer: the coefficients after the last round, on the original scale.",
    syntax: "fedsgd(source, formula, model [, options])",
    arguments: FEDSGD_ARGUMENTS,
    options: FEDSGD_OPTIONS,
    returns: "one row per term: `term, estimate`",
    releases: "per round one `sgd_gradient` state: the example count, the loss sum and the gradient sum at the broadcast parameters (k + 3 numbers, whatever its rows; `sgd_newton` adds the k × k curvature block); with factors a `GROUP BY` round of their levels, and with `standardize=true` a round of means and variances, first.",
    example: "SELECT * FROM fedsgd('clinic', 'event ~ age + bmi + smoker', 'logistic', 'optimizer=adam, learning_rate=0.05, rounds=50, standardize=true')",
};

/// The documentation of `fedsgd_history`.
pub(crate) const FEDSGD_HISTORY_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The rounds of a federated SGD run: the objective and its gradient norm at the parameters each round started from.",
    syntax: "fedsgd_history(source, formula, model [, options])",
    arguments: FEDSGD_ARGUMENTS,
    options: FEDSGD_OPTIONS,
    returns: "one row per round: `round, loss, gradient_norm, clients_used`",
    releases: "per round one `sgd_gradient` state: the example count, the loss sum and the gradient sum at the broadcast parameters (k + 3 numbers, whatever its rows; `sgd_newton` adds the k × k curvature block); with factors a `GROUP BY` round of their levels, and with `standardize=true` a round of means and variances, first.",
    example: "SELECT * FROM fedsgd_history('clinic', 'event ~ age + bmi + smoker', 'logistic', 'optimizer=newton, rounds=5')",
};

// `pca`
/// The arguments of the functions documented below.
const PCA_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "columns",
        "the numeric columns, separated by commas: `'x1, x2, ...'`",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of the functions documented below.
const PCA_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "scale",
        default: "false",
        meaning: "`true`: the correlation matrix, R's `prcomp(scale. = TRUE)`",
    },
    DocOption {
        name: "center",
        default: "true",
        meaning: "`false`: cross products about zero, R's `prcomp(center = FALSE)`",
    },
];

/// The documentation of `pca`.
pub(crate) const PCA_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Multivariate,
    description: "Principal components of the merged covariance (or correlation) matrix, R's `prcomp`: one row per component.",
    syntax: "pca(source, columns [, options])",
    arguments: PCA_ARGUMENTS,
    options: PCA_OPTIONS,
    returns: "one row per component: `component, sdev, proportion, cumulative` (`sdev` is R's `prcomp()$sdev`)",
    releases: "one `centered_moments(x1, ..., xp)` state: n, p means and the p × p centred cross products (p² + p + 1 numbers, whatever its rows).",
    example: "SELECT * FROM pca('clinic', 'age, bmi, systolic', 'scale=true')",
};

/// The documentation of `pca_loadings`.
pub(crate) const PCA_LOADINGS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Multivariate,
    description: "The loadings of the principal components, R's `prcomp()$rotation`: one row per variable.",
    syntax: "pca_loadings(source, columns [, options])",
    arguments: PCA_ARGUMENTS,
    options: PCA_OPTIONS,
    returns: "one row per variable: `variable, PC1, PC2, ...`; each component's largest loading is positive",
    releases: "one `centered_moments(x1, ..., xp)` state: n, p means and the p × p centred cross products (p² + p + 1 numbers, whatever its rows).",
    example: "SELECT * FROM pca_loadings('clinic', 'age, bmi, systolic', 'scale=true')",
};

// `kmeans`
/// The arguments of the functions documented below.
const KMEANS_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    ("columns", "the numeric columns, separated by commas"),
    (
        "k",
        "the number of clusters; NULL when `centers` gives them",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of the functions documented below.
const KMEANS_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "centers",
        default: "none (drawn)",
        meaning: "starting centres row by row in column order, values separated by spaces and centres by `;`; without it, centres are drawn uniformly inside each column's 1%–99% quantiles",
    },
    DocOption {
        name: "iter_max",
        default: "10",
        meaning: "the most Lloyd rounds",
    },
    DocOption {
        name: "nstart",
        default: "1",
        meaning: "random starts; the one with the smallest total within sum of squares is kept",
    },
    DocOption {
        name: "seed",
        default: "0",
        meaning: "the seed of the draws",
    },
    DocOption {
        name: "scale",
        default: "false",
        meaning: "`true` clusters (x − mean) / sd",
    },
];

/// The documentation of `kmeans`.
pub(crate) const KMEANS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Multivariate,
    description: "Federated Lloyd's k-means, R's `kmeans(algorithm = \"Lloyd\")`: one row per cluster with its centre.",
    syntax: "kmeans(source, columns, k [, options])",
    arguments: KMEANS_ARGUMENTS,
    options: KMEANS_OPTIONS,
    returns: "one row per cluster: `cluster, size, withinss`, then one column per listed column (the centre)",
    releases: "a `centered_moments` round (n, means, total sum of squares); without `centers` a round of `approx_percentile_cont` t-digests (at most 100 centroids per column); then per Lloyd round one `kmeans_step` state: per centre its count, the sum of its rows and their within sum of squares, and how many rows changed cluster (k × (p + 2) + 1 numbers).",
    example: "SELECT * FROM kmeans('clinic', 'age, bmi, systolic', 3, 'nstart=5, seed=1, iter_max=30')",
};

/// The documentation of `kmeans_summary`.
pub(crate) const KMEANS_SUMMARY_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Multivariate,
    description: "The summary of a k-means run: one row.",
    syntax: "kmeans_summary(source, columns, k [, options])",
    arguments: KMEANS_ARGUMENTS,
    options: KMEANS_OPTIONS,
    returns: "one row: `n, rows_dropped, totss, tot_withinss, betweenss, iterations, converged`",
    releases: "a `centered_moments` round (n, means, total sum of squares); without `centers` a round of `approx_percentile_cont` t-digests (at most 100 centroids per column); then per Lloyd round one `kmeans_step` state: per centre its count, the sum of its rows and their within sum of squares, and how many rows changed cluster (k × (p + 2) + 1 numbers).",
    example: "SELECT * FROM kmeans_summary('clinic', 'age, bmi, systolic', 3, 'nstart=5, seed=1, iter_max=30')",
};

// `survival`
/// The documentation of `kaplan_meier`.
pub(crate) const KAPLAN_MEIER_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "Kaplan–Meier survival curves on a declared time grid, R's `summary(survfit(...), times = ...)`.",
    syntax: "kaplan_meier(source, time, event, options)",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        ("time", "the time column, not negative"),
        (
            "event",
            "the event column: 1 (event) or 0 (censored), or boolean",
        ),
        (
            "options",
            "`key=value, ...`: a grid (`breaks`, or `width` and `max`) and the options below",
        ),
    ],
    options: &[
        DocOption {
            name: "breaks",
            default: "none",
            meaning: "the time grid: increasing numbers separated by spaces",
        },
        DocOption {
            name: "width, max",
            default: "none",
            meaning: "the grid 0, width, 2·width, ... up to max, and max (instead of `breaks`)",
        },
        DocOption {
            name: "by",
            default: "none",
            meaning: "a column whose values are the strata",
        },
        DocOption {
            name: "conf_level",
            default: "0.95",
            meaning: "the level of the confidence interval (R's `conf.type = \"log\"`)",
        },
        DocOption {
            name: "method",
            default: "auto",
            meaning: "`auto`: the product-limit (R's `survfit`) where every time is a break, the life table (actuarial, n − c/2 at risk, `KMsurv::lifetab`) on a grid that groups times, with a notice; `km` or `actuarial` to choose",
        },
    ],
    returns: "per interval and stratum: `stratum, time_lower, time_upper, n_risk, n_event, n_censor, survival, std_err, conf_low, conf_high`",
    releases: "per stratum (or group) one `life_table` state: each interval's events and censorings, the rows after the grid, check counts and a 0/1 flag saying whether the grid groups distinct times (6 + 2m numbers for m intervals, whatever its rows); the grid is declared, never taken from the data.",
    example: "SELECT * FROM kaplan_meier('lung', 'time', 'status', 'width=180, max=720, by=sex')",
};

/// The documentation of `logrank_test`.
pub(crate) const LOGRANK_TEST_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "The log-rank test of survival curves of groups on a declared time grid, R's `survdiff`.",
    syntax: "logrank_test(source, time, event, group, options)",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        ("time", "the time column, not negative"),
        (
            "event",
            "the event column: 1 (event) or 0 (censored), or boolean",
        ),
        ("group", "the column whose values are the groups"),
        (
            "options",
            "`key=value, ...`: a grid (`breaks`, or `width` and `max`)",
        ),
    ],
    options: &[
        DocOption {
            name: "breaks",
            default: "none",
            meaning: "the time grid: increasing numbers separated by spaces",
        },
        DocOption {
            name: "width, max",
            default: "none",
            meaning: "the grid 0, width, 2·width, ... up to max, and max (instead of `breaks`)",
        },
    ],
    returns: "one row: `statistic, parameter, p_value` (χ² on groups − 1 degrees of freedom)",
    releases: "per stratum (or group) one `life_table` state: each interval's events and censorings, the rows after the grid, check counts and a 0/1 flag saying whether the grid groups distinct times (6 + 2m numbers for m intervals, whatever its rows); the grid is declared, never taken from the data.",
    example: "SELECT * FROM logrank_test('lung', 'time', 'status', 'sex', 'width=1, max=1022')",
};

// `coxph`
/// The arguments of the functions documented below.
const COXPH_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "formula",
        "`Surv(time, event) ~ terms`, terms as for `glm` plus `strata(a, b)`; no intercept",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of the functions documented below.
const COXPH_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "ties",
        default: "efron",
        meaning: "`efron` or `breslow`",
    },
    DocOption {
        name: "max_iter",
        default: "20",
        meaning: "the most Newton rounds",
    },
    DocOption {
        name: "tolerance",
        default: "1e-9",
        meaning: "stop when abs(1 − loglik_old / loglik) ≤ tolerance",
    },
    DocOption {
        name: "weights",
        default: "none",
        meaning: "a column of case weights",
    },
    DocOption {
        name: "strata",
        default: "site",
        meaning: "`site`: each site is a stratum (the only fit); `none` (a pooled fit) is refused, as it would release event times",
    },
];

/// The documentation of `coxph`.
pub(crate) const COXPH_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "A Cox proportional hazards model stratified by site, R's `coxph(Surv(time, event) ~ x + strata(site))`: one row per term.",
    syntax: "coxph(source, formula [, options])",
    arguments: COXPH_ARGUMENTS,
    options: COXPH_OPTIONS,
    returns: "one row per term: `term, estimate, std_error, statistic` (z), `p_value, conf_low, conf_high` (Wald, 95%), `exp_estimate` (the hazard ratio)",
    releases: "a `GROUP BY` round of its strata and factor levels; then per Newton round one `cox_step` state: the gradient and information matrix of its own partial log-likelihood, that log-likelihood and counts (k² + k + 9 numbers, whatever its rows); a last round adds the concordant, discordant and tied pair counts within its strata. No event time leaves it: each site is a stratum.",
    example: "SELECT * FROM coxph('lung', 'Surv(time, status) ~ age + sex + ph_ecog')",
};

/// The documentation of `coxph_stats`.
pub(crate) const COXPH_STATS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "The fit statistics of a Cox model: likelihoods, concordance and the Wald, score and likelihood-ratio tests, in one row.",
    syntax: "coxph_stats(source, formula [, options])",
    arguments: COXPH_ARGUMENTS,
    options: COXPH_OPTIONS,
    returns: "one row: `loglik, loglik_null, n, n_event, rows_dropped, concordance, df, wald_statistic, wald_p_value, score_statistic, score_p_value, lr_statistic, lr_p_value, ties, iterations, converged`",
    releases: "a `GROUP BY` round of its strata and factor levels; then per Newton round one `cox_step` state: the gradient and information matrix of its own partial log-likelihood, that log-likelihood and counts (k² + k + 9 numbers, whatever its rows); a last round adds the concordant, discordant and tied pair counts within its strata. No event time leaves it: each site is a stratum.",
    example: "SELECT * FROM coxph_stats('lung', 'Surv(time, status) ~ age + sex + ph_ecog')",
};
