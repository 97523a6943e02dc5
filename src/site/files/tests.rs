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

#[test]
fn missing_tokens_are_found_as_whole_fields_anywhere() {
    let tokens = ["NA", "NaN", "NULL"];
    let holds = |text: &str| holds_tokens(text.as_bytes(), &tokens, b',').unwrap();
    assert!(holds("x,y\n1,NA\n"));
    assert!(holds("x,y\nNA,1\n"));
    assert!(holds("x,y\r\n1,\"NaN\"\r\n"));
    assert!(!holds("x,y\n1,NAB\nANA,2\n"));
    assert!(!holds("x,y\n1,2\n"));
    // Past the first block of 4 MiB, and across its edge.
    let mut long = "x,y\n".to_string();
    while long.len() < (1 << 22) - 3 {
        long.push_str("1,2\n");
    }
    long.push_str("1,NULL\n");
    assert!(holds(&long));
    assert!(!holds(&long.replace("NULL", "3")));
}

#[test]
fn csv_options_of_a_site_override_the_tables() {
    let options: Vec<(String, String)> = [
        ("format.null_value", "."),
        ("format.null_value.R_Site", "NA"),
        ("format.delimiter.other", ";"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let r = csv_options_for(&options, Some("r_site")).unwrap();
    assert_eq!(r.null_value.as_deref(), Some("NA"));
    assert_eq!(r.delimiter, b',');
    let other = csv_options_for(&options, Some("other")).unwrap();
    assert_eq!(other.null_value.as_deref(), Some("."));
    assert_eq!(other.delimiter, b';');
    assert_eq!(
        site_csv_key("format.null_value.R_Site"),
        Some(("format.null_value", "R_Site"))
    );
    assert_eq!(site_csv_key("format.null_value"), None);
    assert_eq!(
        missing_tokens(&CsvOptions::default()),
        (vec!["NA", "NaN", "NULL"], false)
    );
}
