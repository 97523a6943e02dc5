//! `fedsgd` and `fedsgd_history`: federated SGD (FedSGD, McMahan et al.
//! 2017) with server-side optimizers, from SQL.
//!
//! ```sql
//! SELECT * FROM fedsgd('clinic', 'event ~ age + bmi + smoker', 'logistic',
//!                      'optimizer=adam, learning_rate=0.05, rounds=200');
//! SELECT * FROM fedsgd_history('clinic', 'event ~ age + bmi + smoker', 'logistic',
//!                      'optimizer=newton, rounds=10, tolerance=1e-8');
//! ```
//!
//! An iterative typed program, as TensorFlow Federated's federated SGD
//! process runs it: each round the server's parameters θ are broadcast (the
//! only thing sent to a client, inside the config of one `sgd_gradient`
//! aggregate), each client returns the sum of its per-record gradients at θ,
//! its loss sum and its example count (plus the curvature block for
//! `newton`) — a fixed-size state — and the coordinator averages the
//! clients' gradients (weighted by their example counts by default) and lets
//! a server optimizer ([`super::optimizer`]) take the step. Optimizer state
//! lives only at the coordinator.
//!
//! The objective is the mean loss plus an optional L2 penalty on every
//! coefficient but the intercept: L(θ) = Σᵢ ℓᵢ(θ) / N + (l2 / 2) Σⱼ θⱼ².

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::normal_equations::INTERCEPT;
use fedsql_udfs::sgd_step::SgdConfig;
use ndarray::Array1;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::coordinator::context::FedContext;
use crate::coordinator::dataframe::PreparedRound;
use crate::coordinator::fit_table::Program;
use crate::error::{FedError, Result};
use crate::formula::{Response, design_columns};
use crate::models::optimizer::ServerOptimizer;
use crate::models::source::{learn_levels, levels_sql, numeric_argument, string_arguments};
use crate::notices::Progress;
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::rounds::explain_step;

mod round;
mod shared;
mod spec;

use round::{aggregate, check_first_round, choose_clients, client_sums, nonfinite_warnings};
use shared::Design;
use shared::{Scaling, by_moments, learn_shared, shared_sql};
use spec::USAGE;
pub use spec::{FedSgdSpec, Start, Weighting};

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FedSgdOutput {
    /// (term, estimate)
    Coefficients,
    /// (round, loss, gradient_norm, clients_used)
    History,
}

/// The table functions `fedsgd` and `fedsgd_history`.
#[derive(Debug)]
pub struct FedSgdFunction {
    pub output: FedSgdOutput,
}

impl TableFunctionImpl for FedSgdFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = match self.output {
            FedSgdOutput::Coefficients => "fedsgd",
            FedSgdOutput::History => "fedsgd_history",
        };
        let strings = string_arguments(name, USAGE, args.exprs(), 3)?;
        let spec = FedSgdSpec::parse(&strings).map_err(|e| argument_error(name, e))?;
        let label = format!(
            "{name}('{}', {} model, {} optimizer)",
            spec.source.given,
            spec.model.name(),
            spec.optimizer.name()
        );
        let output = self.output;
        let schema = match output {
            FedSgdOutput::Coefficients => coefficients_schema(),
            FedSgdOutput::History => history_schema(),
        };
        let explained = spec.clone();
        let program: Program = Arc::new(move |ctx| {
            let spec = explained.clone();
            Box::pin(async move { explain(&ctx, &spec).await })
        });
        Ok(deferred_table(
            label,
            schema,
            Rounds::Iterative,
            Some(program),
            move |ctx, progress| {
                let spec = spec.clone();
                Box::pin(async move {
                    let fit = fit(&ctx, &spec, progress.as_deref()).await?;
                    let batch = match output {
                        FedSgdOutput::Coefficients => fit.coefficients()?,
                        FedSgdOutput::History => fit.history_batch()?,
                    };
                    for warning in &fit.warnings {
                        ctx.notice(format!("Warning: {warning}"));
                    }
                    ctx.notice(fit.summary(&spec));
                    Ok(batch)
                })
            },
        ))
    }
}

/// The columns of `fedsgd`.
pub fn coefficients_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("estimate", DataType::Float64, false),
    ]))
}

/// The columns of `fedsgd_history`.
pub fn history_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("round", DataType::Int64, false),
        Field::new("loss", DataType::Float64, false),
        Field::new("gradient_norm", DataType::Float64, false),
        Field::new("clients_used", DataType::Int64, false),
    ]))
}

/// One round of the history: the objective and its gradient at the
/// parameters the round started from.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    pub round: usize,
    pub loss: f64,
    pub gradient_norm: f64,
    pub clients_used: usize,
}

/// A finished FedSGD run.
#[derive(Debug, Clone)]
pub struct FedSgdFit {
    pub terms: Vec<String>,
    /// The final coefficients, on the original scale.
    pub estimate: Vec<f64>,
    /// The coefficients after each round's step, on the original scale.
    pub iterates: Vec<Vec<f64>>,
    pub history: Vec<RoundRecord>,
    /// Whether the gradient norm fell below the tolerance.
    pub converged: bool,
    pub warnings: Vec<String>,
}

impl FedSgdFit {
    pub fn coefficients(&self) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new(
            coefficients_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(&self.terms)),
                Arc::new(Float64Array::from(self.estimate.clone())),
            ],
        )?)
    }

    pub fn history_batch(&self) -> Result<RecordBatch> {
        let h = &self.history;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                h.iter().map(|r| r.round as i64),
            )),
            Arc::new(Float64Array::from_iter_values(h.iter().map(|r| r.loss))),
            Arc::new(Float64Array::from_iter_values(
                h.iter().map(|r| r.gradient_norm),
            )),
            Arc::new(Int64Array::from_iter_values(
                h.iter().map(|r| r.clients_used as i64),
            )),
        ];
        Ok(RecordBatch::try_new(history_schema(), columns)?)
    }

    /// What the REPL prints under the result.
    pub fn summary(&self, spec: &FedSgdSpec) -> String {
        let last = self.history.last();
        let stop = if self.converged {
            format!(
                "stopped at round {}: gradient norm below tolerance {:e}",
                self.history.len(),
                spec.tolerance
            )
        } else {
            format!("ran all {} rounds", spec.rounds)
        };
        format!(
            "fedsgd: {} model, {} optimizer (learning rate {}); {stop}; final loss {:.6}, gradient norm {:.3e}",
            spec.model.name(),
            spec.optimizer.name(),
            spec.learning_rate,
            last.map_or(f64::NAN, |r| r.loss),
            last.map_or(f64::NAN, |r| r.gradient_norm),
        )
    }
}

async fn design(ctx: &FedContext, spec: &FedSgdSpec) -> Result<Design> {
    let schema = spec.source.schema(ctx).await?;
    let Response::Column(y) = &spec.formula.response else {
        return Err(FedError::InvalidArgument(
            "fedsgd takes one response column".into(),
        ));
    };
    let response = numeric_argument(&schema, y, "response")?;
    let offset = match &spec.formula.offset {
        Some(offset) => crate::models::source::offset_sql(&schema, offset)?,
        None => "0.0".into(),
    };
    let formula = &spec.formula.expand_dot(&schema);
    let factors = formula.factors(&schema)?;
    let levels = learn_levels(ctx, &spec.source, formula, &factors).await?;
    let mut names = Vec::new();
    let mut columns = Vec::new();
    if spec.formula.intercept {
        names.push(INTERCEPT.to_string());
        columns.push("1.0".to_string());
    }
    for c in design_columns(formula, &schema, &levels)? {
        names.push(c.name);
        columns.push(c.sql);
    }
    if columns.is_empty() {
        return Err(FedError::InvalidArgument(
            "the model has no coefficients: add a term or the intercept".into(),
        ));
    }
    Ok(Design {
        response,
        offset,
        columns,
        names,
        used: formula.columns(),
    })
}

/// The query of one step: each client's gradient sums (and curvature for
/// Newton's method) at the coefficients `config` carries.
fn step_sql(spec: &FedSgdSpec, design: &Design, columns: &[String], config: &SgdConfig) -> String {
    let function = if spec.optimizer.needs_curvature() {
        "sgd_newton"
    } else {
        "sgd_gradient"
    };
    format!(
        "SELECT {function}('{}', {}, {}, {}) FROM {}",
        config.encode(),
        design.response,
        design.offset,
        columns.join(", "),
        spec.source.from
    )
}

/// `EXPLAIN FEDERATED` of a run: the levels round when the formula has
/// factors (which runs, as the design depends on it), the round of shared
/// statistics when one is needed, then the step round (planned only).
pub async fn explain(ctx: &FedContext, spec: &FedSgdSpec) -> Result<String> {
    let schema = spec.source.schema(ctx).await?;
    let formula = spec.formula.expand_dot(&schema);
    let factors = formula.factors(&schema)?;
    let mut out = format!(
        "== Program of fedsgd('{}', {} model, {} optimizer): at most {} step rounds ==\n",
        spec.source.given,
        spec.model.name(),
        spec.optimizer.name(),
        spec.rounds
    );
    let mut step = 1;
    if !factors.is_empty() {
        out += &explain_step(
            ctx,
            "Step 1: the levels of the factors (one GROUP BY round; EXPLAIN runs it, the design depends on it)",
            &levels_sql(&spec.source, &formula, &factors),
        )
        .await?;
        step += 1;
    }
    let design = design(ctx, spec).await?;
    let intercept = design.names.iter().any(|n| n == INTERCEPT);
    if (spec.start == Start::Mean && intercept) || spec.standardize {
        out += &explain_step(
            ctx,
            &format!(
                "Step {step}: shared statistics, one round: the mean response{}",
                if spec.standardize {
                    " and each column's mean and standard deviation (standardize=true)"
                } else {
                    ", for the starting intercept"
                }
            ),
            &shared_sql(spec, &design, by_moments(&design)),
        )
        .await?;
        step += 1;
    }
    let config = SgdConfig {
        model: spec.model,
        theta: vec![0.0; design.names.len()],
    };
    out += &explain_step(
        ctx,
        &format!(
            "Step {step}: rounds 1..{}: {} clients each send their own state (decoded one by one, then weighted by {}); the coefficients are the one shared parameter",
            spec.rounds,
            match spec.clients_per_round {
                Some(n) => format!("{n} sampled"),
                None => "all".into(),
            },
            match spec.weighting {
                Weighting::NumExamples => "their number of examples",
                Weighting::Uniform => "one each",
            }
        ),
        &step_sql(spec, &design, &design.columns, &config),
    )
    .await?;
    out += "== Then, on the coordinator: the server optimizer's update after each round; no further round ==\n";
    Ok(out)
}

/// Coefficients on the fitting scale mapped back to the original columns.
fn original_scale(theta: &[f64], scaling: &Scaling, names: &[String]) -> Vec<f64> {
    let mut beta: Vec<f64> = theta.iter().zip(scaling).map(|(t, (_, s))| t / s).collect();
    if let Some(i) = names.iter().position(|n| n == INTERCEPT) {
        let shift: f64 = beta.iter().zip(scaling).map(|(b, (m, _))| b * m).sum();
        beta[i] -= shift;
    }
    beta
}

/// Runs FedSGD.
pub async fn fit(
    ctx: &FedContext,
    spec: &FedSgdSpec,
    progress: Option<&Progress>,
) -> Result<FedSgdFit> {
    let design = design(ctx, spec).await?;
    let k = design.names.len();
    let (scaling, intercept_start) = learn_shared(ctx, spec, &design).await?;
    let columns: Vec<String> = design
        .columns
        .iter()
        .zip(&scaling)
        .map(|(sql, &(m, s))| {
            if (m, s) == (0.0, 1.0) {
                sql.clone()
            } else {
                format!("(({sql}) - {m:?}) / {s:?}")
            }
        })
        .collect();
    let penalized: Vec<f64> = design
        .names
        .iter()
        .map(|n| if n == INTERCEPT { 0.0 } else { 1.0 })
        .collect();
    let penalized = Array1::from_vec(penalized);

    // Centred columns (or zero coefficients) make η = intercept at the start
    // on either scale.
    let mut theta = vec![0.0; k];
    if let Some(i) = design.names.iter().position(|n| n == INTERCEPT) {
        theta[i] = intercept_start;
    }
    let mut optimizer = ServerOptimizer::new(spec.optimizer.clone(), spec.learning_rate, k);
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let mut history = Vec::new();
    let mut iterates = Vec::new();
    let mut skipped = Vec::new();
    let mut converged = false;
    // The step round is planned once; later rounds rebind its config.
    let mut planned: Option<(PreparedRound, String)> = None;
    for round in 1..=spec.rounds {
        let config = SgdConfig {
            model: spec.model,
            theta: theta.clone(),
        };
        let text = config.encode();
        let per_round = spec.clients_per_round;
        // A failure names the round and the last coefficients.
        let stopped = |e| {
            let last = match round {
                1 => Vec::new(),
                _ => original_scale(&theta, &scaling, &design.names),
            };
            crate::models::glm::stopped(ctx, e, "fedsgd", round, &design.names, &last)
        };
        let rebound = match &planned {
            Some((prepared, old)) => prepared.rebound(old, &text)?,
            None => None,
        };
        let prepared = match rebound {
            Some(prepared) => prepared,
            None => {
                let sql = step_sql(spec, &design, &columns, &config);
                let query = ctx.sql(&sql).await?;
                query.prepare_per_client().await.map_err(stopped)?
            }
        };
        let answers = prepared
            .run(|names| choose_clients(names, per_round, &mut rng))
            .await
            .map_err(stopped)?;
        planned = Some((prepared, text));
        let answers = client_sums(&answers, k)?;
        if round == 1 {
            check_first_round(spec, &answers)?;
        }
        let Some(mut objective) = aggregate(&answers, spec.weighting, round, &mut skipped) else {
            return Err(FedError::InvalidArgument(format!(
                "round {round}: no client returned a usable gradient (every chosen client has no rows or a non-finite gradient); lower the learning_rate, or standardize=true"
            )));
        };
        // The L2 penalty, on every coefficient but the intercept.
        if spec.l2 > 0.0 {
            let t = Array1::from_vec(theta.clone());
            objective.loss += 0.5 * spec.l2 * (&t * &t * &penalized).sum();
            objective.gradient.scaled_add(spec.l2, &(&t * &penalized));
            if let Some(c) = objective.curvature.as_mut() {
                for j in 0..k {
                    c[(j, j)] += spec.l2 * penalized[j];
                }
            }
        }
        let gradient_norm = objective.gradient.dot(&objective.gradient).sqrt();
        history.push(RoundRecord {
            round,
            loss: objective.loss,
            gradient_norm,
            clients_used: objective.clients_used,
        });
        if let Some(progress) = progress {
            progress.report(&format!(
                "fedsgd round {round}/{}: loss {:.6}, gradient norm {gradient_norm:.3e}",
                spec.rounds, objective.loss
            ));
        }
        if gradient_norm < spec.tolerance {
            converged = true;
            break;
        }
        optimizer.step(
            &mut theta,
            objective.gradient.as_slice().expect("contiguous"),
            objective.curvature.as_ref(),
        )?;
        if theta.iter().any(|t| !t.is_finite()) {
            return Err(FedError::InvalidArgument(format!(
                "fedsgd diverged at round {round} (a coefficient is no longer finite): lower the learning_rate, or standardize=true"
            )));
        }
        iterates.push(original_scale(&theta, &scaling, &design.names));
    }
    let mut warnings = nonfinite_warnings(&skipped);
    warnings.extend(divergence_warning(spec, &history, converged));
    Ok(FedSgdFit {
        estimate: original_scale(&theta, &scaling, &design.names),
        terms: design.names,
        iterates,
        history,
        converged,
        warnings,
    })
}

/// A warning when the loss ends higher than it started (every client in
/// every round, so the losses are comparable): the steps overshoot.
fn divergence_warning(
    spec: &FedSgdSpec,
    history: &[RoundRecord],
    converged: bool,
) -> Option<String> {
    let (first, last) = (history.first()?, history.last()?);
    let rising = last.loss > first.loss * (1.0 + 1e-9) && last.round > first.round;
    (!converged && spec.clients_per_round.is_none() && rising).then(|| {
        format!(
            "fedsgd: the loss is diverging (it rose from {:.6e} in round {} to {:.6e} in round {}): use standardize=true, or a smaller learning_rate (it is {})",
            first.loss, first.round, last.loss, last.round, spec.learning_rate
        )
    })
}
