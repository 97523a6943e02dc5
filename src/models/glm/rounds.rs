//! The SQL of a GLM's rounds: its design (the arguments of `irls_step`
//! after its config, from the formula and the factors' levels), one IRLS
//! round run or rebound ([`round`]), the error of a round that failed
//! ([`stopped`]), and `EXPLAIN FEDERATED` of a fit ([`explain`]).

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use fedsql_udfs::family::Family;
use fedsql_udfs::irls_step::{IrlsConfig, IrlsSums, NullMean};
use fedsql_udfs::normal_equations::INTERCEPT;

use super::spec::GlmSpec;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{Response, design_columns};
use crate::models::source::{learn_levels, levels_sql, numeric_argument};
use crate::models::step_rounds::StepRounds;
use crate::table_function::rounds::explain_step;

/// The SQL pieces of a fit: the argument list of `irls_step` after its
/// config, and the design column names. Rows with a NULL in any argument
/// (a factor's dummies are NULL where the factor is) drop out of every round.
pub(super) struct Design {
    pub(super) arguments: Vec<String>,
    pub(super) names: Vec<String>,
}

pub(super) async fn design(ctx: &FedContext, spec: &GlmSpec) -> Result<Design> {
    let schema = spec.source.schema(ctx).await?;
    let numeric = |column: &str, role: &str| numeric_argument(&schema, column, role);
    let mut factors = spec.formula.factors(&schema)?;
    let text_response = match &spec.formula.response {
        Response::Column(y) if spec.family == Family::Binomial => {
            let t = schema
                .field_with_name(y)
                .map_err(|_| crate::formula::missing_column(y, &schema))?
                .data_type();
            let text = matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
            if text && !factors.contains(y) {
                factors.push(y.clone());
            }
            (text || *t == DataType::Boolean).then_some((y.clone(), text))
        }
        _ => None,
    };
    let levels = learn_levels(ctx, &spec.source, &spec.formula, &factors).await?;
    let (y, trials) = match &spec.formula.response {
        // As R: a logical response is TRUE for a success; of a text
        // (factor) response the first level, sorted, is failure and every
        // other level success.
        Response::Column(_) if text_response.is_some() => {
            let (y, text) = text_response.expect("some");
            let quoted = crate::formula::quote_ident(&y);
            let sql = if text {
                let first = levels
                    .iter()
                    .find(|(c, _)| *c == y)
                    .and_then(|(_, l)| l.first())
                    .map(crate::formula::level_label)
                    .unwrap_or_default();
                format!(
                    "CASE WHEN {quoted} IS NULL THEN NULL WHEN {quoted} = '{}' THEN 0.0 ELSE 1.0 END",
                    first.replace('\'', "''")
                )
            } else {
                format!("CAST({quoted} AS DOUBLE)")
            };
            (sql, "1.0".to_string())
        }
        Response::Column(y) => (numeric(y, "response")?, "1.0".to_string()),
        Response::Counts {
            successes,
            failures,
        } => {
            let (s, f) = (
                numeric(successes, "successes column")?,
                numeric(failures, "failures column")?,
            );
            (format!("{s} / ({s} + {f})"), format!("({s} + {f})"))
        }
    };
    let offset = match &spec.formula.offset {
        Some(v) => crate::models::source::offset_sql(&schema, v)?,
        None => "0.0".into(),
    };
    let weight = match &spec.weights {
        Some(column) => numeric(column, "weights column")?,
        None => "1.0".into(),
    };
    let columns = design_columns(&spec.formula, &schema, &levels)?;
    let mut names = Vec::new();
    let mut arguments = vec![y, trials, offset, weight];
    if spec.formula.intercept {
        names.push(INTERCEPT.to_string());
        arguments.push("1.0".into());
    }
    for c in columns {
        names.push(if spec.r_names { c.r_name } else { c.name });
        arguments.push(c.sql);
    }
    Ok(Design { arguments, names })
}

/// One IRLS round (the first planned from its SQL, the later ones
/// rebinding its config): the sums, and the total row count of the source.
pub(super) async fn round(
    rounds: &mut StepRounds<'_>,
    spec: &GlmSpec,
    design: &Design,
    config: &IrlsConfig,
) -> Result<(IrlsSums, i64)> {
    let batches = rounds
        .run(&config.encode(), || round_sql(spec, design, config))
        .await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("an IRLS round returned nothing".into()))?;
    let total = batch.column(0).as_primitive::<Int64Type>().value(0);
    let sums = batch.column(1).as_list::<i32>().value(0);
    let sums = sums.as_primitive::<Float64Type>().values();
    Ok((IrlsSums::from_slice(sums, design.names.len()), total))
}

/// A round's failure, named by the round; the coefficients reached so far
/// (if any) are kept in a notice, so that a long fit is not lost silently.
pub(crate) fn stopped(
    ctx: &FedContext,
    e: FedError,
    model: &str,
    round: usize,
    names: &[String],
    coefficients: &[f64],
) -> FedError {
    if !coefficients.is_empty() {
        let values: Vec<String> = names
            .iter()
            .zip(coefficients)
            .map(|(n, b)| format!("{n} = {b:?}"))
            .collect();
        ctx.notice(format!(
            "{model} stopped in round {round}; the last coefficients were: {}",
            values.join(", ")
        ));
    }
    match e {
        FedError::Client {
            client,
            location,
            message,
        } => FedError::Client {
            client,
            location,
            message: format!("{model} round {round} failed: {message}"),
        },
        other => other,
    }
}

/// The query of one IRLS round.
fn round_sql(spec: &GlmSpec, design: &Design, config: &IrlsConfig) -> String {
    format!(
        "SELECT count(*) AS total, irls_step('{}', {}) AS sums FROM {}",
        config.encode(),
        design.arguments.join(", "),
        spec.source.from
    )
}

/// `EXPLAIN FEDERATED` of a fit: the levels round when the formula has
/// factors (which runs, as the design depends on it), then the IRLS round
/// (planned only), which repeats with new coefficients.
pub(crate) async fn explain(ctx: &FedContext, spec: &GlmSpec) -> Result<String> {
    let schema = spec.source.schema(ctx).await?;
    let spec = &GlmSpec {
        formula: spec.formula.expand_dot(&schema),
        ..spec.clone()
    };
    let factors = spec.formula.factors(&schema)?;
    let mut out = format!(
        "== Program of glm('{}', family {}({})): {}IRLS rounds, at most {} + 1 ==\n",
        spec.source.given,
        spec.family,
        spec.link,
        if factors.is_empty() {
            ""
        } else {
            "one levels round, then "
        },
        spec.maxit
    );
    let mut step = 1;
    if !factors.is_empty() {
        out += &explain_step(
            ctx,
            "Step 1: the levels of the factors (one GROUP BY round; EXPLAIN runs it, the design depends on it)",
            &levels_sql(&spec.source, &spec.formula, &factors),
        )
        .await?;
        step += 1;
    }
    let design = design(ctx, spec).await?;
    let config = IrlsConfig {
        family: spec.family,
        link: spec.link,
        beta: None,
        null_mu: NullMean::None,
        xtwx: true,
    };
    out += &explain_step(
        ctx,
        &format!(
            "Step {step}: IRLS round 1, from R's starting means: X'WX, X'Wz, the deviance and counts over {} design column(s)",
            design.names.len()
        ),
        &round_sql(spec, &design, &config),
    )
    .await?;
    out += &format!(
        "#### Step {}: IRLS rounds 2, 3, ...: the same encoder, the current coefficients its one shared parameter (the same state size); until |dev - dev_old| / (|dev| + 0.1) < {}, at most {} rounds in all; a round whose deviance is not finite is run again with the step halved; a round expected to be the last (the deviance's last two changes say so, or maxit) skips X'WX and X'Wz, and is run again with them if the fit goes on\n",
        step + 1,
        spec.epsilon,
        spec.maxit + 1
    );
    if spec.formula.intercept && spec.formula.offset.is_some() {
        out += "#### Then the null model (y ~ 1 + offset) for the null deviance: its own IRLS rounds with one column\n";
    }
    out += "== Then, on the coordinator: the estimates, and their covariance from the last round's X'WX; no further round ==\n";
    Ok(out)
}
