//! The group keys of a grouped DP (or `require_secure`) state: the
//! declared values read through the key column's type, matched to a
//! state's rows by their text, and built as key columns.

use std::collections::BTreeMap;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Expr;

use crate::error::{FedError, Result};

/// A state row's group key as text (how declared values are written);
/// `None` when a key column is NULL.
pub(super) fn row_key(
    batch: &RecordBatch,
    row: usize,
    groups: usize,
) -> Result<Option<Vec<String>>> {
    let mut key = Vec::with_capacity(groups);
    for c in 0..groups {
        let v = ScalarValue::try_from_array(batch.column(c), row)?;
        if v.is_null() {
            return Ok(None);
        }
        key.push(v.to_string());
    }
    Ok(Some(key))
}

/// Every declared key (tuple) of `columns`, in the domains' order, each
/// value spelled as the state's key column of that type shows it (as
/// [`row_key`] reads a row): a declared `01` of an integer column is the
/// group `1` (the fifteenth outside review found such a value kept a
/// noise-only row and dropped the group's data), and values that read
/// alike are one group, kept once (a held row taken twice would count
/// its rows twice). A value the column's type cannot hold is refused.
pub(super) fn declared_keys(
    columns: &[String],
    domains: &BTreeMap<String, Vec<String>>,
    schema: &SchemaRef,
) -> Result<Vec<Vec<String>>> {
    let mut keys: Vec<Vec<String>> = vec![Vec::new()];
    for (c, column) in columns.iter().enumerate() {
        let values = domains.get(column).ok_or_else(|| {
            FedError::Internal(format!("groups by `{column}`, checked to be declared"))
        })?;
        let field = schema.fields().get(c).ok_or_else(|| {
            FedError::Internal(format!("a state without the key column `{column}`"))
        })?;
        let values = canonical_values(column, values, field.data_type())?;
        keys = keys
            .into_iter()
            .flat_map(|k| {
                values.iter().map(move |v| {
                    let mut k = k.clone();
                    k.push(v.clone());
                    k
                })
            })
            .collect();
    }
    Ok(keys)
}

/// The most declared keys (tuples) a grouped DP or `require_secure` state
/// may have.
pub(super) const MAX_DECLARED_KEYS: usize = 100_000;

/// Whether every value of `data_type` prints as text of its own, so that
/// a state row's key and a declared value match by their text: not floats
/// (NaN and −NaN print alike), dates (a date out of chrono's range prints
/// as an empty string: the eighteenth outside attack failed a query with
/// two of them), timestamps, times, intervals or binary (the seventeenth
/// outside attack moved a count by 29 rows with a −NaN and read a rare key
/// through a declared TIMESTAMP).
pub(super) fn text_shows_each_value(data_type: &datafusion::arrow::datatypes::DataType) -> bool {
    use datafusion::arrow::datatypes::DataType as T;
    match data_type {
        T::Dictionary(_, values) => text_shows_each_value(values),
        t => {
            t.is_integer()
                || matches!(
                    t,
                    T::Utf8
                        | T::LargeUtf8
                        | T::Utf8View
                        | T::Boolean
                        | T::Decimal128(..)
                        | T::Decimal256(..)
                )
        }
    }
}

/// `values` (declared text) as a column of `data_type` shows them, the
/// first of values that read alike kept, in the declared order.
pub(super) fn canonical_values(
    column: &str,
    values: &[String],
    data_type: &datafusion::arrow::datatypes::DataType,
) -> Result<Vec<String>> {
    let text = StringArray::from_iter_values(values.iter().map(String::as_str));
    let strict = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let typed = datafusion::arrow::compute::cast_with_options(&text, data_type, &strict)
        .map_err(|e| not_of_type(column, data_type, e))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(values.len());
    for (i, declared) in values.iter().enumerate() {
        let v = ScalarValue::try_from_array(&typed, i)?;
        if v.is_null() {
            return Err(not_of_type(column, data_type, format!("'{declared}'")));
        }
        let shown = v.to_string();
        if seen.insert(shown.clone()) {
            out.push(shown);
        }
    }
    Ok(out)
}

pub(super) fn not_of_type(
    column: &str,
    data_type: &datafusion::arrow::datatypes::DataType,
    e: impl std::fmt::Display,
) -> FedError {
    FedError::InvalidArgument(format!(
        "a declared dp_domain value of `{column}` is not a {data_type}: {e}"
    ))
}

/// The key columns of `keys` (text), cast to the types of the first
/// fields of `schema`.
pub(super) fn key_arrays(
    keys: &[&Vec<String>],
    columns: &[String],
    schema: &SchemaRef,
) -> Result<Vec<ArrayRef>> {
    let mut arrays = Vec::with_capacity(columns.len());
    for (c, field) in schema.fields().iter().enumerate().take(columns.len()) {
        let text = StringArray::from_iter_values(keys.iter().map(|k| k[c].as_str()));
        arrays.push(
            cast(&text, field.data_type())
                .map_err(|e| not_of_type(&columns[c], field.data_type(), e))?,
        );
    }
    Ok(arrays)
}

/// The grouping columns by name; `None` for an expression or grouping sets.
pub(super) fn group_columns(group_expr: &[Expr]) -> Vec<Option<String>> {
    group_expr
        .iter()
        .map(|e| match e {
            Expr::Column(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect()
}
