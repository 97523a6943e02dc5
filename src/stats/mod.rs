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

pub mod anova;
pub mod bar_chart;
pub mod chisq_test;
pub mod cor_test;
pub mod hist;
pub mod summary;
pub mod t_test;

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::prelude::SessionContext;
use futures::future::BoxFuture;

use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::models::fit_table::{Fit, FitTable, Program, explain_step};
use crate::models::options::ModelOption;
use crate::notices::Notices;

/// Registers the statistics table functions (`t_test`, `anova`,
/// `chisq_test`, `crosstab`, `cor_test`, `hist`, `summary`).
pub fn register_all(ctx: &SessionContext) {
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

/// A table of `schema` whose one batch `compute` makes when the plan runs
/// (not when it is planned), with the session's notices at hand.
///
/// `EXPLAIN FEDERATED` of it runs `compute` once with a recorder in the
/// session (a later round's query depends on what the earlier ones
/// returned, e.g. `hist`'s range or `anova`'s factor levels), and shows the
/// federated plan of every round it ran: what each client computes and the
/// state that leaves it, with its size.
pub(crate) fn deferred_table<F>(
    label: String,
    schema: SchemaRef,
    compute: F,
) -> Arc<dyn TableProvider>
where
    F: Fn(FedContext, Option<Arc<Notices>>) -> BoxFuture<'static, Result<RecordBatch>>
        + Send
        + Sync
        + 'static,
{
    let compute = Arc::new(compute);
    let run = Arc::clone(&compute);
    let fit: Fit = Arc::new(move |state| {
        let notices = state.config().get_extension::<Notices>();
        run(FedContext::from_state(state), notices)
    });
    let program = recording_program(label.clone(), move |ctx| compute(ctx, None));
    FitTable::explained(Arc::new(FitTable::new(label, schema, fit)), program)
}

/// The `EXPLAIN FEDERATED` program of a function that `run` computes: it
/// runs it once with a recorder in the session and shows the federated
/// plan of each round it ran. Rounds that repeat one aggregate with new
/// constants (the iterations of k-means or of a Newton fit) are shown once.
pub fn recording_program<R>(heading: String, run: R) -> Program
where
    R: Fn(FedContext) -> BoxFuture<'static, Result<RecordBatch>> + Send + Sync + 'static,
{
    let run = Arc::new(run);
    Arc::new(move |ctx: FedContext| {
        let (run, heading) = (Arc::clone(&run), heading.clone());
        Box::pin(async move {
            let recorder = Arc::new(RecordedRounds::default());
            let mut state = ctx.session().state();
            state.config_mut().set_extension(Arc::clone(&recorder));
            run(FedContext::from_state(state)).await?;
            let rounds = recorder.0.lock().expect("not poisoned").clone();
            let mut out = format!(
                "== Program of {heading}: {} federated round(s) (EXPLAIN runs them: a round may depend on what the earlier ones returned) ==\n",
                rounds.len()
            );
            let mut shown: Vec<(String, usize)> = Vec::new();
            for (i, sql) in rounds.iter().enumerate() {
                let shape = shape_of(sql);
                if let Some((_, first)) = shown.iter().find(|(s, _)| *s == shape) {
                    out += &format!(
                        "#### Step {}: the aggregate of step {first} again, with the coordinator's new constants\n",
                        i + 1
                    );
                    continue;
                }
                shown.push((shape, i + 1));
                out += &explain_step(&ctx, &format!("Step {}: one round", i + 1), sql).await?;
            }
            Ok(out)
        })
    })
}

/// A query with its string and number literals blanked: two rounds of the
/// same shape differ only in the constants the coordinator sent.
fn shape_of(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            out.push_str("'?'");
            while let Some(d) = chars.next() {
                if d == '\'' {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        break;
                    }
                }
            }
        } else if c.is_ascii_digit() || (c == '-' && chars.peek().is_some_and(char::is_ascii_digit))
        {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.' || *d == 'e')
            {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

/// The queries of the rounds a statistics function ran, when `EXPLAIN
/// FEDERATED` asks (a session extension).
#[derive(Debug, Default)]
pub(crate) struct RecordedRounds(std::sync::Mutex<Vec<String>>);

/// Whether this context records its rounds' SQL (an EXPLAIN of a program).
pub(crate) fn records_rounds(ctx: &FedContext) -> bool {
    // Read in place: a copy of the session state per round costs more
    // than a rebound round.
    ctx.session()
        .state_ref()
        .read()
        .config()
        .get_extension::<RecordedRounds>()
        .is_some()
}

/// Runs the aggregate query of one round, recording it for `EXPLAIN`
/// FEDERATED of a statistics function.
pub async fn run_round(ctx: &FedContext, sql: &str) -> Result<Vec<RecordBatch>> {
    if let Some(recorder) = ctx
        .session()
        .state()
        .config()
        .get_extension::<RecordedRounds>()
    {
        recorder
            .0
            .lock()
            .expect("not poisoned")
            .push(sql.to_string());
    }
    ctx.sql(sql).await?.collect().await
}

/// The alternative hypothesis, as R names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Alternative {
    TwoSided,
    Less,
    Greater,
}

impl Alternative {
    /// `two.sided` (or `two_sided`), `less` or `greater`.
    pub fn parse(value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "two.sided" | "two_sided" | "two-sided" => Ok(Self::TwoSided),
            "less" => Ok(Self::Less),
            "greater" => Ok(Self::Greater),
            other => Err(FedError::InvalidArgument(format!(
                "option alternative={other}: expected two.sided, less or greater"
            ))),
        }
    }

    /// R's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::TwoSided => "two.sided",
            Self::Less => "less",
            Self::Greater => "greater",
        }
    }
}

/// `key=value` options separated by commas (the models' parser), each key
/// one of `allowed`, as (key, value) pairs.
pub fn parse_options(
    function: &str,
    text: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<(String, String)>> {
    let mut options = Vec::new();
    for option in crate::models::options::parse_options(text)? {
        if !allowed.contains(&option.key.as_str()) {
            return Err(crate::models::options::unknown_option(
                function,
                &option.key,
                allowed,
            ));
        }
        options.push((option.key, option.value));
    }
    Ok(options)
}

fn option(key: &str, value: &str) -> ModelOption {
    ModelOption {
        key: key.to_string(),
        value: value.to_string(),
    }
}

/// A number option.
pub fn number_option(key: &str, value: &str) -> Result<f64> {
    option(key, value).number()
}

/// A confidence level option: a number strictly between 0 and 1.
pub fn conf_level_option(value: &str) -> Result<f64> {
    let o = option("conf_level", value);
    let level = o.number()?;
    if !(level > 0.0 && level < 1.0) {
        return Err(o.bad("the confidence level must be between 0 and 1"));
    }
    Ok(level)
}

/// A true/false option.
pub fn bool_option(key: &str, value: &str) -> Result<bool> {
    option(key, value).boolean()
}

/// The one batch a one-row aggregate query returns.
pub(crate) async fn one_row(ctx: &FedContext, sql: &str) -> Result<RecordBatch> {
    let batches = run_round(ctx, sql).await?;
    let schema = batches
        .first()
        .map(|b| b.schema())
        .ok_or_else(|| FedError::Internal("an aggregate query returned nothing".into()))?;
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// Column `column`, row `row`, as a float (NULL as `None`).
pub(crate) fn float_at(batch: &RecordBatch, column: &str, row: usize) -> Result<Option<f64>> {
    let array = batch
        .column_by_name(column)
        .ok_or_else(|| FedError::Internal(format!("no column `{column}`")))?;
    if array.is_null(row) {
        return Ok(None);
    }
    let array = datafusion::arrow::compute::cast(array, &DataType::Float64)?;
    Ok(Some(array.as_primitive::<Float64Type>().value(row)))
}

/// Column `column`, row `row`, as a count (NULL as 0).
pub(crate) fn count_at(batch: &RecordBatch, column: &str, row: usize) -> Result<i64> {
    let array = batch
        .column_by_name(column)
        .ok_or_else(|| FedError::Internal(format!("no column `{column}`")))?;
    if array.is_null(row) {
        return Ok(0);
    }
    let array = datafusion::arrow::compute::cast(array, &DataType::Int64)?;
    Ok(array.as_primitive::<Int64Type>().value(row))
}

/// The error for a source with no rows.
pub(crate) fn empty_source(function: &str, source: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "{function}: the source '{source}' has no rows (after its filter)"
    ))
}

/// `CAST((expression) AS DOUBLE)`: an expression of the source's columns,
/// evaluated at the clients.
pub(crate) fn as_double(expression: &str) -> String {
    format!("CAST(({expression}) AS DOUBLE)")
}

/// A float as an SQL literal that parses back to the same double.
pub(crate) fn float_literal(v: f64) -> String {
    format!("CAST('{v:?}' AS DOUBLE)")
}
