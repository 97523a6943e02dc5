//! `glm`, `glm_stats` and `glm_vcov`: generalized linear models by federated IRLS.
//!
//! ```sql
//! SELECT * FROM glm('clinic', 'event ~ age + bmi + smoker + C(region)', 'binomial');
//! SELECT * FROM glm_vcov('clinic', 'event ~ age + bmi', 'binomial');  -- term1, term2, covariance
//! SELECT * FROM glm_stats('star98', 'cbind(nabove, nbelow) ~ lowinc + perasian', 'binomial');
//! SELECT * FROM glm('scotland', 'yes ~ coutax + unempf', 'gamma(log)', 'maxit=50, epsilon=1e-10');
//! ```
//!
//! An iterative typed program: each IRLS round is one federated aggregate
//! (`irls_step`) whose only shared input is the current coefficient vector;
//! every client returns X'WX, X'Wz, its deviance contribution and counts —
//! a fixed-size state — and the coordinator merges them and solves for the
//! next coefficients. Start values and the stopping rule are R's `glm.fit`:
//! the first round starts from `mustart`, and the fit stops when
//! |dev − dev_old| / (|dev| + 0.1) < epsilon (1e-8), after at most maxit
//! (25) rounds; a non-finite deviance halves the step as R does. The
//! covariance of the estimates (and so the standard errors) comes, as in
//! R's `summary.glm` and `vcov`, from the X'WX of the last IRLS step — the
//! one whose solution is the estimate — times the dispersion, Pearson's
//! X² / df at the estimate.
//!
//! Options (fourth argument, `key=value` separated by commas): `maxit`,
//! `epsilon`, and `weights=column` for prior weights.

use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};

use super::glm_fit::stats_schema;
use super::inference::{coefficients_schema, vcov_batch, vcov_schema};
use super::source::string_arguments;
use crate::coordinator::fit_table::Program;
use crate::models::robust::Covariance;
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};

mod fit;
pub(crate) mod nb;
mod rounds;
mod spec;

pub(crate) use fit::fit;
pub(crate) use rounds::{explain, stopped};
pub(crate) use spec::GlmSpec;
use spec::{USAGE, r_call};

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GlmOutput {
    Coefficients,
    Stats,
    /// The covariance matrix of the estimates, one row per pair of terms.
    Vcov,
}

/// The table functions `glm` and `glm_stats`.
#[derive(Debug)]
pub(crate) struct GlmFunction {
    pub output: GlmOutput,
}

impl TableFunctionImpl for GlmFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = match self.output {
            GlmOutput::Coefficients => "glm",
            GlmOutput::Stats => "glm_stats",
            GlmOutput::Vcov => "glm_vcov",
        };
        let strings = string_arguments(name, USAGE, args.exprs(), 3)?;
        let spec = GlmSpec::parse(&strings).map_err(|e| argument_error(name, e))?;
        let label = format!(
            "{name}('{}', family {}({}))",
            spec.source.given, spec.family, spec.link
        );
        let output = self.output;
        let schema = match output {
            GlmOutput::Coefficients => coefficients_schema(),
            GlmOutput::Stats => stats_schema(),
            GlmOutput::Vcov => vcov_schema(),
        };
        let explained = spec.clone();
        let program: Program = Arc::new(move |ctx| {
            let spec = explained.clone();
            Box::pin(async move { explain(&ctx, &spec).await })
        });
        let call = r_call(&strings, &spec);
        Ok(deferred_table(
            label,
            schema,
            Rounds::Iterative,
            Some(program),
            move |ctx, progress| {
                let (spec, call) = (spec.clone(), call.clone());
                Box::pin(async move {
                    let fit = fit(&ctx, &spec, progress.as_deref()).await?;
                    if spec.covariance != Covariance::Classical {
                        ctx.notice(format!(
                            "Standard errors: {}",
                            spec.covariance.described(false)
                        ));
                    }
                    if output == GlmOutput::Coefficients {
                        // R's summary() lines, which the REPL prints around the table.
                        ctx.push_summary(fit.printed_summary(call));
                    }
                    let batch = match output {
                        GlmOutput::Coefficients => fit.coefficients()?,
                        GlmOutput::Stats => fit.stats()?,
                        GlmOutput::Vcov => vcov_batch(&fit.terms, &fit.covariance)?,
                    };
                    for warning in &fit.warnings {
                        ctx.notice(format!("Warning: {warning}"));
                    }
                    Ok(batch)
                })
            },
        ))
    }
}

#[cfg(test)]
mod tests;
