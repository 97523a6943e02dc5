//! Tests of schema unification across a site's files: widening, empty files
//! as no evidence, and errors that name client, file and column.

use super::*;

fn observed(client: &str, fields: &[(&str, DataType)], has_rows: bool) -> ObservedSchema {
    ObservedSchema {
        client: client.into(),
        file: format!("{client}.csv"),
        schema: Schema::new(
            fields
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        ),
        has_rows,
        positional: true,
        na_text: Vec::new(),
    }
}

#[test]
fn integer_and_float_widen_to_float() {
    let a = observed("a", &[("x", DataType::Int64), ("s", DataType::Utf8)], true);
    let b = observed(
        "b",
        &[("x", DataType::Float64), ("s", DataType::Utf8)],
        true,
    );
    let schema = unify_schemas("t", &[a, b]).unwrap();
    assert_eq!(schema.field(0).data_type(), &DataType::Float64);
    assert_eq!(schema.field(1).data_type(), &DataType::Utf8);
}

#[test]
fn empty_client_types_are_no_evidence() {
    let a = observed("a", &[("x", DataType::Utf8)], false);
    let b = observed("b", &[("x", DataType::Int64)], true);
    let schema = unify_schemas("t", &[a, b]).unwrap();
    assert_eq!(schema.field(0).data_type(), &DataType::Int64);
}

#[test]
fn conflicting_types_name_client_file_and_column() {
    let a = observed("a", &[("x", DataType::Int64)], true);
    let b = observed("b", &[("x", DataType::Utf8)], true);
    let err = unify_schemas("t", &[a, b]).unwrap_err().to_string();
    assert!(err.contains("client 'b' (b.csv)"), "{err}");
    assert!(err.contains("column `x`"), "{err}");
}

#[test]
fn missing_and_extra_columns_are_errors() {
    let a = observed("a", &[("x", DataType::Int64), ("y", DataType::Int64)], true);
    let b = observed("b", &[("x", DataType::Int64)], true);
    let err = unify_schemas("t", &[a.clone(), b.clone()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing column `y`"), "{err}");
    let err = unify_schemas("t", &[b, a]).unwrap_err().to_string();
    assert!(err.contains("has column `y`"), "{err}");
}
