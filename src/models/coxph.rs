//! `coxph` and `coxph_stats`: Cox proportional hazards models stratified by
//! site, by federated Newton–Raphson.
//!
//! ```sql
//! SELECT * FROM coxph('lung', 'Surv(time, status) ~ age + sex + ph_ecog');
//! SELECT * FROM coxph('veteran', 'Surv(time, status) ~ karno + C(celltype)', 'ties=breslow');
//! SELECT * FROM coxph_stats('lung', 'Surv(time, status) ~ age + ph_ecog + strata(sex)');
//! ```
//!
//! Each site is a stratum: its risk sets hold only its own rows, so no
//! event time leaves it. This is R's `coxph(Surv(time, status) ~ x +
//! strata(site))`; `+ strata(col)` splits each site further. Each round is
//! one `cox_step` aggregate whose only shared input is the coefficient
//! vector: every site returns the gradient and the information matrix of
//! its own partial log-likelihood, and that log-likelihood and counts —
//! 9 + k + k² numbers whatever its rows — and the coordinator adds them and
//! takes a Newton step. The iteration is R's `coxph.fit` (survival 3.x):
//! start at 0, stop when |1 − loglik_old / loglik| ≤ `tolerance` (1e-9),
//! at most `max_iter` (20) rounds, halve a step that lowers the
//! log-likelihood. Ties: Efron (default) or `ties=breslow`; `weights=col`
//! for case weights. One more round at the estimate counts concordant pairs
//! within each site's strata (R's concordance for a stratified model).
//!
//! Formulas: `Surv(time, event) ~ terms`, terms as for `glm` (numeric
//! columns, `C(g)` and text factors, interactions) plus `strata(a, b)`.
//! There is no intercept (the baseline hazard absorbs it).

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::cox_step::{CoxConfig, CoxSums, Ties};
use fedsql_udfs::distribution::chi_squared_sf;
use fedsql_udfs::linalg::{
    ALIAS_TOLERANCE, aliased_columns, inverse_spd, select, select_vector, solve_spd,
};
use futures::FutureExt;
use nalgebra::{DMatrix, DVector};

use super::inference::{Reference, coefficients_batch};
use super::source::{ModelSource, learn_levels, numeric_argument, string_arguments};
use super::step_rounds::StepRounds;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{Formula, design_columns, missing_column, quote_ident};
use crate::notices::printed_summary::{FitLines, ModelSummary, call_text};
use crate::table_function::arguments::argument_error;
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;

/// Why `strata=none` is refused.
const POOLED_REFUSED: &str = "coxph 'strata=none': a pooled (unstratified) Cox fit needs, at every event time, the risk set over the union of the sites, so each event time would have to leave its site; fedsql fits each site as a stratum (R: coxph(Surv(time, event) ~ x + strata(site))), which is exact and releases no event time. For a pooled analysis on a time grid use kaplan_meier / logrank_test with 'breaks=...'";

const USAGE: &str = "coxph('table or SELECT query', 'Surv(time, event) ~ x1 + C(g) [+ strata(s)]' [, 'ties=efron, max_iter=20, tolerance=1e-9, weights=col'])";

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CoxOutput {
    Coefficients,
    Stats,
}

/// The table functions `coxph` and `coxph_stats`.
#[derive(Debug)]
pub(crate) struct CoxFunction {
    pub output: CoxOutput,
}

/// Everything that defines a fit.
#[derive(Debug, Clone)]
pub(crate) struct CoxSpec {
    pub source: ModelSource,
    pub time: String,
    pub event: String,
    /// The covariate terms, as a formula whose response is `time`.
    pub formula: Formula,
    /// Columns given in `strata(...)` terms.
    pub strata: Vec<String>,
    pub ties: Ties,
    pub max_iter: usize,
    pub tolerance: f64,
    pub weights: Option<String>,
}

/// Splits `text` at top-level occurrences of `separator` (not inside parentheses).
fn split_top_level(text: &str, separator: char) -> Vec<String> {
    let (mut depth, mut parts, mut current) = (0i32, Vec::new(), String::new());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if c == separator && depth == 0 {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
}

/// The arguments of `name(a, b)` in `text`, if `text` is such a call.
fn call_arguments(text: &str, name: &str) -> Option<Vec<String>> {
    let text = text.trim();
    let rest = text.strip_prefix(name)?.trim_start();
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|a| a.trim().to_string()).collect())
}

impl CoxSpec {
    /// Parses `coxph(source, formula [, options])`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        if !(2..=3).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "takes 2 or 3 arguments; usage: {USAGE}"
            )));
        }
        let text = &args[1];
        let err = |m: &str| FedError::InvalidArgument(format!("formula '{text}': {m}"));
        let (lhs, rhs) = text
            .split_once('~')
            .ok_or_else(|| err("expected `Surv(time, event) ~ terms`"))?;
        let surv = call_arguments(lhs, "Surv")
            .filter(|a| a.len() == 2 && a.iter().all(|c| !c.is_empty()))
            .ok_or_else(|| err("the response must be Surv(time, event)"))?;
        let (mut strata, mut terms) = (Vec::new(), Vec::new());
        for term in split_top_level(rhs, '+') {
            match call_arguments(&term, "strata") {
                Some(columns) if columns.iter().all(|c| !c.is_empty()) => strata.extend(columns),
                Some(_) => return Err(err("strata() needs column names")),
                None => terms.push(term.trim().to_string()),
            }
        }
        let terms: Vec<String> = terms.into_iter().filter(|t| !t.is_empty()).collect();
        if terms.is_empty() {
            return Err(err("the model needs at least one covariate"));
        }
        let mut formula = Formula::parse(&format!("{} ~ {}", surv[0], terms.join(" + ")))?;
        if formula.offset.is_some() {
            return Err(err("offset() is not supported by coxph"));
        }
        // Factors are coded as with an intercept: the baseline absorbs it.
        formula.intercept = true;
        let mut spec = CoxSpec {
            source: ModelSource::parse(&args[0]),
            time: surv[0].clone(),
            event: surv[1].clone(),
            formula,
            strata,
            ties: Ties::Efron,
            max_iter: 20,
            tolerance: 1e-9,
            weights: None,
        };
        let options = Options::parse(
            "coxph",
            args.get(2).map(String::as_str),
            &["ties", "max_iter", "tolerance", "weights", "strata"],
        )?;
        for option in &options {
            let value = &option.value;
            match option.key.as_str() {
                "ties" => spec.ties = Ties::parse(value).map_err(FedError::InvalidArgument)?,
                "strata" => {
                    if option.choice(&["site", "none"])? == "none" {
                        return Err(FedError::InvalidArgument(POOLED_REFUSED.into()));
                    }
                }
                "max_iter" => spec.max_iter = option.unsigned()? as usize,
                "tolerance" => {
                    spec.tolerance = option.number()?;
                    if spec.tolerance <= 0.0 {
                        return Err(FedError::InvalidArgument(
                            "coxph: tolerance must be positive".into(),
                        ));
                    }
                }
                _ => spec.weights = Some(value.clone()),
            }
        }
        Ok(spec)
    }
}

impl CoxFunction {
    fn name(&self) -> &'static str {
        match self.output {
            CoxOutput::Coefficients => "coxph",
            CoxOutput::Stats => "coxph_stats",
        }
    }
}

impl TableFunctionImpl for CoxFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = self.name();
        let strings = string_arguments(name, USAGE, args.exprs(), 2)?;
        let spec = CoxSpec::parse(&strings).map_err(|e| argument_error(name, e))?;
        let label = format!("{name}('{}', ties {})", spec.source.given, spec.ties.name());
        let output = self.output;
        let call = call_text("coxph", &strings[1], &[], &strings[0]);
        let schema = match output {
            CoxOutput::Coefficients => coefficients_schema(),
            CoxOutput::Stats => stats_schema(),
        };
        Ok(deferred_table(
            label,
            schema,
            Rounds::Iterative,
            None,
            move |ctx, _| {
                let (spec, call) = (spec.clone(), call.clone());
                async move {
                let fit = fit(&ctx, &spec).await?;
                if !fit.converged {
                    ctx.notice(format!(
                            "Warning: coxph: Ran out of iterations and did not converge (max_iter={})",
                            spec.max_iter
                        ),
                    );
                }
                ctx.notice(format!(
                    "coxph: stratified by site: {} strata (R: coxph(... + strata(site)))",
                    fit.strata
                ));
                if output == CoxOutput::Coefficients {
                    ctx.push_summary(fit.printed_summary(call.clone()));
                }
                if fit.rows_dropped > 0 {
                    ctx.notice(format!(
                            "coxph: {} rows dropped (a NULL in a column the model uses)",
                            fit.rows_dropped
                        ),
                    );
                }
                match output {
                    CoxOutput::Coefficients => fit.coefficients(),
                    CoxOutput::Stats => fit.stats(),
                }
            }
            .boxed()
            },
        ))
    }
}

/// The columns of `coxph`: broom's `tidy` columns and `exp_estimate`.
pub(crate) fn coefficients_schema() -> SchemaRef {
    let mut fields: Vec<Field> = super::inference::coefficients_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("exp_estimate", DataType::Float64, true));
    Arc::new(Schema::new(fields))
}

/// The columns of `coxph_stats`.
pub(crate) fn stats_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    let i = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        f("loglik"),
        f("loglik_null"),
        i("n"),
        i("n_event"),
        i("rows_dropped"),
        f("concordance"),
        i("df"),
        f("wald_statistic"),
        f("wald_p_value"),
        f("score_statistic"),
        f("score_p_value"),
        f("lr_statistic"),
        f("lr_p_value"),
        Field::new("ties", DataType::Utf8, false),
        i("iterations"),
        Field::new("converged", DataType::Boolean, false),
    ]))
}

/// A fitted Cox model.
#[derive(Debug, Clone)]
pub(crate) struct CoxFit {
    pub terms: Vec<String>,
    /// NULL for an aliased covariate (R's NA): constant within every
    /// stratum, or collinear with the others there.
    pub beta: Vec<Option<f64>>,
    pub std_error: Vec<Option<f64>>,
    pub loglik: f64,
    pub loglik_null: f64,
    pub n: i64,
    pub n_event: i64,
    pub rows_dropped: i64,
    pub concordance: f64,
    pub wald: f64,
    pub score: f64,
    pub ties: Ties,
    pub iterations: usize,
    pub converged: bool,
    /// Strata with at least one event (sites, times their `strata()` levels).
    pub strata: i64,
}

impl CoxFit {
    /// R's `summary.coxph` lines: n, events, concordance and the three tests.
    fn printed_summary(&self, call: String) -> ModelSummary {
        let df = self.beta.iter().flatten().count();
        let p = |statistic: f64| fedsql_udfs::distribution::chi_squared_sf(statistic, df as f64);
        let lr = 2.0 * (self.loglik - self.loglik_null);
        ModelSummary {
            call,
            aliased: self.beta.iter().filter(|b| b.is_none()).count(),
            rows_dropped: self.rows_dropped,
            fit: FitLines::Cox {
                n: self.n,
                events: self.n_event,
                strata: self.strata,
                concordance: self.concordance,
                df,
                tests: [
                    (lr, p(lr)),
                    (self.wald, p(self.wald)),
                    (self.score, p(self.score)),
                ],
            },
        }
    }

    fn coefficients(&self) -> Result<RecordBatch> {
        let table = coefficients_batch(&self.terms, &self.beta, &self.std_error, Reference::Z)?;
        let mut columns = table.columns().to_vec();
        columns.push(Arc::new(Float64Array::from_iter(
            self.beta.iter().map(|b| b.map(f64::exp)),
        )));
        Ok(RecordBatch::try_new(coefficients_schema(), columns)?)
    }

    fn stats(&self) -> Result<RecordBatch> {
        let df = self.beta.iter().flatten().count();
        let p = |statistic: f64| chi_squared_sf(statistic, df as f64);
        let lr = 2.0 * (self.loglik - self.loglik_null);
        let float = |v: f64| Arc::new(Float64Array::from(vec![v])) as ArrayRef;
        let int = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
        let columns: Vec<ArrayRef> = vec![
            float(self.loglik),
            float(self.loglik_null),
            int(self.n),
            int(self.n_event),
            int(self.rows_dropped),
            float(self.concordance),
            int(df as i64),
            float(self.wald),
            float(p(self.wald)),
            float(self.score),
            float(p(self.score)),
            float(lr),
            float(p(lr)),
            Arc::new(StringArray::from(vec![self.ties.name()])),
            int(self.iterations as i64),
            Arc::new(BooleanArray::from(vec![self.converged])),
        ];
        Ok(RecordBatch::try_new(stats_schema(), columns)?)
    }
}

/// The SQL pieces of a fit: the arguments of `cox_step` after its config,
/// and the covariate names.
struct Design {
    arguments: Vec<String>,
    names: Vec<String>,
}

/// `CAST(col AS DOUBLE)` for a numeric or boolean column.
fn numeric_or_boolean(schema: &Schema, column: &str, role: &str) -> Result<String> {
    let t = schema
        .field_with_name(column)
        .map_err(|_| missing_column(column, schema))?
        .data_type();
    if !(t.is_numeric() || *t == DataType::Boolean) {
        return Err(FedError::InvalidArgument(format!(
            "the {role} `{column}` is {t}; it must be numeric"
        )));
    }
    Ok(format!("CAST({} AS DOUBLE)", quote_ident(column)))
}

async fn design(ctx: &FedContext, spec: &CoxSpec) -> Result<Design> {
    let schema = spec.source.schema(ctx).await?;
    let time = numeric_argument(&schema, &spec.time, "time column")?;
    let event = numeric_or_boolean(&schema, &spec.event, "event column")?;
    let weight = match &spec.weights {
        Some(column) => numeric_argument(&schema, column, "weights column")?,
        None => "1.0".into(),
    };
    let factors = spec.formula.factors(&schema)?;
    let levels = learn_levels(ctx, &spec.source, &spec.formula, &factors).await?;
    let columns = design_columns(&spec.formula, &schema, &levels)?;
    // The stratum within a site: a number coding the strata columns'
    // levels, each column fully dummy-coded (NULL where any is NULL).
    let stratum = if spec.strata.is_empty() {
        "0.0".to_string()
    } else {
        let terms = spec
            .strata
            .iter()
            .map(|s| format!("C({s})"))
            .collect::<Vec<_>>()
            .join(" + ");
        let strata_formula = Formula::parse(&format!("{} ~ {terms} - 1", spec.time))?;
        let strata_levels = learn_levels(ctx, &spec.source, &strata_formula, &spec.strata).await?;
        let mut code = "0.0".to_string();
        for (column, values) in &strata_levels {
            let single = Formula::parse(&format!("{} ~ C({column}) - 1", spec.time))?;
            let dummies = design_columns(&single, &schema, &strata_levels)?;
            let own: Vec<String> = dummies
                .iter()
                .enumerate()
                .map(|(l, d)| format!("{l}.0 * {}", d.sql))
                .collect();
            code = format!("(({code}) * {}.0 + {})", values.len(), own.join(" + "));
        }
        code
    };
    let mut arguments = vec![stratum, time, event, weight];
    let mut names = Vec::new();
    for c in columns {
        names.push(c.name);
        arguments.push(c.sql);
    }
    Ok(Design { arguments, names })
}

/// One round (the first planned from its SQL, the later ones rebinding
/// its coefficients): the merged sums, and the source's total row count.
async fn round(
    rounds: &mut StepRounds<'_>,
    spec: &CoxSpec,
    design: &Design,
    config: &CoxConfig,
) -> Result<(CoxSums, i64)> {
    let text = config.encode();
    let sql = || {
        format!(
            "SELECT count(*) AS total, cox_step('{text}', {}) AS sums FROM {}",
            design.arguments.join(", "),
            spec.source.from
        )
    };
    let batches = rounds.run(&text, sql).await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("a coxph round returned nothing".into()))?;
    let total = batch.column(0).as_primitive::<Int64Type>().value(0);
    let sums = batch.column(1).as_list::<i32>().value(0);
    let sums = sums.as_primitive::<Float64Type>().values();
    Ok((CoxSums::from_slice(sums, design.names.len()), total))
}

fn information(sums: &CoxSums, k: usize) -> DMatrix<f64> {
    DMatrix::from_row_slice(k, k, &sums.information)
}

/// The Newton step I⁻¹u on the kept (non-aliased) covariates; 0 for the others.
fn newton_step(sums: &CoxSums, kept: &[usize], k: usize) -> Option<Vec<f64>> {
    let gram = select(&information(sums, k), kept);
    let u = select_vector(&DVector::from_column_slice(&sums.gradient), kept);
    let solved = solve_spd(&gram, &u)?;
    let mut step = vec![0.0; k];
    for (i, &j) in kept.iter().enumerate() {
        step[j] = solved[i];
    }
    Some(step)
}

/// Fits the model (R's coxph.fit Newton–Raphson).
pub(crate) async fn fit(ctx: &FedContext, spec: &CoxSpec) -> Result<CoxFit> {
    let design = design(ctx, spec).await?;
    let k = design.names.len();
    let config = |beta: &[f64], concordance: bool| CoxConfig {
        ties: spec.ties,
        beta: Some(beta.to_vec()),
        concordance,
    };
    let mut beta = vec![0.0; k];
    let mut rounds = StepRounds::new(ctx);
    let (start, total) = round(&mut rounds, spec, &design, &config(&beta, false)).await?;
    if start.invalid > 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "coxph: {} rows have a negative time in `{}` or an event `{}` other than 0 or 1",
            start.invalid, spec.time, spec.event
        )));
    }
    if start.n == 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "coxph: no rows left in '{}' (of {total}): every row has a NULL in a column the model uses",
            spec.source.given
        )));
    }
    if start.events == 0.0 {
        return Err(FedError::InvalidArgument(format!(
            "coxph: no events at any site ({} rows, all censored): the partial likelihood is flat",
            start.n
        )));
    }
    let singular = || {
        FedError::InvalidArgument(
            "coxph: the information matrix is singular (a covariate is constant within every stratum, or collinear with others)"
                .into(),
        )
    };
    // A covariate with no variation left within the strata (e.g. constant
    // at every site) is aliased, as R reports it (NA), and stays at 0.
    let aliased = aliased_columns(&information(&start, k), ALIAS_TOLERANCE);
    let kept: Vec<usize> = (0..k).filter(|&j| !aliased[j]).collect();
    if kept.is_empty() {
        return Err(singular());
    }
    let step = newton_step(&start, &kept, k).ok_or_else(singular)?;
    let score: f64 = start.gradient.iter().zip(&step).map(|(u, s)| u * s).sum();
    let loglik_null = start.loglik;

    let mut best_loglik: f64 = start.loglik;
    let mut newbeta: Vec<f64> = beta.iter().zip(step.iter()).map(|(b, s)| b + s).collect();
    let mut halving = false;
    let mut converged = false;
    let mut iterations = 0;
    let mut last;
    loop {
        iterations += 1;
        let (sums, _) = round(&mut rounds, spec, &design, &config(&newbeta, false)).await?;
        last = sums;
        if !halving && (1.0 - best_loglik / last.loglik).abs() <= spec.tolerance {
            converged = true;
            break;
        }
        if iterations >= spec.max_iter {
            break;
        }
        if last.loglik < best_loglik || !last.loglik.is_finite() {
            // Not improving: halve the step back towards the last good beta.
            halving = true;
            newbeta = newbeta
                .iter()
                .zip(&beta)
                .map(|(n, b)| (n + b) / 2.0)
                .collect();
        } else {
            halving = false;
            best_loglik = last.loglik;
            let step = newton_step(&last, &kept, k).ok_or_else(singular)?;
            beta = newbeta.clone();
            newbeta = newbeta
                .iter()
                .zip(step.iter())
                .map(|(b, s)| b + s)
                .collect();
        }
    }
    let beta = newbeta;
    let imat = select(&information(&last, k), &kept);
    let variance = inverse_spd(&imat).ok_or_else(singular)?;
    let b = select_vector(&DVector::from_column_slice(&beta), &kept);
    let wald = b.dot(&(&imat * &b));
    let mut estimate = vec![None; k];
    let mut std_error = vec![None; k];
    for (i, &j) in kept.iter().enumerate() {
        estimate[j] = Some(beta[j]);
        std_error[j] = Some(variance[(i, i)].sqrt());
    }
    // The concordance of the final linear predictor, within strata.
    let (pairs, _) = round(&mut rounds, spec, &design, &config(&beta, true)).await?;
    let comparable = pairs.concordant + pairs.discordant + pairs.tied_x;
    let concordance = (pairs.concordant + pairs.tied_x / 2.0) / comparable;
    Ok(CoxFit {
        terms: design.names,
        beta: estimate,
        std_error,
        loglik: last.loglik,
        loglik_null,
        n: last.n as i64,
        n_event: last.events as i64,
        rows_dropped: total - last.n as i64,
        concordance,
        wald,
        score,
        ties: spec.ties,
        iterations,
        converged,
        strata: last.strata_with_events as i64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_take_surv_and_strata() {
        let spec = CoxSpec::parse(&[
            "t".into(),
            "Surv(time, status) ~ age + C(g) + strata(sex, inst)".into(),
            "ties=breslow".into(),
        ])
        .unwrap();
        assert_eq!(
            (spec.time.as_str(), spec.event.as_str()),
            ("time", "status")
        );
        assert_eq!(spec.strata, ["sex", "inst"]);
        assert_eq!(spec.formula.terms.len(), 2);
        assert_eq!(spec.ties, Ties::Breslow);
        assert!(CoxSpec::parse(&["t".into(), "time ~ age".into()]).is_err());
        assert!(CoxSpec::parse(&["t".into(), "Surv(time, status) ~ strata(sex)".into()]).is_err());
        assert!(
            CoxSpec::parse(&["t".into(), "Surv(time, s) ~ a".into(), "ties=exact".into()]).is_err()
        );
    }
}
