//! What the multivariate and survival analyses (`pca`, `kmeans`,
//! `kaplan_meier`, `logrank_test`, `coxph`) share: their option strings
//! (`'key=value, key=value'`), column lists (`'x1, x2, x3'`), the notices
//! they leave, and a table function over a fit.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::execution::SessionState;
use futures::FutureExt;
use futures::future::BoxFuture;

use super::fit_table::{Fit, FitTable, in_fit_scope};
use super::source::numeric_argument;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::notices::Notices;

/// `key=value` options separated by commas, in order; `allowed` names the
/// keys a function takes (for the error on any other).
pub fn parse_options(
    function: &str,
    text: Option<&str>,
    allowed: &[&str],
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for option in text
        .map(|o| o.split(','))
        .into_iter()
        .flatten()
        .filter(|o| !o.trim().is_empty())
    {
        let (key, value) = option
            .split_once('=')
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .ok_or_else(|| {
                FedError::InvalidArgument(format!(
                    "{function}: option `{}`: expected key=value",
                    option.trim()
                ))
            })?;
        if !allowed.contains(&key.as_str()) {
            return Err(FedError::UnknownObject(format!(
                "{function}: unknown option `{key}`; it takes {}",
                allowed.join(", ")
            )));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// An option's value as `T`, with an error naming the option.
pub fn option_value<T: std::str::FromStr>(
    function: &str,
    key: &str,
    value: &str,
    what: &str,
) -> Result<T> {
    value.parse().map_err(|_| {
        FedError::InvalidArgument(format!("{function}: option {key}={value}: expected {what}"))
    })
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`).
pub fn option_bool(function: &str, key: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(FedError::InvalidArgument(format!(
            "{function}: option {key}={value}: expected true or false"
        ))),
    }
}

/// The columns of a list `'x1, x2, x3'` (at least one, no repeats).
pub fn column_list(function: &str, text: &str) -> Result<Vec<String>> {
    let columns: Vec<String> = text
        .split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    if columns.is_empty() {
        return Err(FedError::InvalidArgument(format!(
            "{function}: name at least one column, e.g. 'x1, x2'"
        )));
    }
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].contains(c) {
            return Err(FedError::InvalidArgument(format!(
                "{function}: column `{c}` is listed twice"
            )));
        }
    }
    Ok(columns)
}

/// `CAST(col AS DOUBLE)` for each column, checked numeric in `schema`.
pub fn numeric_columns(schema: &Schema, columns: &[String]) -> Result<Vec<String>> {
    columns
        .iter()
        .map(|c| numeric_argument(schema, c, "column"))
        .collect()
}

/// Leaves a message for whoever runs the statement (shown by the REPL).
pub fn notify(ctx: &FedContext, message: impl Into<String>) {
    if let Some(notices) = ctx.session().state().config().get_extension::<Notices>() {
        notices.push(message);
    }
}

/// A table whose one batch `analysis` computes when executed, inside a fit
/// scope (sites may keep their decoded rows for the analysis' rounds).
pub fn analysis_table<F>(label: String, schema: SchemaRef, analysis: F) -> Arc<dyn TableProvider>
where
    F: Fn(FedContext) -> BoxFuture<'static, Result<RecordBatch>> + Send + Sync + 'static,
{
    let analysis = Arc::new(analysis);
    let run = Arc::clone(&analysis);
    let fit: Fit = Arc::new(move |state: SessionState| {
        let analysis = Arc::clone(&run);
        async move {
            let (result, _) = in_fit_scope(state, |ctx, _| analysis(ctx)).await;
            result
        }
        .boxed()
    });
    let program = crate::stats::recording_program(label.clone(), move |ctx: FedContext| {
        let analysis = Arc::clone(&analysis);
        async move {
            let state = ctx.session().state();
            let (result, _) = in_fit_scope(state, |ctx, _| analysis(ctx)).await;
            result
        }
        .boxed()
    });
    FitTable::explained(Arc::new(FitTable::new(label, schema, fit)), program)
}

/// Runs one federated query and returns its batches (empty batches dropped).
pub async fn query(ctx: &FedContext, sql: &str) -> Result<Vec<RecordBatch>> {
    let batches = crate::stats::run_round(ctx, sql).await?;
    Ok(batches.into_iter().filter(|b| b.num_rows() > 0).collect())
}

/// The error for a function's call when its arguments are wrong.
pub fn plan_error(function: &str, e: FedError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Plan(format!("{function}: {e}"))
}
