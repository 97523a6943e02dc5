//! The documentation of the statistics table functions: what `SHOW
//! FUNCTIONS`, `\h NAME` and `docs/reference/functions.md` say about each
//! (see `fedsql_udfs::function_doc`). [`super::register_all`] registers
//! every function with its entry here.

use fedsql_udfs::function_doc::{DocOption, FunctionDoc, FunctionFamily};

// `t_test`
/// The documentation of `t_test`.
pub(crate) const T_TEST_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "Student's t-test, R's `t.test`: one sample (`'x'`), two samples (`'x ~ group'`, Welch's unless `var_equal=true`), or paired as the one-sample test of a difference (`'after - before'`).",
    syntax: "t_test(source, value [, options])",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        (
            "value",
            "`'x'` (a column or expression) or `'x ~ group'` (group of exactly two levels)",
        ),
        ("options", "optional `key=value, ...` (the options below)"),
    ],
    options: &[
        DocOption {
            name: "mu",
            default: "0",
            meaning: "the mean under the null hypothesis",
        },
        DocOption {
            name: "alternative",
            default: "two.sided",
            meaning: "`two.sided`, `less` or `greater`",
        },
        DocOption {
            name: "conf_level",
            default: "0.95",
            meaning: "the level of the confidence interval",
        },
        DocOption {
            name: "var_equal",
            default: "false",
            meaning: "two samples: `true` pools the variances",
        },
    ],
    returns: "one row: `estimate, estimate1, estimate2, statistic, parameter, p_value, conf_low, conf_high, method, alternative` (estimate1 and estimate2 NULL for one sample)",
    releases: "`count`, `avg` and `var_samp` of the value (per group, by `GROUP BY group`, for two samples).",
    example: "SELECT * FROM t_test('clinic', 'systolic ~ smoker')",
};

// `anova`
/// The documentation of `anova`.
pub(crate) const ANOVA_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "The analysis of variance of a linear model, R's `anova(lm(formula))`: sequential (type I) sums of squares.",
    syntax: "anova(source, formula)",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        (
            "formula",
            "an R formula: `y ~ a + b`, factors `C(g)`, interactions `a:b`, `a*b`, `- 1`, `I(...)`, `log(x)`, `y ~ .`",
        ),
    ],
    options: &[],
    returns: "one row per term, then `Residuals`: `term, df, sumsq, meansq, statistic, p_value`",
    releases: "one `centered_moments(y, x1, ..., xk)` state: n, k + 1 means and the (k + 1)² centred cross products, whatever its rows; with factors, a `GROUP BY` round of their levels first.",
    example: "SELECT * FROM anova('clinic', 'systolic ~ age + bmi + smoker + region')",
};

// `chisq_test`
/// The documentation of `chisq_test`.
pub(crate) const CHISQ_TEST_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "Pearson's chi-squared test of independence of two columns, R's `chisq.test(table(a, b))`.",
    syntax: "chisq_test(source, a, b [, options])",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        (
            "a",
            "the first column (its values are the rows of the table)",
        ),
        ("b", "the second column"),
        ("options", "optional `key=value` (the option below)"),
    ],
    options: &[DocOption {
        name: "correct",
        default: "true",
        meaning: "Yates' continuity correction for a 2 × 2 table",
    }],
    returns: "one row: `statistic, parameter, p_value, method`",
    releases: "`count(*) GROUP BY a, b`: the count of each cell of the table and the cells' values. Under a disclosure policy a cell under k at a site is refused there.",
    example: "SELECT * FROM chisq_test('clinic', 'smoker', 'event')",
};

/// The documentation of `crosstab`.
pub(crate) const CROSSTAB_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "The cross table of two columns with its margins, R's `addmargins(table(a, b))`, in long form.",
    syntax: "crosstab(source, a, b)",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        (
            "a",
            "the first column (its values are the rows of the table)",
        ),
        ("b", "the second column"),
    ],
    options: &[],
    returns: "one row per cell and margin: the two columns (named after them, levels as text; NULL in a margin) and `n`",
    releases: "`count(*) GROUP BY a, b`: the count of each cell of the table and the cells' values. Under a disclosure policy a cell under k at a site is refused there.",
    example: "SELECT * FROM crosstab('clinic', 'smoker', 'event')",
};

// `cor_test`
/// The documentation of `cor_test`.
pub(crate) const COR_TEST_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "The test of Pearson's correlation of two columns, R's `cor.test` (interval by Fisher's z when n > 3).",
    syntax: "cor_test(source, x, y [, options])",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        ("x", "a numeric column or expression"),
        ("y", "a numeric column or expression"),
        ("options", "optional `key=value, ...` (the options below)"),
    ],
    options: &[
        DocOption {
            name: "alternative",
            default: "two.sided",
            meaning: "`two.sided`, `less` or `greater`",
        },
        DocOption {
            name: "conf_level",
            default: "0.95",
            meaning: "the level of the confidence interval",
        },
        DocOption {
            name: "method",
            default: "pearson",
            meaning: "only `pearson` (rank correlations would need every value)",
        },
    ],
    returns: "one row: `estimate, statistic, parameter, p_value, conf_low, conf_high, method, alternative`",
    releases: "one `centered_moments(x, y)` state: n, 2 means and the 2 × 2 centred cross products (7 numbers).",
    example: "SELECT * FROM cor_test('clinic', 'age', 'systolic')",
};

// `hist`
/// The documentation of `hist`.
pub(crate) const HIST_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "A histogram of one column, as R's `hist(x)`: by default its breaks (Sturges' number of classes through `pretty()` over the range, every value counted); with a range, `hist(x, breaks = seq(lower, upper, length.out = bins + 1))`; in the REPL `\\chart` then draws the bars.",
    syntax: "hist(source, x [, options])",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        ("x", "a numeric column or expression"),
        ("options", "optional `key=value, ...` (the options below)"),
    ],
    options: &[
        DocOption {
            name: "bins",
            default: "Sturges: ceiling(log2(n) + 1)",
            meaning: "the number of equal-width bins (without a range, `pretty()` rounds it as R's `hist(x, breaks = bins)`)",
        },
        DocOption {
            name: "lower, upper",
            default: "`pretty(range(x))`; where a site refuses extremes, the 0.5% and 99.5% quantiles",
            meaning: "the range of the bins",
        },
    ],
    returns: "one row per bin: `bin, lower, upper, count, density`",
    releases: "without a range, a round of `count`, `min` and `max` (or, where a site refuses extremes, `approx_percentile_cont` t-digests of at most 100 centroids); then one `histogram(x, lower, upper, bins)` state: `bins` + 3 counts. Under a disclosure policy the out-of-range counts are folded into the end bins and a bin with 1 to k − 1 values is refused at the site.",
    example: "SELECT * FROM hist('clinic', 'bmi', 'bins=6, lower=18, upper=36')",
};

// `summary`
/// The documentation of `summary`.
pub(crate) const SUMMARY_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Tests,
    description: "A five-number summary of each listed column (every column without a list), as R's `summary()`: counts, mean, standard deviation, extremes and quartiles (t-digest estimates); a text column's levels are counted in a notice, as R counts a factor's.",
    syntax: "summary(source [, columns])",
    arguments: &[
        (
            "source",
            "a table name, or a query string whose filters run at the sites",
        ),
        (
            "columns",
            "the columns, separated by commas: `'c1, c2, ...'` (numeric, or text: counted by level); without it, every column",
        ),
    ],
    options: &[],
    returns: "one row per column: `column, n, nmiss, mean, sd, min, q1, median, q3, max` (`min` and `max` NULL when a site refuses extremes; only `n` and `nmiss` for a text column)",
    releases: "per numeric column `count`, `avg`, `stddev`, `min`, `max` and `approx_percentile_cont` t-digests (at most 100 centroids) at 0.25, 0.5 and 0.75; per text column its `count` and, in a second round, the count of each level (each held to a site's k).",
    example: "SELECT * FROM summary('clinic')",
};
