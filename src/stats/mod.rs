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
//! from the merged values. p-values come from `statrs` distributions.

pub(crate) mod anova;
pub(crate) mod bar_chart;
pub(crate) mod chisq_test;
pub(crate) mod cor_test;
pub(crate) mod hist;
pub(crate) mod hypothesis;
pub(crate) mod round_values;
pub(crate) mod summary;
pub(crate) mod t_test;

use std::sync::Arc;

use datafusion::prelude::SessionContext;

/// Registers the statistics table functions (`t_test`, `anova`,
/// `chisq_test`, `crosstab`, `cor_test`, `hist`, `summary`).
pub(crate) fn register_all(ctx: &SessionContext) {
    ctx.register_udtf("t_test", Arc::new(t_test::TTestFunction));
    ctx.register_udtf("anova", Arc::new(anova::AnovaFunction));
    ctx.register_udtf(
        "chisq_test",
        Arc::new(chisq_test::ChisqFunction {
            output: chisq_test::ChisqOutput::Test,
        }),
    );
    ctx.register_udtf(
        "crosstab",
        Arc::new(chisq_test::ChisqFunction {
            output: chisq_test::ChisqOutput::Crosstab,
        }),
    );
    ctx.register_udtf("cor_test", Arc::new(cor_test::CorTestFunction));
    ctx.register_udtf("hist", Arc::new(hist::HistFunction));
    ctx.register_udtf("summary", Arc::new(summary::SummaryFunction));
}
