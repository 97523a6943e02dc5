//! SQL type names for `\d`: a column's Arrow type as psql's `\d` names
//! the PostgreSQL type it is served as (`bigint`, `double precision`,
//! `text`), so that the REPL and psql describe a table alike.

use datafusion::arrow::datatypes::DataType;

/// A column's type as psql's `\d` names it (`bigint`, `double precision`,
/// `text`); an Arrow type with no SQL name keeps Arrow's.
pub(crate) fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric(20,0)".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".into(),
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::Dictionary(_, value) => sql_type_name(value),
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            format!("{}[]", sql_type_name(item.data_type()))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_named_as_psql_names_them() {
        assert_eq!(sql_type_name(&DataType::Int64), "bigint");
        assert_eq!(sql_type_name(&DataType::Float64), "double precision");
        assert_eq!(sql_type_name(&DataType::Utf8View), "text");
        let list = DataType::List(std::sync::Arc::new(
            datafusion::arrow::datatypes::Field::new_list_field(DataType::Float64, true),
        ));
        assert_eq!(sql_type_name(&list), "double precision[]");
    }
}
