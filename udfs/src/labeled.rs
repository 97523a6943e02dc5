//! Labeled matrices as Arrow values: `struct<names: list<utf8>, matrix:
//! list<list<float64>>>`, an ordinary value in SQL (`m['matrix'][1][2]`) that
//! the REPL prints as a matrix with row and column labels.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Builder, ListBuilder, StringBuilder, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, ScalarValue};
use ndarray::{Array1, Array2};

/// `list<float64>`.
pub fn vector_type() -> DataType {
    DataType::new_list(DataType::Float64, true)
}

/// `list<list<float64>>`, a matrix as a list of rows.
pub fn matrix_type() -> DataType {
    DataType::new_list(vector_type(), true)
}

/// `list<utf8>`.
pub fn names_type() -> DataType {
    DataType::new_list(DataType::Utf8, true)
}

/// The fields of a labeled matrix.
pub fn labeled_matrix_fields() -> Fields {
    Fields::from(vec![
        Field::new("names", names_type(), true),
        Field::new("matrix", matrix_type(), true),
    ])
}

/// The Arrow type of a labeled matrix.
pub fn labeled_matrix_type() -> DataType {
    DataType::Struct(labeled_matrix_fields())
}

/// A one-row `list<utf8>` array.
pub fn names_array(names: &[String]) -> ArrayRef {
    let mut builder = ListBuilder::new(StringBuilder::new());
    for name in names {
        builder.values().append_value(name);
    }
    builder.append(true);
    Arc::new(builder.finish())
}

/// A one-row `list<float64>` array (a NULL list for `None`).
pub fn vector_array(values: Option<&Array1<f64>>) -> ArrayRef {
    let mut builder = ListBuilder::new(Float64Builder::new());
    match values {
        Some(values) => {
            builder
                .values()
                .append_slice(values.as_slice().expect("contiguous"));
            builder.append(true);
        }
        None => builder.append(false),
    }
    Arc::new(builder.finish())
}

/// A one-row `list<list<float64>>` array (a NULL matrix for `None`).
pub fn matrix_array(matrix: Option<&Array2<f64>>) -> ArrayRef {
    let mut builder = ListBuilder::new(ListBuilder::new(Float64Builder::new()));
    match matrix {
        Some(matrix) => {
            for row in matrix.rows() {
                row.iter()
                    .for_each(|v| builder.values().values().append_value(*v));
                builder.values().append(true);
            }
            builder.append(true);
        }
        None => builder.append(false),
    }
    Arc::new(builder.finish())
}

/// A labeled matrix value (NULL matrix for `None`).
pub fn labeled_matrix(names: &[String], matrix: Option<&Array2<f64>>) -> Result<ScalarValue> {
    let array = StructArray::try_new(
        labeled_matrix_fields(),
        vec![names_array(names), matrix_array(matrix)],
        None,
    )?;
    Ok(ScalarValue::Struct(Arc::new(array)))
}
