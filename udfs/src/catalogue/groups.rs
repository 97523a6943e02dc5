//! The families of the catalogued aggregates, and the aggregates each of
//! fedsql's table functions sends to a site: what an analyst profile's
//! `functions` allow-list names (`[analysts.NAME] functions = [...]` in a
//! worker's TOML).
//!
//! A site sees encoders, not the table function that made them: a name in
//! an allow-list admits the aggregates listed here for it, whoever writes
//! the query. A group or a table function admits, besides its own
//! aggregates, the counts and sums its rounds use (a `glm` counts its rows
//! and levels first); it never admits a DP or a secure aggregate unless it
//! is `dp` or `secure`. An aggregate that is in no group is admitted by no
//! profile with an allow-list.

/// A family of aggregates: its name and its members.
pub type Group = (&'static str, &'static [&'static str]);

/// The groups a profile's `functions` may name.
pub const GROUPS: &[Group] = &[
    (
        "descriptive",
        &[
            "count",
            "sum",
            "avg",
            "min",
            "max",
            "var",
            "var_pop",
            "stddev",
            "stddev_pop",
            "covar_samp",
            "covar_pop",
            "corr",
            "regr_slope",
            "regr_intercept",
            "regr_count",
            "regr_r2",
            "regr_avgx",
            "regr_avgy",
            "regr_sxx",
            "regr_syy",
            "regr_sxy",
            "bool_and",
            "bool_or",
            "bit_and",
            "bit_or",
            "bit_xor",
            "first_value",
            "last_value",
            "any_value",
            "grouping",
            "approx_distinct",
            "approx_percentile_cont",
            "approx_median",
            "approx_percentile_cont_with_weight",
            "histogram",
        ],
    ),
    (
        "matrices",
        &[
            "count",
            "covariance_matrix",
            "correlation_matrix",
            "centered_moments",
            "normal_equations",
            "normal_equations_no_intercept",
        ],
    ),
    (
        "models",
        &[
            "count",
            "sum",
            "avg",
            "max",
            "centered_moments",
            "normal_equations",
            "normal_equations_no_intercept",
            "irls_step",
            "sgd_gradient",
            "sgd_newton",
            "cox_step",
            "sandwich_step",
            "nb_theta_step",
        ],
    ),
    (
        "tests",
        &["count", "sum", "avg", "max", "var", "centered_moments"],
    ),
    (
        "multivariate",
        &[
            "count",
            "sum",
            "max",
            "centered_moments",
            "covariance_matrix",
            "correlation_matrix",
            "kmeans_step",
            "approx_percentile_cont",
        ],
    ),
    (
        "survival",
        &["count", "sum", "min", "life_table", "cox_step"],
    ),
    (
        "dp",
        &[
            "dp_count",
            "dp_sum",
            "dp_avg",
            "dp_var",
            "dp_histogram",
            "secure_dp_count",
            "secure_dp_sum",
            "secure_dp_avg",
        ],
    ),
    (
        "secure",
        &[
            "secure_sum",
            "secure_avg",
            "secure_count",
            "secure_sum_vec",
            "secure_dp_count",
            "secure_dp_sum",
            "secure_dp_avg",
        ],
    ),
];

/// fedsql's table functions and the aggregates they send to a site.
pub const TABLE_FUNCTIONS: &[Group] = &[
    // `sum`: Σ log w of a weighted fit.
    ("lm", &["count", "sum", "centered_moments", "sandwich_step"]),
    ("lm_stats", &["count", "sum", "centered_moments"]),
    (
        "lm_vcov",
        &["count", "sum", "centered_moments", "sandwich_step"],
    ),
    ("lm_meta", &["count", "centered_moments"]),
    ("lmm", &["count", "centered_moments"]),
    ("lmm_varcomp", &["count", "centered_moments"]),
    ("lmm_stats", &["count", "centered_moments"]),
    ("lmm_ranef", &["count", "centered_moments"]),
    (
        "glm",
        &[
            "count",
            "sum",
            "max",
            "irls_step",
            "centered_moments",
            "sgd_gradient",
            "sgd_newton",
            "sandwich_step",
        ],
    ),
    (
        "glm_stats",
        &["count", "sum", "max", "irls_step", "centered_moments"],
    ),
    (
        "glm_vcov",
        &[
            "count",
            "sum",
            "max",
            "irls_step",
            "centered_moments",
            "sandwich_step",
        ],
    ),
    (
        "glm_nb",
        &["count", "sum", "max", "irls_step", "nb_theta_step"],
    ),
    (
        "glm_nb_stats",
        &["count", "sum", "max", "irls_step", "nb_theta_step"],
    ),
    (
        "glm_nb_vcov",
        &["count", "sum", "max", "irls_step", "nb_theta_step"],
    ),
    (
        "glm_meta",
        &["count", "sum", "max", "irls_step", "centered_moments"],
    ),
    (
        "fedsgd",
        &[
            "count",
            "sum",
            "avg",
            "max",
            "centered_moments",
            "sgd_gradient",
            "sgd_newton",
        ],
    ),
    ("coxph", &["count", "sum", "cox_step"]),
    ("coxph_stats", &["count", "sum", "cox_step"]),
    ("coxph_meta", &["count", "sum", "cox_step"]),
    (
        "kmeans",
        &[
            "count",
            "sum",
            "centered_moments",
            "kmeans_step",
            "approx_percentile_cont",
        ],
    ),
    ("pca", &["count", "sum", "max", "centered_moments"]),
    ("kaplan_meier", &["count", "sum", "min", "life_table"]),
    ("logrank_test", &["count", "sum", "min", "life_table"]),
    ("t_test", &["count", "avg", "max", "var"]),
    ("chisq_test", &["count", "sum"]),
    ("anova", &["count", "sum", "max", "centered_moments"]),
    ("cor_test", &["count", "centered_moments"]),
    ("crosstab", &["count", "sum"]),
    (
        "hist",
        &["count", "sum", "histogram", "approx_percentile_cont"],
    ),
    (
        "summary",
        &[
            "count",
            "avg",
            "min",
            "max",
            "stddev",
            "approx_percentile_cont",
        ],
    ),
];

/// The aggregates a name of a `functions` allow-list admits: a group, a
/// table function, or one catalogued aggregate. `None`: the name is none
/// of these.
pub fn admitted_by(name: &str) -> Option<Vec<&'static str>> {
    let name = name.trim().to_ascii_lowercase();
    if let Some((_, members)) = GROUPS
        .iter()
        .chain(TABLE_FUNCTIONS)
        .find(|(n, _)| *n == name)
    {
        return Some(members.to_vec());
    }
    super::aggregate(&name).map(|a| vec![a.name])
}

/// The names an allow-list may use besides single aggregates, for errors.
pub fn group_names() -> Vec<&'static str> {
    GROUPS.iter().map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every member is catalogued (a group never admits what a site would
    /// not run), and every catalogued aggregate is in a group.
    #[test]
    fn groups_hold_catalogued_aggregates_and_every_aggregate_has_a_group() {
        for (group, members) in GROUPS.iter().chain(TABLE_FUNCTIONS) {
            for member in *members {
                assert!(
                    super::super::aggregate(member).is_some(),
                    "`{member}` of `{group}` is not catalogued"
                );
            }
        }
        for aggregate in super::super::AGGREGATES {
            assert!(
                GROUPS.iter().any(|(_, m)| m.contains(&aggregate.name)),
                "`{}` is in no group of catalogue/groups.rs: no profile with an allow-list admits it",
                aggregate.name
            );
        }
    }

    /// Only `dp` admits DP aggregates and only `secure` secure ones; the
    /// DP sums under the masks are both (either group admits them).
    #[test]
    fn private_aggregates_only_in_their_groups() {
        for (group, members) in GROUPS.iter().chain(TABLE_FUNCTIONS) {
            for member in *members {
                let a = super::super::aggregate(member).expect("catalogued");
                match (a.is_dp(), a.is_secure()) {
                    (true, true) => assert!(["dp", "secure"].contains(group), "{member}"),
                    (true, false) => assert_eq!(*group, "dp", "{member}"),
                    (false, true) => assert_eq!(*group, "secure", "{member}"),
                    (false, false) => {}
                }
            }
        }
    }

    #[test]
    fn names_resolve() {
        assert!(admitted_by("glm").unwrap().contains(&"irls_step"));
        assert!(admitted_by("Descriptive").unwrap().contains(&"avg"));
        assert_eq!(admitted_by("dp_count").unwrap(), vec!["dp_count"]);
        assert!(admitted_by("no_such").is_none());
    }
}
