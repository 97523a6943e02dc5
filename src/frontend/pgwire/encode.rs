//! Arrow results as PostgreSQL rows: the type OID of each column and the
//! encoding of each value (text or binary, as the client asked).
//!
//! Scalars and flat lists go through `arrow-pg`: integers, floats,
//! decimals, text, booleans, dates and timestamps as their PostgreSQL types,
//! and a list of scalars as a PostgreSQL array (`float8[]`, `text[]`, ...).
//! Nested values — structs (a labeled matrix from `covariance_matrix`, a
//! model's blocks) and lists of lists (the matrix aggregates'
//! `List<List<f64>>`) — are sent as JSON text, type `json` (OID 114),
//! written by arrow's JSON encoder, the one the REPL's json output format
//! uses; every driver can read them (R: `jsonlite::fromJSON`, Python:
//! `json.loads`, psycopg decodes `json` by itself).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::json::writer::{EncoderOptions, make_encoder};
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::FieldInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;

use super::sqlstate;

/// How a column travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// As its own PostgreSQL type, encoded by arrow-pg.
    Native,
    /// As JSON text (OID 114).
    Json,
    /// A column of nulls without a type: as text.
    NullText,
}

fn wire_of(data_type: &DataType) -> Wire {
    match data_type {
        DataType::Null => Wire::NullText,
        DataType::Struct(_)
        | DataType::Map(..)
        | DataType::Union(..)
        | DataType::RunEndEncoded(..) => Wire::Json,
        DataType::List(item)
        | DataType::LargeList(item)
        | DataType::FixedSizeList(item, _)
        | DataType::ListView(item)
        | DataType::LargeListView(item) => {
            if is_flat(item.data_type()) {
                Wire::Native
            } else {
                Wire::Json
            }
        }
        DataType::Dictionary(_, value) => wire_of(value),
        _ => Wire::Native,
    }
}

/// Whether a list of this element type is a PostgreSQL array of scalars.
fn is_flat(item: &DataType) -> bool {
    !matches!(
        item,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::Struct(_)
            | DataType::Map(..)
            | DataType::Union(..)
            | DataType::Dictionary(..)
            | DataType::RunEndEncoded(..)
    )
}

/// The PostgreSQL type of a column.
pub(crate) fn pg_type(field: &FieldRef) -> PgWireResult<Type> {
    match wire_of(field.data_type()) {
        Wire::Native => arrow_pg::datatypes::field_into_pg_type(field),
        Wire::Json => Ok(Type::JSON),
        Wire::NullText => Ok(Type::TEXT),
    }
}

/// The row description of a result schema, each column in the format the
/// client asked for.
pub(crate) fn row_description(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            Ok(FieldInfo::new(
                field.name().clone(),
                None,
                None,
                pg_type(field)?,
                format.format_for(i),
            ))
        })
        .collect()
}

/// Encodes result batches as data rows of `fields` (from [`row_description`]).
pub(crate) fn encode_batches(
    fields: &Arc<Vec<FieldInfo>>,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> PgWireResult<Vec<DataRow>> {
    let wire_schema = wire_schema(schema);
    let mut rows = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        if batch.num_rows() == 0 {
            continue;
        }
        let batch = to_wire(batch, &wire_schema)?;
        for row in arrow_pg::encode_recordbatch(fields.clone(), batch) {
            rows.push(row?);
        }
    }
    Ok(rows)
}

/// The schema after nested columns became JSON text.
fn wire_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match wire_of(f.data_type()) {
            Wire::Native => f.as_ref().clone(),
            Wire::Json | Wire::NullText => {
                Field::new(f.name(), DataType::Utf8, true).with_metadata(f.metadata().clone())
            }
        })
        .collect();
    Arc::new(Schema::new(fields))
}

fn to_wire(batch: &RecordBatch, wire_schema: &SchemaRef) -> PgWireResult<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(batch.schema().fields())
        .map(|(column, field)| match wire_of(field.data_type()) {
            Wire::Native => Ok(column.clone()),
            Wire::Json => json_column(field, column.as_ref()),
            Wire::NullText => cast(column, &DataType::Utf8).map_err(encoding_error),
        })
        .collect::<PgWireResult<Vec<ArrayRef>>>()?;
    RecordBatch::try_new(wire_schema.clone(), columns).map_err(encoding_error)
}

/// Each value of a nested column as one JSON text (null stays null).
fn json_column(field: &FieldRef, column: &dyn Array) -> PgWireResult<ArrayRef> {
    let options = EncoderOptions::default().with_explicit_nulls(true);
    let mut encoder = make_encoder(field, column, &options).map_err(encoding_error)?;
    let mut out = StringBuilder::with_capacity(column.len(), column.len() * 32);
    let mut buffer = Vec::new();
    for row in 0..column.len() {
        if column.is_null(row) {
            out.append_null();
            continue;
        }
        buffer.clear();
        encoder.encode(row, &mut buffer);
        out.append_value(String::from_utf8_lossy(&buffer));
    }
    Ok(Arc::new(out.finish()))
}

fn encoding_error(e: impl std::fmt::Display) -> PgWireError {
    PgWireError::UserError(Box::new(sqlstate::info(
        sqlstate::code::INTERNAL_ERROR,
        format!("cannot encode a result column: {e}"),
    )))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Float64Builder, ListBuilder, StringArray};

    use super::*;

    #[test]
    fn nested_lists_are_json_flat_lists_are_arrays() {
        let matrix = DataType::List(Arc::new(Field::new_list_field(
            DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true))),
            true,
        )));
        let vector = DataType::List(Arc::new(Field::new_list_field(DataType::Float64, true)));
        assert_eq!(
            pg_type(&Arc::new(Field::new("m", matrix, true))).unwrap(),
            Type::JSON
        );
        assert_eq!(
            pg_type(&Arc::new(Field::new("v", vector, true))).unwrap(),
            Type::FLOAT8_ARRAY
        );
        assert_eq!(
            pg_type(&Arc::new(Field::new("x", DataType::Int64, true))).unwrap(),
            Type::INT8
        );
    }

    #[test]
    fn a_matrix_becomes_json_text() {
        let mut builder = ListBuilder::new(ListBuilder::new(Float64Builder::new()));
        builder.values().values().append_value(1.0);
        builder.values().values().append_value(2.0);
        builder.values().append(true);
        builder.values().values().append_value(3.0);
        builder.values().values().append_value(4.0);
        builder.values().append(true);
        builder.append(true);
        let array: ArrayRef = Arc::new(builder.finish());
        let field = Arc::new(Field::new("m", array.data_type().clone(), true));
        let json = json_column(&field, array.as_ref()).unwrap();
        let json = json.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(json.value(0), "[[1.0,2.0],[3.0,4.0]]");
    }
}
