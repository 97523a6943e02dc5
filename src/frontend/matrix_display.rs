//! Readable matrices in table output. A struct with a `names` field (a
//! labeled matrix from `covariance_matrix`, the blocks of
//! `normal_equations`, ...) prints as aligned matrices with row and column
//! labels, numbers to 7 significant digits as R prints them, instead of one
//! long line of nested lists. Machine formats (csv, json) are unchanged.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};

/// The matrix text of row `row` of a struct column with a `names` field.
pub(crate) fn labeled(column: &dyn Array, row: usize) -> Option<String> {
    let DataType::Struct(fields) = column.data_type() else {
        return None;
    };
    let names_at = fields.iter().position(|f| f.name() == "names")?;
    if column.is_null(row) {
        return None;
    }
    let s = column.as_struct();
    let names = s.column(names_at).as_list_opt::<i32>()?.value(row);
    let names: Vec<String> = names
        .as_string_opt::<i32>()?
        .iter()
        .map(|n| n.unwrap_or("").to_string())
        .collect();
    let mut parts = Vec::new();
    let only_matrix = fields.len() == 2;
    for (i, field) in fields.iter().enumerate() {
        if i == names_at {
            continue;
        }
        let values = s.column(i);
        let title = if only_matrix {
            None
        } else {
            Some(field.name().as_str())
        };
        let text = match field.data_type() {
            _ if values.is_null(row) => format!("{}: NULL", field.name()),
            DataType::List(item) if matches!(item.data_type(), DataType::List(_)) => {
                let rows = values.as_list::<i32>().value(row);
                let rows = rows.as_list::<i32>();
                let matrix: Vec<Vec<f64>> = (0..rows.len())
                    .map(|r| {
                        rows.value(r)
                            .as_primitive::<Float64Type>()
                            .values()
                            .to_vec()
                    })
                    .collect();
                matrix_text(title, &names, &matrix)
            }
            DataType::List(_) => {
                let v = values.as_list::<i32>().value(row);
                let v = v.as_primitive::<Float64Type>().values().to_vec();
                matrix_text(title, &names, &[v])
            }
            DataType::Float64 => format!(
                "{}: {}",
                field.name(),
                number(values.as_primitive::<Float64Type>().value(row))
            ),
            DataType::Int64 => format!(
                "{}: {}",
                field.name(),
                values.as_primitive::<Int64Type>().value(row)
            ),
            _ => return None,
        };
        parts.push(text);
    }
    Some(parts.join("\n"))
}

/// A matrix with column labels on top and, for square matrices, row labels.
fn matrix_text(title: Option<&str>, names: &[String], rows: &[Vec<f64>]) -> String {
    let square = rows.len() == names.len() && rows.len() > 1;
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|v| number(*v)).collect())
        .collect();
    let label_width = if square {
        names.iter().map(|n| n.len()).max().unwrap_or(0)
    } else {
        0
    };
    let width = |j: usize| {
        cells
            .iter()
            .map(|r| r.get(j).map_or(0, |c| c.len()))
            .max()
            .unwrap_or(0)
            .max(names.get(j).map_or(0, |n| n.len()))
    };
    let widths: Vec<usize> = (0..names.len()).map(width).collect();
    let mut out = String::new();
    if let Some(title) = title {
        out.push_str(title);
        out.push_str(":\n");
    }
    out.push_str(&" ".repeat(label_width));
    for (name, w) in names.iter().zip(&widths) {
        out.push_str(&format!("  {name:>w$}"));
    }
    for (i, row) in cells.iter().enumerate() {
        out.push('\n');
        let label = if square { names[i].as_str() } else { "" };
        out.push_str(&format!("{label:<label_width$}"));
        for (cell, w) in row.iter().zip(&widths) {
            out.push_str(&format!("  {cell:>w$}"));
        }
    }
    out
}

/// A number to 7 significant digits (scientific notation when very large or small).
fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v == 0.0 {
        return "0".into();
    }
    let magnitude = v.abs().log10().floor() as i32;
    if !(-4..9).contains(&magnitude) {
        return format!("{v:.6e}");
    }
    let decimals = (6 - magnitude).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A covariance matrix in long form (`term1, term2, covariance`, as
/// `lm_vcov` and `glm_vcov` return it) pivoted into the matrix it is:
/// one row and one column per term, in the order the terms first appear.
/// `None` for any other result.
pub(crate) fn vcov_matrix(
    batches: &[datafusion::arrow::record_batch::RecordBatch],
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> Option<datafusion::arrow::record_batch::RecordBatch> {
    use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Schema};
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if names != ["term1", "term2", "covariance"]
        || schema.field(2).data_type() != &DataType::Float64
    {
        return None;
    }
    let mut cells = Vec::new();
    let mut terms: Vec<String> = Vec::new();
    for batch in batches {
        let (a, b) = (
            batch.column(0).as_string_opt::<i32>()?,
            batch.column(1).as_string_opt::<i32>()?,
        );
        let c = batch.column(2).as_primitive::<Float64Type>();
        for row in 0..batch.num_rows() {
            let (a, b) = (a.value(row).to_string(), b.value(row).to_string());
            for t in [&a, &b] {
                if !terms.contains(t) {
                    terms.push(t.clone());
                }
            }
            cells.push((a, b, (!c.is_null(row)).then(|| c.value(row))));
        }
    }
    let at = |t: &str| terms.iter().position(|x| x == t);
    let n = terms.len();
    let mut matrix = vec![vec![None; n]; n];
    for (a, b, v) in cells {
        matrix[at(&a)?][at(&b)?] = v;
    }
    let mut fields = vec![Field::new("", DataType::Utf8, false)];
    fields.extend(terms.iter().map(|t| Field::new(t, DataType::Float64, true)));
    let mut columns: Vec<ArrayRef> = vec![std::sync::Arc::new(StringArray::from(terms.clone()))];
    columns.extend((0..n).map(|j| {
        let column: Vec<Option<f64>> = matrix.iter().map(|row| row[j]).collect();
        std::sync::Arc::new(Float64Array::from(column)) as ArrayRef
    }));
    datafusion::arrow::record_batch::RecordBatch::try_new(
        std::sync::Arc::new(Schema::new(fields)),
        columns,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_seven_significant_digits() {
        assert_eq!(number(201.5028480291638), "201.5028");
        assert_eq!(number(0.000123456789), "0.0001234568");
        assert_eq!(number(3482258.63459582), "3482259");
        assert_eq!(number(-2.5e-9), "-2.500000e-9");
        assert_eq!(number(2.0), "2");
    }

    #[test]
    fn square_matrices_get_row_and_column_labels() {
        let names = vec!["age".to_string(), "bmi".to_string()];
        let text = matrix_text(None, &names, &[vec![201.5, 7.65], vec![7.65, 20.1]]);
        assert_eq!(text, "       age   bmi\nage  201.5  7.65\nbmi   7.65  20.1");
    }
}
