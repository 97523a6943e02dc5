//! Classical statistics from SQL, as table functions: t-tests, ANOVA,
//! chi-square tests and cross tables, correlation tests, histograms and
//! five-number summaries, each as R computes it (`t.test`, `anova(lm(...))`,
//! `chisq.test`, `cor.test`, `hist`, `summary`), with broom's `tidy()` column
//! names.
//!
//! Every one of them is one or two rounds of ordinary federated aggregates
//! (`count`, `avg`, `var_samp`, `centered_moments`, `histogram`,
//! `approx_percentile_cont`, GROUP BY counts), so only fixed-size states leave
//! a client, and whatever a site enforces on a round applies to them; the
//! test itself (statistic, p-value, interval) is computed on the coordinator
//! from the merged values. p-values and quantiles come from `fedsql_udfs::distribution` (R-grade).

pub(crate) mod anova;
pub(crate) mod bar_chart;
pub(crate) mod chisq_test;
pub(crate) mod cor_test;
mod docs;
pub(crate) mod hist;
pub(crate) mod hypothesis;
mod pretty;
pub(crate) mod round_values;
pub(crate) mod summary;
pub(crate) mod t_test;

use datafusion::prelude::SessionContext;

use crate::coordinator::function_docs::register_table_function as register;

/// Registers the statistics table functions (`t_test`, `anova`,
/// `chisq_test`, `crosstab`, `cor_test`, `hist`, `summary`).
pub(crate) fn register_all(ctx: &SessionContext) {
    register(ctx, "t_test", &docs::T_TEST_DOC, t_test::TTestFunction);
    register(ctx, "anova", &docs::ANOVA_DOC, anova::AnovaFunction);
    register(
        ctx,
        "chisq_test",
        &docs::CHISQ_TEST_DOC,
        chisq_test::ChisqFunction {
            output: chisq_test::ChisqOutput::Test,
        },
    );
    register(
        ctx,
        "crosstab",
        &docs::CROSSTAB_DOC,
        chisq_test::ChisqFunction {
            output: chisq_test::ChisqOutput::Crosstab,
        },
    );
    register(
        ctx,
        "cor_test",
        &docs::COR_TEST_DOC,
        cor_test::CorTestFunction,
    );
    register(ctx, "hist", &docs::HIST_DOC, hist::HistFunction);
    register(ctx, "summary", &docs::SUMMARY_DOC, summary::SummaryFunction);
}
