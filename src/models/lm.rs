//! `lm`, `lm_stats` and `lm_vcov`: linear regression from SQL, in one
//! federated round.
//!
//! ```sql
//! SELECT * FROM lm('clinic', 'systolic ~ age + bmi + smoker');
//! SELECT * FROM lm_stats('SELECT * FROM clinic WHERE age > 40', 'systolic ~ age + C(region)');
//! SELECT * FROM lm_vcov('clinic', 'systolic ~ age + bmi');  -- term1, term2, covariance
//! ```
//!
//! The design columns of the formula become SQL expressions; one federated
//! query computes `centered_moments(y, x1, ..., xk)` — n, means and centered
//! cross products, (k+1)² + (k+1) + 1 numbers per client whatever its rows —
//! and the coordinator solves the normal equations from the merged state
//! (see `fedsql_udfs::ols`). Factors need one GROUP BY round first, for their
//! levels. Rows with a NULL in a used column are dropped and counted.

use std::sync::Arc;

use datafusion::arrow::array::Array;
use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::comoments::CoMoments;
use fedsql_udfs::distribution::f_sf;
use fedsql_udfs::normal_equations::INTERCEPT;
use fedsql_udfs::ols::{OlsFit, fit_ols};

use fedsql_udfs::family::{Family, Link};

use super::inference::{self, Reference, coefficients_schema};
use super::robust::{self, Covariance, SandwichInput};
use super::source::{ModelSource, complete_cases, learn_levels, levels_sql, string_arguments};
use crate::coordinator::context::FedContext;
use crate::coordinator::fit_table::Program;
use crate::error::{FedError, Result};
use crate::formula::{
    DesignColumn, Formula, Response, design_columns, missing_column, quote_ident,
};
use crate::notices::printed_summary::{FitLines, ModelSummary, call_text};
use crate::table_function::arguments::{argument_error, invalid_argument};
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::explain_step;

const USAGE: &str =
    "lm('table or SELECT query', 'y ~ x1 + x2 + C(factor)' [, 'weights=col, se=HC3, cluster=col'])";

/// The options `lm` takes.
const OPTIONS: &[&str] = &["weights", "se", "cluster", "names"];

/// The options of an `lm` call.
#[derive(Debug, Clone, Default)]
pub(crate) struct LmOptions {
    /// Model-based or robust standard errors.
    pub covariance: Covariance,
    /// Terms named as R names them (`names=r`).
    pub r_names: bool,
    /// A column of weights (R's `lm(weights = w)`): weighted least squares.
    pub weights: Option<String>,
}

impl LmOptions {
    fn parse(text: Option<&str>) -> Result<Self> {
        let options = Options::parse("lm", text, OPTIONS)?;
        Ok(Self {
            covariance: Covariance::from_options(&options)?,
            r_names: match options.get("names") {
                Some(o) => o.choice(&["r", "patsy"])? == "r",
                None => false,
            },
            weights: options.get("weights").map(|o| o.value.clone()),
        })
    }
}

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LmOutput {
    /// One row per term.
    Coefficients,
    /// One row of fit statistics.
    Stats,
    /// The covariance matrix of the estimates, one row per pair of terms.
    Vcov,
}

/// The table functions `lm` and `lm_stats`.
#[derive(Debug)]
pub(crate) struct LmFunction {
    pub output: LmOutput,
}

impl TableFunctionImpl for LmFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = self.name();
        let strings = string_arguments(name, USAGE, args.exprs(), 2)?;
        if strings.len() > 3 {
            return Err(invalid_argument(
                name,
                format!("{name} takes 2 or 3 arguments; usage: {USAGE}"),
            ));
        }
        let formula = Formula::parse(&strings[1]).map_err(|e| argument_error(name, e))?;
        let options = LmOptions::parse(strings.get(2).map(String::as_str))
            .map_err(|e| argument_error(name, e))?;
        if formula.offset.is_some() || matches!(formula.response, Response::Counts { .. }) {
            return Err(invalid_argument(
                name,
                "offset() and cbind() belong to glm formulas",
            ));
        }
        let source = ModelSource::parse(&strings[0]);
        let label = format!("{name}('{}', '{}')", source.given, formula_text(&formula));
        let (output, schema) = (self.output, self.schema());
        let (explained_source, explained_formula) = (source.clone(), formula.clone());
        let explained_weights = options.weights.clone();
        let program: Program = Arc::new(move |ctx| {
            let (source, formula) = (explained_source.clone(), explained_formula.clone());
            let weights = explained_weights.clone();
            Box::pin(async move { explain(&ctx, &source, &formula, weights.as_deref()).await })
        });
        let weights: Vec<String> = options
            .weights
            .iter()
            .map(|w| format!("weights = {w}"))
            .collect();
        let call = call_text("lm", &strings[1], &weights, &strings[0]);
        Ok(deferred_table(
            label,
            schema,
            Rounds::Independent,
            Some(program),
            move |ctx, _| {
                let (source, formula, call) = (source.clone(), formula.clone(), call.clone());
                let options = options.clone();
                Box::pin(async move {
                    let fit = fit(&ctx, &source, &formula, &options).await?;
                    match output {
                        LmOutput::Coefficients => {
                            // R's summary() lines, which the REPL prints around the table.
                            ctx.push_summary(printed_summary(&fit, call));
                            coefficients_batch(&fit.ols)
                        }
                        LmOutput::Stats => stats_batch(&fit),
                        LmOutput::Vcov => {
                            inference::vcov_batch(&fit.ols.terms, &fit.ols.covariance)
                        }
                    }
                })
            },
        ))
    }
}

impl LmFunction {
    fn name(&self) -> &'static str {
        match self.output {
            LmOutput::Coefficients => "lm",
            LmOutput::Stats => "lm_stats",
            LmOutput::Vcov => "lm_vcov",
        }
    }

    fn schema(&self) -> SchemaRef {
        match self.output {
            LmOutput::Coefficients => coefficients_schema(),
            LmOutput::Stats => stats_schema(),
            LmOutput::Vcov => inference::vcov_schema(),
        }
    }
}

/// The columns of `lm_stats`: one row.
pub(crate) fn stats_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    let i = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        i("nobs"),
        i("df_model"),
        i("df_residual"),
        f("r_squared"),
        f("adj_r_squared"),
        f("sigma"),
        f("f_statistic"),
        f("f_p_value"),
        f("log_likelihood"),
        f("aic"),
        f("bic"),
        i("rows_dropped"),
    ]))
}

fn formula_text(f: &Formula) -> String {
    let Response::Column(y) = &f.response else {
        return String::new();
    };
    let mut terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
    if !f.intercept {
        terms.push("0".into());
    }
    format!(
        "{y} ~ {}",
        if terms.is_empty() {
            "1".into()
        } else {
            terms.join(" + ")
        }
    )
}

/// A fitted linear model and how many rows were left out.
pub(crate) struct LmFit {
    pub ols: OlsFit,
    pub rows_dropped: i64,
    /// Σ log w over the rows used (0 without weights): R's `logLik.lm`
    /// adds half of it.
    pub sum_log_weights: f64,
}

impl LmFit {
    /// The log-likelihood as R's `logLik.lm` (with weights,
    /// ½ Σ log w − N/2 (log 2π + 1 − log N + log Σ w r²)).
    pub(crate) fn log_likelihood(&self) -> f64 {
        self.ols.log_likelihood() + 0.5 * self.sum_log_weights
    }

    /// AIC: −2 logLik + 2 (rank + 1).
    pub(crate) fn aic(&self) -> f64 {
        -2.0 * self.log_likelihood() + 2.0 * (self.ols.rank as f64 + 1.0)
    }

    /// BIC: −2 logLik + log(n) (rank + 1).
    pub(crate) fn bic(&self) -> f64 {
        -2.0 * self.log_likelihood() + (self.ols.nobs as f64).ln() * (self.ols.rank as f64 + 1.0)
    }
}

/// Fits the model: levels (if any factor), then one round of co-moments.
pub(crate) async fn fit(
    ctx: &FedContext,
    source: &ModelSource,
    formula: &Formula,
    options: &LmOptions,
) -> Result<LmFit> {
    let schema = source.schema(ctx).await?;
    let Response::Column(y) = &formula.response else {
        return Err(FedError::InvalidArgument(
            "lm takes one response column".into(),
        ));
    };
    let y_type = schema
        .field_with_name(y)
        .map_err(|_| missing_column(y, &schema))?
        .data_type();
    if !y_type.is_numeric() {
        return Err(FedError::InvalidArgument(format!(
            "the response `{y}` is {y_type}; lm needs a numeric response"
        )));
    }
    let formula = &formula.expand_dot(&schema);
    let weights = options.weights.as_deref();
    let (sql, design) = moments_round(ctx, source, formula, &schema, y, weights).await?;
    let batches = ctx.sql(&sql).await?.collect().await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("the fit query returned nothing".into()))?;
    let total = batch.column(0).as_primitive::<Int64Type>().value(0);
    let (_, state) = fedsql_udfs::centered_moments::read(batch.column(2).as_struct(), 0)?;
    if total == 0 {
        return Err(FedError::InvalidArgument(format!(
            "the source '{}' has no rows (after its filter)",
            source.given
        )));
    }
    if state.n == 0 {
        return Err(FedError::InvalidArgument(format!(
            "no rows left: all {total} rows of '{}' have a NULL in a column the formula uses",
            source.given
        )));
    }
    let names: Vec<String> = design
        .iter()
        .map(|c| {
            if options.r_names {
                c.r_name.clone()
            } else {
                c.name.clone()
            }
        })
        .collect();
    let (mut ols, sum_log_weights) = match weights {
        None => (
            fit_ols(&state, &names, formula.intercept).map_err(FedError::InvalidArgument)?,
            0.0,
        ),
        Some(w) => {
            let negative = batch.column(3).as_primitive::<Int64Type>().value(0);
            if negative > 0 {
                return Err(FedError::InvalidArgument(format!(
                    "the weights `{w}` are negative in {negative} rows: lm takes weights >= 0, as R"
                )));
            }
            let sum_log = batch.column(4).as_primitive::<Float64Type>();
            let sum_log = if sum_log.is_null(0) {
                0.0
            } else {
                sum_log.value(0)
            };
            (weighted_fit(&state, names, formula.intercept)?, sum_log)
        }
    };
    if options.covariance != Covariance::Classical {
        let weight = weights.map_or("1.0".to_string(), |w| {
            format!("CAST({} AS DOUBLE)", quote_ident(w))
        });
        let robust = (y.as_str(), weight.as_str());
        robust_errors(ctx, source, robust, &design, &mut ols, &options.covariance).await?;
        ctx.notice(format!(
            "Standard errors: {}",
            options.covariance.described(true)
        ));
    }
    Ok(LmFit {
        ols,
        rows_dropped: total - state.n as i64,
        sum_log_weights,
    })
}

/// Weighted least squares from the co-moments of √w·y, √w (the
/// intercept's column) and √w·x: a fit without intercept of the
/// transformed rows, whose R², F and degrees of freedom are then those of
/// the model with an intercept, as R's `summary.lm` takes them (the total
/// sum of squares about the weighted mean).
fn weighted_fit(state: &CoMoments, names: Vec<String>, intercept: bool) -> Result<OlsFit> {
    let names: Vec<String> = if intercept {
        std::iter::once(INTERCEPT.to_string())
            .chain(names)
            .collect()
    } else {
        names
    };
    let mut ols = fit_ols(state, &names, false).map_err(FedError::InvalidArgument)?;
    if intercept {
        // Raw sums Σ y*², Σ s y*, Σ s² (s = √w) from the centered moments.
        let n = state.n as f64;
        let raw = |a: usize, b: usize| state.m2[(a, b)] + n * state.mean[a] * state.mean[b];
        ols.tss = raw(0, 0) - raw(0, 1) * raw(0, 1) / raw(1, 1);
        ols.intercept = true;
    }
    Ok(ols)
}

/// Replaces the fit's covariance and standard errors by robust ones.
async fn robust_errors(
    ctx: &FedContext,
    source: &ModelSource,
    (y, weight): (&str, &str),
    design: &[DesignColumn],
    ols: &mut OlsFit,
    covariance: &Covariance,
) -> Result<()> {
    let mut sql: Vec<String> = Vec::new();
    if ols.intercept {
        sql.push("1.0".into());
    }
    sql.extend(design.iter().map(|c| c.sql.clone()));
    let (mut columns, mut beta, mut slots) = (Vec::new(), Vec::new(), Vec::new());
    for (column, estimate) in sql.into_iter().zip(&ols.estimate) {
        slots.push(estimate.map(|_| columns.len()));
        if let Some(b) = estimate {
            columns.push(column);
            beta.push(*b);
        }
    }
    let input = SandwichInput {
        source,
        family: Family::Gaussian,
        link: Link::Identity,
        leading: vec![
            format!("CAST({} AS DOUBLE)", quote_ident(y)),
            "1.0".into(),
            "0.0".into(),
            weight.to_string(),
        ],
        columns,
        beta,
        beta_w: None,
        nobs: ols.nobs as f64,
        lm: true,
    };
    let matrix = robust::covariance(ctx, &input, covariance).await?;
    ols.covariance = robust::spread(&matrix, &slots);
    ols.std_error = (0..slots.len())
        .map(|j| ols.covariance[j][j].map(f64::sqrt))
        .collect();
    Ok(())
}

/// The query of the co-moments round and the design columns (after the
/// levels round, when the formula has factors). With weights, the
/// co-moments are of √w·y, √w and √w·x (rows of weight 0 drop out, as
/// from R's residual degrees of freedom), with two more columns: the rows
/// of negative weight (refused) and Σ log w over the rows used.
async fn moments_round(
    ctx: &FedContext,
    source: &ModelSource,
    formula: &Formula,
    schema: &Schema,
    y: &str,
    weights: Option<&str>,
) -> Result<(String, Vec<DesignColumn>)> {
    let factors = formula.factors(schema)?;
    let levels = learn_levels(ctx, source, formula, &factors).await?;
    let design = design_columns(formula, schema, &levels)?;
    let mut used = formula.columns();
    let y = format!("CAST({} AS DOUBLE)", quote_ident(y));
    let (arguments, extra) = match weights {
        None => {
            let mut arguments = vec![y];
            arguments.extend(design.iter().map(|c| c.sql.clone()));
            (arguments, String::new())
        }
        Some(w) => {
            let w_sql = super::source::numeric_argument(schema, w, "weights column")?;
            used.push(w.to_string());
            let root = format!("(CASE WHEN {w_sql} > 0 THEN sqrt({w_sql}) END)");
            let mut arguments = vec![format!("{root} * {y}"), root.clone()];
            arguments.extend(design.iter().map(|c| format!("{root} * ({})", c.sql)));
            let extra = format!(
                ", count(*) FILTER (WHERE {w_sql} < 0) AS negative, sum(ln({w_sql})) FILTER (WHERE {} AND {w_sql} > 0) AS sum_log_w",
                complete_cases(&used)
            );
            (arguments, extra)
        }
    };
    // Rows with a NULL in a used column drop out of the co-moments; the
    // filter makes factors' NULLs drop too (their dummies are never NULL-free).
    let sql = format!(
        "SELECT count(*) AS total, count(*) FILTER (WHERE {}) AS complete, centered_moments({}) AS m{extra} FROM {}",
        complete_cases(&used),
        arguments.join(", "),
        source.from
    );
    Ok((sql, design))
}

/// `EXPLAIN FEDERATED` of a fit: the levels round when the formula has
/// factors (which runs, as the design depends on it), then the one round
/// of co-moments (planned only).
pub(crate) async fn explain(
    ctx: &FedContext,
    source: &ModelSource,
    formula: &Formula,
    weights: Option<&str>,
) -> Result<String> {
    let schema = source.schema(ctx).await?;
    let formula = &formula.expand_dot(&schema);
    let Response::Column(y) = &formula.response else {
        return Err(FedError::InvalidArgument(
            "lm takes one response column".into(),
        ));
    };
    let factors = formula.factors(&schema)?;
    let mut out = format!(
        "== Program of lm('{}', '{}'): {} federated round(s) ==\n",
        source.given,
        formula_text(formula),
        1 + usize::from(!factors.is_empty())
    );
    if !factors.is_empty() {
        out += &explain_step(
            ctx,
            "Step 1: the levels of the factors (one GROUP BY round; EXPLAIN runs it, the design depends on it)",
            &levels_sql(source, formula, &factors),
        )
        .await?;
    }
    let (sql, design) = moments_round(ctx, source, formula, &schema, y, weights).await?;
    out += &explain_step(
        ctx,
        &format!(
            "Step {}: the co-moments of the response and the {} design column(s), one round",
            1 + usize::from(!factors.is_empty()),
            design.len()
        ),
        &sql,
    )
    .await?;
    out += "== Then, on the coordinator: the normal equations solved from the merged co-moments; no further round ==\n";
    Ok(out)
}

/// One row per term: estimate, standard error, t, p-value, 95% interval.
pub(crate) fn coefficients_batch(fit: &OlsFit) -> Result<RecordBatch> {
    inference::coefficients_batch(
        &fit.terms,
        &fit.estimate,
        &fit.std_error,
        Reference::T(fit.df_residual()),
    )
}

/// F and its p-value, when the model has a term and residual degrees of freedom.
fn f_test(ols: &OlsFit) -> Option<(f64, f64)> {
    let (df_model, df_residual) = (ols.df_model(), ols.df_residual());
    (df_model > 0.0 && df_residual > 0.0).then(|| {
        let f = ols.f_statistic();
        let p = f_sf(f, df_model, df_residual);
        (f, p)
    })
}

/// What R's `summary.lm` prints around the coefficients.
pub(crate) fn printed_summary(fit: &LmFit, call: String) -> ModelSummary {
    let ols = &fit.ols;
    let (df_model, df_residual) = (ols.df_model(), ols.df_residual());
    let positive = |v: f64| (df_residual > 0.0).then_some(v);
    ModelSummary {
        call,
        aliased: ols.estimate.iter().filter(|e| e.is_none()).count(),
        rows_dropped: fit.rows_dropped,
        fit: FitLines::Lm {
            sigma: positive(ols.sigma()),
            df_residual,
            r_squared: ols.r_squared(),
            adj_r_squared: positive(ols.adj_r_squared()),
            f_statistic: f_test(ols).map(|(f, p)| (f, df_model, df_residual, p)),
        },
    }
}

/// The one row of `lm_stats`.
pub(crate) fn stats_batch(fit: &LmFit) -> Result<RecordBatch> {
    let ols = &fit.ols;
    let (df_model, df_residual) = (ols.df_model(), ols.df_residual());
    let (f, f_p) = match f_test(ols) {
        Some((f, p)) => (Some(f), Some(p)),
        None => (None, None),
    };
    let positive = |v: f64| (df_residual > 0.0).then_some(v);
    let floats: Vec<Option<f64>> = vec![
        Some(ols.r_squared()),
        positive(ols.adj_r_squared()),
        positive(ols.sigma()),
        f,
        f_p,
        Some(fit.log_likelihood()),
        Some(fit.aic()),
        Some(fit.bic()),
    ];
    let mut arrays: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![ols.nobs as i64])),
        Arc::new(Int64Array::from(vec![df_model as i64])),
        Arc::new(Int64Array::from(vec![df_residual as i64])),
    ];
    arrays.extend(
        floats
            .into_iter()
            .map(|v| Arc::new(Float64Array::from(vec![v])) as ArrayRef),
    );
    arrays.push(Arc::new(Int64Array::from(vec![fit.rows_dropped])));
    Ok(RecordBatch::try_new(stats_schema(), arrays)?)
}
