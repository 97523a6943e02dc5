//! The fit of a GLM by federated IRLS, as R's `glm.fit`: the rounds from
//! the start to convergence, the step halving, which rounds may skip
//! X'WX ([`expected_last`]), the dispersion and covariance at the
//! estimate, robust standard errors, and the null model's deviance.

use fedsql_udfs::family::Family;
use fedsql_udfs::irls_step::{IrlsConfig, IrlsSums, NullMean};
use fedsql_udfs::linalg::{
    ALIAS_TOLERANCE, aliased_columns, inverse_spd, select, select_vector, solve_spd, to_dmatrix,
    to_dvector,
};
use futures::FutureExt;
use futures::future::BoxFuture;

use super::rounds::{design, round, stopped};
use super::spec::GlmSpec;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::Formula;
use crate::models::glm_fit::{GlmFit, log_likelihood};
use crate::models::robust::{self, Covariance, SandwichInput};
use crate::models::source::{ModelSource, complete_cases};
use crate::models::step_rounds::StepRounds;
use crate::notices::Progress;

/// Solves the weighted least-squares step on the kept (non-aliased) columns.
fn solve(sums: &IrlsSums, kept: &[usize], k: usize) -> Result<Vec<f64>> {
    let gram = select(&to_dmatrix(&sums.xtwx), kept);
    let rhs = select_vector(&to_dvector(&sums.xtwz), kept);
    let solved = solve_spd(&gram, &rhs).ok_or_else(|| {
        FedError::InvalidArgument(
            "the weighted design is singular: the IRLS step cannot be solved".into(),
        )
    })?;
    let mut beta = vec![0.0; k];
    for (i, &j) in kept.iter().enumerate() {
        beta[j] = solved[i];
    }
    Ok(beta)
}

/// Fits the GLM by federated IRLS.
pub(crate) fn fit<'a>(
    ctx: &'a FedContext,
    spec: &'a GlmSpec,
    progress: Option<&'a Progress>,
) -> BoxFuture<'a, Result<GlmFit>> {
    fit_model(ctx, spec, progress, true, expected_last, None)
}

/// The smallest relative change of a deviance that [`expected_last`]
/// predicts: 64 units in the last place, below which its changes are
/// rounding, not convergence.
const ROUNDING: f64 = 64.0 * f64::EPSILON;

/// Which rounds may leave X'WX out: [`expected_last`]; in tests, a rule
/// that says every round or none.
pub(super) type LastRoundRule = fn(changes: &[f64], iteration: usize, spec: &GlmSpec) -> bool;

/// Whether IRLS round `iteration` (1 for the first after the start) is
/// expected to end the fit, given the relative deviance changes of the
/// rounds before it. The last round's X'WX is never used: its
/// coefficients are the estimate, and their covariance comes from the
/// X'WX they were solved from. So a round expected to be the last skips
/// X'WX and X'Wz (about a third of its work), and if the fit goes on
/// after all, it is run again with them, at the same coefficients.
///
/// The round at `maxit` is the last. Otherwise the next change is
/// predicted from the last two as Newton's steps converge (a canonical
/// link's IRLS is Newton's method): each change about a constant times
/// the square of the one before, c₃ ≈ c₂ (c₂ / c₁)². It must be a
/// thousand times below `epsilon`, because that constant drifts (a gamma
/// fit of the tests went 0.47, 4.5e-4, 1.8e-8). Fisher scoring (other
/// links) may converge only linearly, c₃ ≈ c₂ (c₂ / c₁); the margin
/// covers that whenever c₂ / c₁ ≥ 0.001. No change is predicted below
/// the rounding of the deviance's sums ([`ROUNDING`]), where the changes
/// stop falling: a fit with an `epsilon` near it keeps X'WX in every
/// round. A wrong guess costs one round again.
pub(super) fn expected_last(changes: &[f64], iteration: usize, spec: &GlmSpec) -> bool {
    if iteration >= spec.maxit {
        return true;
    }
    let [.., before, last] = changes else {
        return false;
    };
    let ratio = last / before;
    ratio < 1.0 && (last * ratio * ratio).max(ROUNDING) < spec.epsilon / 1000.0
}

/// Fits the GLM; `with_null` also computes the null deviance (which, for a
/// model with an offset and an intercept, is a fit of `y ~ 1 + offset`);
/// `last_round` says which rounds may skip X'WX ([`expected_last`]);
/// `start`, if given, are the coefficients the first round starts from
/// (R's `etastart`, as `glm.nb` refits), else R's `mustart`.
pub(super) fn fit_model<'a>(
    ctx: &'a FedContext,
    spec: &'a GlmSpec,
    progress: Option<&'a Progress>,
    with_null: bool,
    last_round: LastRoundRule,
    start: Option<Vec<f64>>,
) -> BoxFuture<'a, Result<GlmFit>> {
    async move {
        let expanded = GlmSpec {
            formula: spec
                .formula
                .expand_dot(spec.source.schema(ctx).await?.as_ref()),
            ..spec.clone()
        };
        let spec = &expanded;
        let design = design(ctx, spec).await?;
        let k = design.names.len();
        let config = |beta: Option<Vec<f64>>, null_mu: NullMean, xtwx: bool| IrlsConfig {
            family: spec.family,
            link: spec.link,
            beta,
            null_mu,
            xtwx,
        };
        let mut rounds = StepRounds::new(ctx);
        // Round 1: from R's starting means (or the given coefficients);
        // also the weighted mean of y.
        let start_config = config(start, NullMean::None, true);
        let (start, total) = round(&mut rounds, spec, &design, &start_config)
            .await
            .map_err(|e| stopped(ctx, e, "glm", 1, &[], &[]))?;
        if start.invalid > 0.0 {
            let rule = spec
                .family
                .check_response(-1.0)
                .or(spec.family.check_response(2.0))
                .unwrap_or("");
            return Err(FedError::InvalidArgument(format!(
                "{} rows have a response outside the range of the {} family: {rule}",
                start.invalid, spec.family
            )));
        }
        if start.n == 0.0 {
            return Err(FedError::InvalidArgument(if total == 0 {
                format!(
                    "the source '{}' has no rows (after its filter)",
                    spec.source.given
                )
            } else {
                format!(
                    "no rows left: all {total} rows of '{}' have a NULL in a column the model uses",
                    spec.source.given
                )
            }));
        }
        let null_mu = match (spec.formula.intercept, spec.formula.offset.is_some()) {
            (true, false) => NullMean::Value(start.sum_wy / start.sum_w),
            (false, _) => NullMean::Offset,
            // R refits y ~ 1 + offset for the null deviance.
            (true, true) => NullMean::None,
        };
        let aliased = aliased_columns(&to_dmatrix(&start.xtwx), ALIAS_TOLERANCE);
        let kept: Vec<usize> = (0..k).filter(|&j| !aliased[j]).collect();

        let mut beta = solve(&start, &kept, k)?;
        // The X'WX the current `beta` was solved from (R's last `fit$qr`).
        let mut solved_from = start.xtwx.clone();
        let mut previous: Option<Vec<f64>> = None;
        let mut dev_old = start.deviance;
        let mut changes = Vec::new();
        let mut iterations = 0;
        let mut converged = false;
        let mut last;
        // The null deviance does not change between rounds: the first
        // evaluated round computes it, later rounds skip that work.
        let mut null_deviance_sum = f64::NAN;
        loop {
            iterations += 1;
            let round_null = if iterations == 1 {
                null_mu
            } else {
                NullMean::None
            };
            let mut with_xtwx = !last_round(&changes, iterations, spec);
            let (mut sums, _) = round(
                &mut rounds,
                spec,
                &design,
                &config(Some(beta.clone()), round_null, with_xtwx),
            )
            .await
            .map_err(|e| stopped(ctx, e, "glm", iterations + 1, &design.names, &beta))?;
            // A non-finite deviance halves the step back towards the last
            // good coefficients, as R's glm.fit does.
            let mut halvings = 0;
            while !sums.deviance.is_finite() {
                let Some(prev) = &previous else {
                    return Err(FedError::InvalidArgument(
                        "no valid set of coefficients: please supply starting values".into(),
                    ));
                };
                halvings += 1;
                if halvings > spec.maxit {
                    return Err(FedError::InvalidArgument(
                        "inner loop; cannot correct step size".into(),
                    ));
                }
                beta = beta.iter().zip(prev).map(|(b, p)| (b + p) / 2.0).collect();
                let halved = config(Some(beta.clone()), round_null, true);
                sums = round(&mut rounds, spec, &design, &halved).await?.0;
                with_xtwx = true;
            }
            if iterations == 1 {
                null_deviance_sum = sums.null_deviance;
            }
            if let Some(progress) = progress {
                progress.report(&format!(
                    "glm iteration {iterations}: deviance {:.6}",
                    sums.deviance
                ));
            }
            let change = (sums.deviance - dev_old).abs() / (sums.deviance.abs() + 0.1);
            dev_old = sums.deviance;
            changes.push(change);
            last = sums;
            if change < spec.epsilon {
                converged = true;
                break;
            }
            if iterations >= spec.maxit {
                break;
            }
            if !with_xtwx {
                // Not the last round after all: its X'WX, at the same
                // coefficients (the same rows give the same sums).
                let full = config(Some(beta.clone()), round_null, true);
                last = round(&mut rounds, spec, &design, &full)
                    .await
                    .map_err(|e| stopped(ctx, e, "glm", iterations + 1, &design.names, &beta))?
                    .0;
            }
            previous = Some(beta.clone());
            beta = solve(&last, &kept, k)?;
            solved_from = last.xtwx.clone();
        }

        let mut warnings = Vec::new();
        if !converged {
            warnings.push(format!(
                "glm.fit: algorithm did not converge in {} iterations",
                spec.maxit
            ));
        }
        if last.boundary > 0.0 {
            warnings.push(match spec.family {
                Family::Binomial => {
                    "glm.fit: fitted probabilities numerically 0 or 1 occurred".into()
                }
                _ => "glm.fit: fitted rates numerically 0 occurred".to_string(),
            });
        }
        let nobs = last.n;
        let rank = kept.len();
        let df_residual = nobs - rank as f64;
        let mut dispersion =
            if !spec.negbin_ml && (spec.quasi || spec.family.estimates_dispersion()) {
                if df_residual > 0.0 {
                    last.pearson / df_residual
                } else {
                    f64::NAN
                }
            } else {
                1.0
            };
        let inverse = inverse_spd(&select(&to_dmatrix(&solved_from), &kept)).ok_or_else(|| {
            FedError::InvalidArgument("the information matrix at the estimate is singular".into())
        })?;
        let mut estimate = vec![None; k];
        let mut std_error = vec![None; k];
        let mut covariance = vec![vec![None; k]; k];
        for (i, &j) in kept.iter().enumerate() {
            estimate[j] = Some(beta[j]);
            std_error[j] = Some((dispersion * inverse[(i, i)]).sqrt());
            for (a, &l) in kept.iter().enumerate() {
                covariance[j][l] = Some(dispersion * inverse[(i, a)]);
            }
        }
        let input = SandwichInput {
            source: &spec.source,
            family: spec.family,
            link: spec.link,
            leading: design.arguments[..4].to_vec(),
            columns: kept
                .iter()
                .map(|&j| design.arguments[4 + j].clone())
                .collect(),
            beta: kept.iter().map(|&j| beta[j]).collect(),
            beta_w: previous.map(|p| kept.iter().map(|&j| p[j]).collect()),
            nobs,
            lm: false,
        };
        let working_dispersion =
            !spec.negbin_ml && (spec.quasi || matches!(spec.family, Family::NegativeBinomial(_)));
        if working_dispersion && df_residual > 0.0 {
            // R's dispersion: its working weights (of the last iteration)
            // times the squared working residuals, one more round.
            let pearson = robust::working_pearson(ctx, &input).await?;
            let ratio = pearson / df_residual / dispersion;
            for se in std_error.iter_mut() {
                *se = se.map(|s| s * ratio.sqrt());
            }
            for c in covariance.iter_mut().flatten() {
                *c = c.map(|c| c * ratio);
            }
            dispersion = pearson / df_residual;
        }
        if spec.covariance != Covariance::Classical {
            let robust = robust::covariance(ctx, &input, &spec.covariance).await?;
            let mut slots = vec![None; k];
            kept.iter()
                .enumerate()
                .for_each(|(i, &j)| slots[j] = Some(i));
            covariance = robust::spread(&robust, &slots);
            std_error = (0..k).map(|j| covariance[j][j].map(f64::sqrt)).collect();
        }
        let null_deviance = match null_mu {
            NullMean::None if !with_null => f64::NAN,
            NullMean::None => null_deviance(ctx, spec, last_round).await?,
            _ => null_deviance_sum,
        };
        Ok(GlmFit {
            family: spec.family,
            quasi: spec.quasi,
            link: spec.link,
            terms: design.names,
            estimate,
            std_error,
            nobs: nobs as i64,
            rows_dropped: total - nobs as i64,
            rank,
            intercept: spec.formula.intercept,
            deviance: last.deviance,
            null_deviance,
            dispersion,
            // A quasi family has no likelihood (R: AIC is NA).
            log_likelihood: if spec.quasi {
                f64::NAN
            } else {
                log_likelihood(spec.family, &last)
            },
            iterations,
            converged,
            warnings,
            covariance,
            theta: None,
        })
    }
    .boxed()
}

/// The deviance of the null model `y ~ 1 + offset`, fitted on the rows
/// of the model (R refits it when the model has an offset and an intercept).
pub(super) fn null_deviance<'a>(
    ctx: &'a FedContext,
    spec: &'a GlmSpec,
    last_round: LastRoundRule,
) -> BoxFuture<'a, Result<f64>> {
    async move {
        let mut used = spec.formula.columns();
        used.extend(spec.weights.iter().cloned());
        let rows = format!(
            "SELECT * FROM {} WHERE {}",
            spec.source.from,
            complete_cases(&used)
        );
        let null_spec = GlmSpec {
            source: ModelSource::parse(&rows),
            formula: Formula {
                terms: Vec::new(),
                ..spec.formula.clone()
            },
            covariance: Covariance::Classical,
            ..spec.clone()
        };
        Ok(fit_model(ctx, &null_spec, None, false, last_round, None)
            .await?
            .deviance)
    }
    .boxed()
}
