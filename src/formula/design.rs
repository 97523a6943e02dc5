//! The design matrix a parsed formula describes over a source's schema:
//! one SQL expression per design column, named as patsy names them, with
//! factors treatment-coded against their reference level.

use datafusion::arrow::datatypes::Schema;
use datafusion::common::ScalarValue;

use crate::error::{FedError, Result};

use super::arithmetic::quote_ident;
use super::parse::{Formula, Variable, is_factor, missing_column};

/// One column of the design matrix: its name and the SQL computing it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DesignColumn {
    pub name: String,
    pub sql: String,
    /// The name R gives the column (`treatmentdrugB`, `age:sexM`), for `names=r`.
    pub r_name: String,
}

/// The levels of each factor, sorted, NULL excluded.
pub(crate) type Levels = Vec<(String, Vec<ScalarValue>)>;

/// The design columns of the formula's terms (without the intercept).
pub(crate) fn design_columns(
    formula: &Formula,
    schema: &Schema,
    levels: &Levels,
) -> Result<Vec<DesignColumn>> {
    let mut columns = Vec::new();
    let mut full_coding_used = false;
    for term in &formula.terms {
        // Each variable's coding: (name part, R's name part, sql) alternatives.
        let mut codings: Vec<Vec<(String, String, String)>> = Vec::new();
        for v in &term.variables {
            if let Some(transform) = &v.transform {
                for column in &transform.columns {
                    let field = schema
                        .field_with_name(column)
                        .map_err(|_| missing_column(column, schema))?;
                    if !field.data_type().is_numeric() {
                        return Err(FedError::InvalidArgument(format!(
                            "`{}` reads column `{column}`, which is {}: a transform needs numeric columns",
                            v.column,
                            field.data_type()
                        )));
                    }
                }
                codings.push(vec![(
                    v.column.clone(),
                    v.column.clone(),
                    transform.sql.clone(),
                )]);
                continue;
            }
            let is_factor = is_factor(v, schema)?;
            let field = schema
                .field_with_name(&v.column)
                .map_err(|_| missing_column(&v.column, schema))?;
            if is_factor {
                let values = &levels
                    .iter()
                    .find(|(c, _)| c == &v.column)
                    .ok_or_else(|| FedError::Internal(format!("no levels for `{}`", v.column)))?
                    .1;
                let values = &with_reference_first(v, values)?;
                // Without an intercept the first factor main effect gets every
                // level (R's and patsy's full-rank coding); else drop the reference.
                let full = !formula.intercept && term.variables.len() == 1 && !full_coding_used;
                full_coding_used |= full;
                let coded: Vec<(String, String, String)> = values
                    .iter()
                    .skip(usize::from(!full))
                    .map(|level| {
                        let label = level_label(level);
                        let name = if full {
                            format!("{v}[{label}]")
                        } else {
                            format!("{v}[T.{label}]")
                        };
                        (
                            name,
                            format!("{}{}", v.r_name(), r_level_label(level)),
                            format!(
                                "CAST(({} = {}) AS DOUBLE)",
                                quote_ident(&v.column),
                                sql_literal(level)
                            ),
                        )
                    })
                    .collect();
                codings.push(coded);
            } else if field.data_type().is_numeric() {
                codings.push(vec![(
                    v.column.clone(),
                    v.column.clone(),
                    format!("CAST({} AS DOUBLE)", quote_ident(&v.column)),
                )]);
            } else {
                return Err(FedError::InvalidArgument(format!(
                    "column `{}` is {}: a model term must be numeric, or a factor written C({})",
                    v.column,
                    field.data_type(),
                    v.column
                )));
            }
        }
        // The product of the codings of the term's variables.
        let mut product: Vec<DesignColumn> = vec![DesignColumn {
            name: String::new(),
            sql: String::new(),
            r_name: String::new(),
        }];
        for coding in &codings {
            let mut next = Vec::new();
            for column in &product {
                for (part_name, part_r_name, part_sql) in coding {
                    let join = |a: &String, b: &String, by: &str| {
                        if a.is_empty() {
                            b.clone()
                        } else {
                            format!("{a}{by}{b}")
                        }
                    };
                    next.push(DesignColumn {
                        name: join(&column.name, part_name, ":"),
                        sql: join(&column.sql, part_sql, " * "),
                        r_name: join(&column.r_name, part_r_name, ":"),
                    });
                }
            }
            product = next;
        }
        columns.extend(product);
    }
    Ok(columns)
}

/// The levels with the one `C(x, Treatment('level'))` chose first.
fn with_reference_first(v: &Variable, values: &[ScalarValue]) -> Result<Vec<ScalarValue>> {
    let mut values = values.to_vec();
    if let Some(reference) = &v.reference {
        let at = values
            .iter()
            .position(|l| &level_label(l) == reference)
            .ok_or_else(|| {
                let labels: Vec<String> = values.iter().map(level_label).collect();
                FedError::InvalidArgument(format!(
                    "the reference level '{reference}' of `{}` is not among its levels in the rows used: {}",
                    v.column,
                    labels.join(", ")
                ))
            })?;
        let level = values.remove(at);
        values.insert(0, level);
    }
    Ok(values)
}

/// How a level shows in a column name, as patsy shows it.
pub(crate) fn level_label(level: &ScalarValue) -> String {
    match level {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.clone(),
        ScalarValue::Boolean(Some(b)) => if *b { "True" } else { "False" }.to_string(),
        ScalarValue::Float64(Some(f)) => format!("{f:?}"),
        ScalarValue::Float32(Some(f)) => format!("{f:?}"),
        other => other.to_string(),
    }
}

/// How a level shows in R's name of a column: `TRUE`, `2`, `drugB`.
fn r_level_label(level: &ScalarValue) -> String {
    match level {
        ScalarValue::Boolean(Some(b)) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        ScalarValue::Float64(Some(f)) => f.to_string(),
        ScalarValue::Float32(Some(f)) => f.to_string(),
        other => level_label(other),
    }
}

/// A level as an SQL literal.
fn sql_literal(level: &ScalarValue) -> String {
    match level {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => {
            format!("'{}'", s.replace('\'', "''"))
        }
        ScalarValue::Boolean(Some(b)) => b.to_string(),
        ScalarValue::Float64(Some(f)) => format!("CAST('{f:?}' AS DOUBLE)"),
        ScalarValue::Float32(Some(f)) => format!("CAST('{f:?}' AS REAL)"),
        other => other.to_string(),
    }
}
