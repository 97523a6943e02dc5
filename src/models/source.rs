//! What a model is fitted on: a federated table (or any table) by name, or a
//! query string whose filters run at the clients; and the shared facts a fit
//! needs first — the source's schema and the levels of its factors (learned
//! with one federated GROUP BY).

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Int32Type, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Expr;

use crate::coordinator::client_column::CLIENT_COLUMN;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{Formula, Levels, level_label, missing_column, quote_ident};
use crate::table_function::arguments::invalid_argument;

/// The rows a model is fitted on.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSource {
    /// What the user gave: a table name or a query.
    pub given: String,
    /// A FROM-clause item for it.
    pub from: String,
}

impl ModelSource {
    /// A table name (`clinic`, `schema.table`) or a query (`SELECT ...`, `WITH ...`).
    pub fn parse(given: &str) -> Self {
        let trimmed = given.trim().trim_end_matches(';');
        let upper = trimmed.to_ascii_uppercase();
        let from =
            if upper.starts_with("SELECT") || upper.starts_with("WITH") || upper.starts_with('(') {
                format!("({trimmed}) AS __fedsql_source")
            } else {
                trimmed
                    .split('.')
                    .map(quote_ident)
                    .collect::<Vec<_>>()
                    .join(".")
            };
        Self {
            given: trimmed.to_string(),
            from,
        }
    }

    /// The source's columns (planned, not run).
    pub async fn schema(&self, ctx: &FedContext) -> Result<SchemaRef> {
        let df = ctx
            .sql(&format!("SELECT * FROM {}", self.from))
            .await
            .map_err(|e| {
                FedError::InvalidArgument(format!("model source '{}': {e}", self.given))
            })?;
        Ok(Arc::new(Schema::new(df.schema().fields().clone())))
    }
}

/// `CAST(col AS DOUBLE)` for each column, checked numeric in `schema`.
pub(crate) fn numeric_columns(schema: &Schema, columns: &[String]) -> Result<Vec<String>> {
    columns
        .iter()
        .map(|c| numeric_argument(schema, c, "column"))
        .collect()
}

/// `CAST("column" AS DOUBLE)` for a numeric column of the source, which
/// plays `role` in the model (for the error when it is missing or not numeric).
pub(crate) fn numeric_argument(schema: &Schema, column: &str, role: &str) -> Result<String> {
    let t = schema
        .field_with_name(column)
        .map_err(|_| missing_column(column, schema))?
        .data_type();
    if !t.is_numeric() {
        return Err(FedError::InvalidArgument(format!(
            "the {role} `{column}` is {t}; it must be numeric"
        )));
    }
    Ok(format!("CAST({} AS DOUBLE)", quote_ident(column)))
}

/// The SQL of a formula's `offset(...)`: a numeric column, or an
/// expression of numeric columns (`offset(log(followup))`).
pub(crate) fn offset_sql(schema: &Schema, offset: &crate::formula::Variable) -> Result<String> {
    match &offset.transform {
        Some(t) => {
            for column in &t.columns {
                numeric_argument(schema, column, "offset column")?;
            }
            Ok(t.sql.clone())
        }
        None => numeric_argument(schema, &offset.column, "offset"),
    }
}

/// `"a" IS NOT NULL AND "b" IS NOT NULL ...`: the rows a fit uses.
pub(crate) fn complete_cases(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| format!("{} IS NOT NULL", quote_ident(c)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The query of the levels round: each factor's values over the complete
/// cases, in one federated GROUP BY (GROUPING SETS when there are several).
pub(crate) fn levels_sql(source: &ModelSource, formula: &Formula, factors: &[String]) -> String {
    let quoted: Vec<String> = factors.iter().map(|f| quote_ident(f)).collect();
    let sets: Vec<String> = quoted.iter().map(|q| format!("({q})")).collect();
    let flags: Vec<String> = quoted.iter().map(|q| format!("grouping({q})")).collect();
    format!(
        "SELECT {}, {} FROM {} WHERE {} GROUP BY GROUPING SETS ({})",
        quoted.join(", "),
        flags.join(", "),
        source.from,
        complete_cases(&formula.columns()),
        sets.join(", ")
    )
}

/// The sorted levels of each factor over the complete cases, in one
/// federated GROUP BY (GROUPING SETS when there are several factors).
pub(crate) async fn learn_levels(
    ctx: &FedContext,
    source: &ModelSource,
    formula: &Formula,
    factors: &[String],
) -> Result<Levels> {
    if factors.is_empty() {
        return Ok(Vec::new());
    }
    let sql = levels_sql(source, formula, factors);
    let batches = crate::table_function::rounds::query(&ctx.one_off(), &sql).await?;
    let mut levels: Levels = factors.iter().map(|f| (f.clone(), Vec::new())).collect();
    for batch in &batches {
        for (i, (_, values)) in levels.iter_mut().enumerate() {
            let column = batch.column(i);
            let grouped = batch.column(factors.len() + i);
            let grouped = datafusion::arrow::compute::cast(
                grouped,
                &datafusion::arrow::datatypes::DataType::Int32,
            )?;
            let grouped = grouped.as_primitive::<Int32Type>();
            for row in 0..batch.num_rows() {
                if grouped.value(row) == 0 && !column.is_null(row) {
                    values.push(ScalarValue::try_from_array(column, row)?);
                }
            }
        }
    }
    for (factor, values) in levels.iter_mut() {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        values.dedup();
        if values.is_empty() {
            return Err(FedError::InvalidArgument(format!(
                "factor `{factor}` has no values in the rows used (all NULL, or no rows left after the filter)"
            )));
        }
    }
    // Advisory only: a site whose policy refuses the finer groups, or a
    // source without `_client`, simply gets no notice.
    if let Ok(lines) = single_site_levels(ctx, source, formula, factors).await {
        lines.into_iter().for_each(|line| ctx.notice(line));
    }
    Ok(levels)
}

/// The notices for factor levels that occur at one client only, when the
/// source has several (a typo in one site's file would otherwise become a
/// level of its own, or even the reference): one round grouped by factor
/// and `_client`.
async fn single_site_levels(
    ctx: &FedContext,
    source: &ModelSource,
    formula: &Formula,
    factors: &[String],
) -> Result<Vec<String>> {
    if source
        .schema(ctx)
        .await?
        .field_with_name(CLIENT_COLUMN)
        .is_err()
    {
        return Ok(Vec::new());
    }
    let client = quote_ident(CLIENT_COLUMN);
    let quoted: Vec<String> = factors.iter().map(|f| quote_ident(f)).collect();
    let sets: Vec<String> = quoted.iter().map(|q| format!("({q}, {client})")).collect();
    let flags: Vec<String> = quoted.iter().map(|q| format!("grouping({q})")).collect();
    let sql = format!(
        "SELECT {}, {client}, {} FROM {} WHERE {} GROUP BY GROUPING SETS ({})",
        quoted.join(", "),
        flags.join(", "),
        source.from,
        complete_cases(&formula.columns()),
        sets.join(", ")
    );
    let batches = ctx.one_off().sql(&sql).await?.collect().await?;
    let mut clients = std::collections::BTreeSet::new();
    // Per factor: level -> the clients that have it.
    let mut seen: Vec<std::collections::BTreeMap<String, Vec<String>>> =
        vec![Default::default(); factors.len()];
    for batch in &batches {
        let names = batch.column(factors.len());
        for (i, levels) in seen.iter_mut().enumerate() {
            let column = batch.column(i);
            let grouped = datafusion::arrow::compute::cast(
                batch.column(factors.len() + 1 + i),
                &datafusion::arrow::datatypes::DataType::Int32,
            )?;
            let grouped = grouped.as_primitive::<Int32Type>();
            for row in 0..batch.num_rows() {
                if grouped.value(row) != 0 || column.is_null(row) {
                    continue;
                }
                let name = ScalarValue::try_from_array(names, row)?.to_string();
                let level = level_label(&ScalarValue::try_from_array(column, row)?);
                clients.insert(name.clone());
                levels.entry(level).or_default().push(name);
            }
        }
    }
    let mut lines = Vec::new();
    if clients.len() < 2 {
        return Ok(lines);
    }
    for (factor, levels) in factors.iter().zip(&seen) {
        for (level, at) in levels {
            if let [only] = at.as_slice() {
                lines.push(format!(
                    "Note: level '{level}' of factor `{factor}` occurs at one client only ('{only}', of {}): check its spelling there",
                    clients.len()
                ));
            }
        }
    }
    Ok(lines)
}

/// The string arguments of a model table function, e.g. `lm('t', 'y ~ x')`.
pub(crate) fn string_arguments(
    function: &str,
    usage: &str,
    args: &[Expr],
    min: usize,
) -> datafusion::error::Result<Vec<String>> {
    let strings: Vec<String> = args
        .iter()
        .map(|e| match e {
            Expr::Literal(
                ScalarValue::Utf8(Some(s))
                | ScalarValue::Utf8View(Some(s))
                | ScalarValue::LargeUtf8(Some(s)),
                _,
            ) => Ok(s.clone()),
            other => Err(invalid_argument(
                function,
                format!("arguments are string literals, got {other}; usage: {usage}"),
            )),
        })
        .collect::<datafusion::error::Result<_>>()?;
    if strings.len() < min {
        return Err(invalid_argument(
            function,
            format!("{function} takes at least {min} arguments; usage: {usage}"),
        ));
    }
    Ok(strings)
}
