//! `glm_nb`, `glm_nb_stats` and `glm_nb_vcov`: the negative binomial model
//! with θ estimated by maximum likelihood, as MASS's `glm.nb`.
//!
//! ```sql
//! SELECT * FROM glm_nb('trial', 'events ~ treatment + age + offset(log(followup))');
//! SELECT * FROM glm_nb_stats('trial', 'events ~ treatment + age', 'link=sqrt');
//! ```
//!
//! MASS's alternation, round for round: a Poisson fit (or a negative
//! binomial one at `init_theta`) gives the first means; `theta.ml` finds θ
//! at those means by Newton's method, each step one federated round of
//! `nb_theta_step` (the score and information of θ are sums over rows of
//! digamma and trigamma terms); then, until the log-likelihood and θ stop
//! moving (|Lm₀ − Lm| / d₁ + |Δθ| < epsilon), the GLM is refitted at the
//! current θ by IRLS rounds (`irls_step`, started from the last fit's
//! coefficients: R's `etastart`), and θ is re-estimated at the means of
//! the fit before it, as `glm.nb` does. The standard errors are those of
//! the last IRLS fit with the dispersion 1 (`summary.negbin`); θ's is
//! 1/√information at its last Newton step (MASS's `SE.theta`); AIC counts
//! θ as a parameter.

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Float64Type;
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::family::{Family, Link, Theta};
use fedsql_udfs::function_doc::{DocOption, FunctionDoc, FunctionFamily};
use fedsql_udfs::nb_theta_step::{ThetaConfig, ThetaSums};

use super::GlmOutput;
use super::fit::{expected_last, fit_model, null_deviance};
use super::rounds::{design, explain};
use super::spec::GlmSpec;
use crate::coordinator::context::FedContext;
use crate::coordinator::fit_table::Program;
use crate::error::{FedError, Result};
use crate::models::glm_fit::GlmFit;
use crate::models::glm_fit::{NbTheta, nb_stats_schema};
use crate::models::inference::{coefficients_schema, vcov_batch, vcov_schema};
use crate::models::source::string_arguments;
use crate::models::step_rounds::StepRounds;
use crate::notices::Progress;
use crate::notices::printed_summary::call_text;
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::explain_step;

/// The options `glm_nb` takes.
const OPTIONS: &[&str] = &["maxit", "epsilon", "weights", "names", "link", "init_theta"];

const USAGE: &str = "glm_nb('table or SELECT query', 'y ~ x1 + offset(log(t))' [, 'maxit=25, epsilon=1e-8, weights=col, link=log, init_theta=1, names=r'])";

/// A `glm_nb` call read: the fit's spec (its family a placeholder θ) and
/// the θ of the first fit (`None`: a Poisson fit, as MASS).
#[derive(Debug, Clone)]
struct NbSpec {
    glm: GlmSpec,
    init_theta: Option<f64>,
}

impl NbSpec {
    fn parse(args: &[String]) -> Result<Self> {
        if !(2..=3).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "glm_nb takes 2 or 3 arguments; usage: {USAGE}"
            )));
        }
        let options = Options::parse("glm_nb", args.get(2).map(String::as_str), OPTIONS)?;
        let link = match options.get("link") {
            Some(o) => o.value.parse::<Link>().map_err(FedError::InvalidArgument)?,
            None => Link::Log,
        };
        let init_theta = options
            .get("init_theta")
            .map(|o| o.positive())
            .transpose()?;
        // The options glm reads, passed to its parser.
        let rest: Vec<String> = options
            .iter()
            .filter(|o| o.key != "link" && o.key != "init_theta")
            .map(|o| format!("{}={}", o.key, o.value))
            .collect();
        let glm_args = [
            args[0].clone(),
            args[1].clone(),
            format!("negative.binomial(1, {})", link.name()),
            rest.join(", "),
        ];
        let glm = GlmSpec {
            negbin_ml: true,
            ..GlmSpec::parse(&glm_args)?
        };
        Ok(Self { glm, init_theta })
    }

    /// The spec of a fit at `family`.
    fn at(&self, family: Family) -> GlmSpec {
        GlmSpec {
            family,
            ..self.glm.clone()
        }
    }
}

/// The negative binomial family at θ.
fn negbin(theta: f64) -> Family {
    Family::NegativeBinomial(Theta::new(theta))
}

/// The table functions `glm_nb`, `glm_nb_stats` and `glm_nb_vcov`.
#[derive(Debug)]
pub(crate) struct GlmNbFunction {
    pub output: GlmOutput,
}

impl TableFunctionImpl for GlmNbFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = match self.output {
            GlmOutput::Coefficients => "glm_nb",
            GlmOutput::Stats => "glm_nb_stats",
            GlmOutput::Vcov => "glm_nb_vcov",
        };
        let strings = string_arguments(name, USAGE, args.exprs(), 2)?;
        let spec = NbSpec::parse(&strings).map_err(|e| argument_error(name, e))?;
        let label = format!(
            "{name}('{}', link {})",
            spec.glm.source.given, spec.glm.link
        );
        let output = self.output;
        let schema = match output {
            GlmOutput::Coefficients => coefficients_schema(),
            GlmOutput::Stats => nb_stats_schema(),
            GlmOutput::Vcov => vcov_schema(),
        };
        let explained = spec.clone();
        let program: Program = Arc::new(move |ctx| {
            let spec = explained.clone();
            Box::pin(async move { explain_nb(&ctx, &spec).await })
        });
        let (formula, source) = (strings[1].clone(), strings[0].clone());
        Ok(deferred_table(
            label,
            schema,
            Rounds::Iterative,
            Some(program),
            move |ctx, progress| {
                let spec = spec.clone();
                let (formula, source) = (formula.clone(), source.clone());
                Box::pin(async move {
                    let fit = fit_nb(&ctx, &spec, progress.as_deref()).await?;
                    if output == GlmOutput::Coefficients {
                        let theta = fit.theta.as_ref().map_or(f64::NAN, |t| t.theta);
                        ctx.push_summary(
                            fit.printed_summary(r_call(&spec, &formula, &source, theta)),
                        );
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

/// R's call, as `glm.nb` records it: with `init.theta` (θ to 10
/// significant digits) and the link.
fn r_call(spec: &NbSpec, formula: &str, source: &str, theta: f64) -> String {
    let mut middle = Vec::new();
    if let Some(weights) = &spec.glm.weights {
        middle.push(format!("weights = {weights}"));
    }
    middle.push(format!(
        "init.theta = {}",
        crate::r_format::format_number(theta, 10)
    ));
    middle.push(format!("link = {}", spec.glm.link.name()));
    call_text("glm.nb", formula, &middle, source)
}

/// The rounds of `nb_theta_step` over the design of the fit.
struct ThetaRounds<'a> {
    rounds: StepRounds<'a>,
    arguments: Vec<String>,
    from: String,
    link: Link,
}

impl ThetaRounds<'_> {
    /// The sums at coefficients `beta` (aliased terms 0) and θ.
    async fn at(&mut self, beta: &[f64], theta: f64) -> Result<ThetaSums> {
        let config = ThetaConfig {
            link: self.link,
            beta: beta.to_vec(),
            theta,
        }
        .encode();
        let sql = || theta_sql(&config, &self.arguments, &self.from);
        let batches = self.rounds.run(&config, sql).await?;
        let batch = batches
            .first()
            .ok_or_else(|| FedError::Internal("a θ round returned nothing".into()))?;
        let sums = batch.column(0).as_list::<i32>().value(0);
        Ok(ThetaSums::from_slice(
            sums.as_primitive::<Float64Type>().values(),
        ))
    }
}

/// The query of one θ round.
fn theta_sql(config: &str, arguments: &[String], from: &str) -> String {
    format!(
        "SELECT nb_theta_step('{config}', {}) AS sums FROM {from}",
        arguments.join(", ")
    )
}

/// MASS's `theta.ml` at the means of `beta`: from Σw / Σw(y/μ − 1)²,
/// Newton steps θ += score / information, each a round, while
/// |step| > ε^¼ and fewer than `limit` steps.
async fn theta_ml(
    rounds: &mut ThetaRounds<'_>,
    beta: &[f64],
    at_beta: &ThetaSums,
    limit: usize,
) -> Result<NbTheta> {
    let eps = f64::EPSILON.powf(0.25);
    let mut t0 = at_beta.sum_w / at_beta.moment;
    let (mut it, mut del, mut info) = (0, 1.0f64, f64::NAN);
    loop {
        it += 1;
        if !(it < limit && del.abs() > eps) {
            break;
        }
        t0 = t0.abs();
        if !(t0.is_finite() && t0 > 0.0) {
            return Err(FedError::InvalidArgument(format!(
                "glm_nb: θ cannot be estimated (it reached {t0}): the counts show no overdispersion a negative binomial can fit; try glm with the poisson family"
            )));
        }
        let sums = rounds.at(beta, t0).await?;
        info = sums.info;
        del = sums.score / info;
        t0 += del;
    }
    let mut warning = None;
    if t0 < 0.0 {
        t0 = 0.0;
        warning = Some("estimate truncated at zero".to_string());
    }
    if it == limit {
        warning = Some("iteration limit reached".to_string());
    }
    Ok(NbTheta {
        theta: t0,
        se: (1.0 / info).sqrt(),
        twologlik: f64::NAN,
        warning,
    })
}

/// The coefficients of a fit, aliased terms 0 (R's `fitted.values` use them so).
fn coefficients(fit: &GlmFit) -> Vec<f64> {
    fit.estimate.iter().map(|e| e.unwrap_or(0.0)).collect()
}

/// Fits the model as `MASS::glm.nb` (see the module docs).
async fn fit_nb(ctx: &FedContext, nb: &NbSpec, progress: Option<&Progress>) -> Result<GlmFit> {
    let schema = nb.glm.source.schema(ctx).await?;
    let nb = &NbSpec {
        glm: GlmSpec {
            formula: nb.glm.formula.expand_dot(&schema),
            ..nb.glm.clone()
        },
        ..nb.clone()
    };
    let (maxit, epsilon) = (nb.glm.maxit, nb.glm.epsilon);
    let first = nb.at(nb.init_theta.map_or(Family::Poisson, negbin));
    let mut fit = fit_model(ctx, &first, None, false, expected_last, None).await?;
    let mut rounds = ThetaRounds {
        rounds: StepRounds::new(ctx),
        arguments: design(ctx, &nb.glm).await?.arguments,
        from: nb.glm.source.from.clone(),
        link: nb.glm.link,
    };
    let mut beta = coefficients(&fit);
    // The sums at the current means; θ here only for the log-likelihood.
    let mut at_beta = rounds.at(&beta, 1.0).await?;
    let mut th = theta_ml(&mut rounds, &beta, &at_beta, maxit).await?;
    // theta.ml's answer at the coefficients it was computed at: glm.nb's
    // first alternation asks again at the same means.
    let mut known = (beta.clone(), th.clone());
    let d1 = (2.0 * (fit.df_residual() as f64).max(1.0)).sqrt();
    let d2 = 1.0;
    let mut del = 1.0f64;
    let mut lm = rounds.at(&beta, th.theta).await?.loglik;
    let mut lm0 = lm + 2.0 * d1;
    let mut iter = 0;
    loop {
        iter += 1;
        if !(iter <= maxit && ((lm0 - lm).abs() / d1 + del.abs() / d2) > epsilon) {
            break;
        }
        let next = fit_model(
            ctx,
            &nb.at(negbin(th.theta)),
            None,
            false,
            expected_last,
            Some(beta.clone()),
        )
        .await?;
        let t0 = th.theta;
        // θ at the means before this fit, as glm.nb.
        th = if known.0 == beta {
            known.1.clone()
        } else {
            theta_ml(&mut rounds, &beta, &at_beta, maxit).await?
        };
        known = (beta.clone(), th.clone());
        fit = next;
        beta = coefficients(&fit);
        del = t0 - th.theta;
        lm0 = lm;
        at_beta = rounds.at(&beta, th.theta).await?;
        lm = at_beta.loglik;
        if let Some(progress) = progress {
            progress.report(&format!(
                "glm_nb alternation {iter}: theta {:.6}, 2 x log-likelihood {:.6}",
                th.theta,
                2.0 * lm
            ));
        }
    }
    if let Some(w) = &th.warning {
        fit.warnings.push(format!("theta.ml: {w}"));
    }
    if iter > maxit {
        fit.warnings
            .push("glm.nb: alternation limit reached".into());
        fit.converged = false;
    }
    if nb.glm.formula.intercept && nb.glm.formula.offset.is_some() {
        // R refits y ~ 1 + offset at the final θ.
        fit.null_deviance = if nb.glm.formula.terms.is_empty() {
            fit.deviance
        } else {
            null_deviance(ctx, &nb.at(negbin(th.theta)), expected_last).await?
        };
    }
    fit.log_likelihood = lm;
    fit.theta = Some(NbTheta {
        twologlik: 2.0 * lm,
        ..th
    });
    Ok(fit)
}

/// `EXPLAIN FEDERATED` of a fit: glm's program for the first fit, then
/// the θ round (planned only) and the alternation.
async fn explain_nb(ctx: &FedContext, nb: &NbSpec) -> Result<String> {
    let first = nb.at(nb.init_theta.map_or(Family::Poisson, negbin));
    let mut out = format!(
        "== Program of glm_nb('{}'): MASS's glm.nb, a first fit, then θ and the fit in turn ==\n",
        nb.glm.source.given
    );
    out += &explain(ctx, &first).await?;
    let schema = nb.glm.source.schema(ctx).await?;
    let spec = GlmSpec {
        formula: nb.glm.formula.expand_dot(&schema),
        ..nb.glm.clone()
    };
    let arguments = design(ctx, &spec).await?.arguments;
    let beta = vec![0.0; arguments.len() - 4];
    let config = ThetaConfig {
        link: spec.link,
        beta,
        theta: 1.0,
    }
    .encode();
    out += &explain_step(
        ctx,
        "Then θ by theta.ml: a round of the score and information of θ (6 numbers) per Newton step, at the means of the last fit",
        &theta_sql(&config, &arguments, &spec.source.from),
    )
    .await?;
    out += &format!(
        "#### Then, until |Lm0 - Lm| / d1 + |Δθ| < {}, at most {} times: the IRLS rounds of the model at the current θ (the negative binomial family), θ again, and one θ round for the log-likelihood\n",
        spec.epsilon, spec.maxit
    );
    Ok(out)
}

/// The arguments of the functions documented below.
const GLM_NB_ARGUMENTS: &[(&str, &str)] = &[
    (
        "source",
        "a table name, or a query string whose filters run at the sites",
    ),
    (
        "formula",
        "an R formula with a count response: terms as for `glm`, `offset(expr)`",
    ),
    ("options", "optional `key=value, ...` (the options below)"),
];

/// The options of the functions documented below.
const GLM_NB_OPTIONS: &[DocOption] = &[
    DocOption {
        name: "link",
        default: "log",
        meaning: "`log`, `sqrt` or `identity`",
    },
    DocOption {
        name: "init_theta",
        default: "none",
        meaning: "θ of the first fit (else a Poisson fit starts, as MASS)",
    },
    DocOption {
        name: "maxit",
        default: "25",
        meaning: "the most alternations, IRLS rounds per fit and θ steps per estimate",
    },
    DocOption {
        name: "epsilon",
        default: "1e-8",
        meaning: "the tolerance of the IRLS fits and of the alternation",
    },
    DocOption {
        name: "weights",
        default: "none",
        meaning: "a column of prior weights",
    },
    DocOption {
        name: "names",
        default: "patsy",
        meaning: "`r`: terms named as R names them (`sexM`, `age:sexM`)",
    },
];

const GLM_NB_RELEASES: &str = "per IRLS round one `irls_step` state (k² + k + 12 numbers) and per θ step one `nb_theta_step` state (6 numbers), whatever its rows; with factors, a `GROUP BY` round of their levels first.";

/// The documentation of `glm_nb`.
pub(crate) const GLM_NB_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "A negative binomial regression with θ estimated by maximum likelihood, MASS's `glm.nb`: one row per term.",
    syntax: "glm_nb(source, formula [, options])",
    arguments: GLM_NB_ARGUMENTS,
    options: GLM_NB_OPTIONS,
    returns: "one row per term: `term, estimate, std_error, statistic` (z), `p_value, conf_low, conf_high`; the summary prints θ, its standard error and 2 × log-likelihood",
    releases: GLM_NB_RELEASES,
    example: "SELECT * FROM glm_nb('clinic', 'visits ~ age + smoker')",
};

/// The documentation of `glm_nb_stats`.
pub(crate) const GLM_NB_STATS_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The fit statistics of a negative binomial regression (MASS's `glm.nb`), θ and its standard error: one row.",
    syntax: "glm_nb_stats(source, formula [, options])",
    arguments: GLM_NB_ARGUMENTS,
    options: GLM_NB_OPTIONS,
    returns: "one row: `family, link, nobs, rows_dropped, df_null, df_residual, null_deviance, deviance, dispersion, log_likelihood, aic, bic, iterations, converged, theta, se_theta, twologlik`",
    releases: GLM_NB_RELEASES,
    example: "SELECT * FROM glm_nb_stats('clinic', 'visits ~ age + smoker')",
};

/// The documentation of `glm_nb_vcov`.
pub(crate) const GLM_NB_VCOV_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Models,
    description: "The covariance matrix of a negative binomial regression's estimates, R's `vcov(glm.nb(...))`, in long form.",
    syntax: "glm_nb_vcov(source, formula [, options])",
    arguments: GLM_NB_ARGUMENTS,
    options: GLM_NB_OPTIONS,
    returns: "one row per pair of terms: `term1, term2, covariance` (NULL for an aliased term)",
    releases: GLM_NB_RELEASES,
    example: "SELECT * FROM glm_nb_vcov('clinic', 'visits ~ age + smoker')",
};
