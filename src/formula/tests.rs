use super::*;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;

fn v(c: &str) -> Variable {
    Variable::column(c.into(), false)
}

#[test]
fn parses_terms_interactions_and_intercept() {
    let f = Formula::parse("y ~ a + C(g) + a:C(g) - 1").unwrap();
    assert_eq!(f.response, Response::Column("y".into()));
    assert!(!f.intercept);
    let terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
    assert_eq!(terms, ["a", "C(g)", "a:C(g)"]);
    assert!(!Formula::parse("y ~ a + -1").unwrap().intercept);
    let f = Formula::parse("y ~ a*b + 0").unwrap();
    let terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
    assert_eq!(terms, ["a", "b", "a:b"]);
    assert!(!f.intercept);
    let f = Formula::parse("y ~ a*b - b:a").unwrap();
    assert_eq!(
        f.terms,
        vec![
            Term {
                variables: vec![v("a")]
            },
            Term {
                variables: vec![v("b")]
            }
        ]
    );
}

#[test]
fn parses_counts_and_offset() {
    let f = Formula::parse("cbind(s, f) ~ x + offset(log_n)").unwrap();
    assert_eq!(
        f.response,
        Response::Counts {
            successes: "s".into(),
            failures: "f".into()
        }
    );
    assert_eq!(f.offset.as_ref().map(|v| v.column.as_str()), Some("log_n"));
    assert_eq!(f.columns(), ["s", "f", "x", "log_n"]);
}

#[test]
fn bad_formulas_say_what_is_wrong() {
    for (text, words) in [
        ("y x", "expected `response ~ terms`"),
        ("y ~ ", "no terms"),
        ("y ~ x^2", "I(x^2)"),
        ("y ~ x +", "ends with `+`"),
        ("y ~ x + + z", "a term is missing"),
        ("y ~ x - - z", "a term is missing"),
        ("y ~ x -", "ends with `-`"),
        ("y ~ I(x +)", "cannot read `I(x +)` at `)`"),
        ("y ~ foo(x)", "not a column name"),
        ("y ~ I(sin(x))", "not a known function"),
        ("y ~ C(g, Sum)", "Treatment('level')"),
        ("y ~ .:x", "stands alone"),
        ("y ~ (a + b", "unbalanced"),
        ("y ~ 0", "no terms and no intercept"),
    ] {
        let e = Formula::parse(text).unwrap_err().to_string();
        assert!(e.contains(words), "{text}: {e}");
    }
}

#[test]
fn design_columns_are_named_as_patsy_names_them() {
    let schema = Schema::new(vec![
        Field::new("y", DataType::Float64, true),
        Field::new("x", DataType::Int64, true),
        Field::new("g", DataType::Utf8, true),
    ]);
    let levels: Levels = vec![(
        "g".into(),
        vec![
            ScalarValue::Utf8(Some("a".into())),
            ScalarValue::Utf8(Some("b'c".into())),
        ],
    )];
    let f = Formula::parse("y ~ x + C(g) + x:g").unwrap();
    let cols = design_columns(&f, &schema, &levels).unwrap();
    let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["x", "C(g)[T.b'c]", "x:g[T.b'c]"]);
    assert_eq!(cols[1].sql, "CAST((\"g\" = 'b''c') AS DOUBLE)");
    let f = Formula::parse("y ~ C(g) - 1").unwrap();
    let names: Vec<String> = design_columns(&f, &schema, &levels)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["C(g)[a]", "C(g)[b'c]"]);
    let err = design_columns(&Formula::parse("y ~ nope").unwrap(), &schema, &levels)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`nope`") && err.contains("y, x, g"), "{err}");
}
#[test]
fn reference_levels_transforms_and_dot() {
    let schema = Schema::new(vec![
        Field::new("y", DataType::Float64, true),
        Field::new("age", DataType::Int64, true),
        Field::new("ward", DataType::Utf8, true),
        Field::new("_client", DataType::Utf8, false),
    ]);
    let levels: Levels = vec![(
        "ward".into(),
        ["general", "icu", "surgery"]
            .iter()
            .map(|l| ScalarValue::Utf8(Some(l.to_string())))
            .collect(),
    )];
    for text in [
        "y ~ C(ward, Treatment('icu'))",
        "y ~ C(ward, Treatment(\"icu\"))",
        "y ~ C(ward, Treatment(reference='icu'))",
    ] {
        let f = Formula::parse(text).unwrap();
        let names: Vec<String> = design_columns(&f, &schema, &levels)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "C(ward, Treatment('icu'))[T.general]",
                "C(ward, Treatment('icu'))[T.surgery]"
            ],
            "{text}"
        );
    }
    let err = design_columns(
        &Formula::parse("y ~ C(ward, Treatment('icx'))").unwrap(),
        &schema,
        &levels,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("'icx'") && err.contains("general, icu, surgery"),
        "{err}"
    );

    let f = Formula::parse("y ~ I(age^2) + log(age + 1) + sqrt(age) + exp(-age / 10)").unwrap();
    assert_eq!(f.columns(), ["y", "age"]);
    let cols = design_columns(&f, &schema, &levels).unwrap();
    let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["I(age^2)", "log(age + 1)", "sqrt(age)", "exp(-age / 10)"]
    );
    assert_eq!(
        cols[0].sql,
        "power(CAST(\"age\" AS DOUBLE), CAST(2 AS DOUBLE))"
    );
    assert_eq!(
        cols[1].sql,
        "ln((CAST(\"age\" AS DOUBLE) + CAST(1 AS DOUBLE)))"
    );

    let f = Formula::parse("y ~ . - age").unwrap().expand_dot(&schema);
    let terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
    assert_eq!(terms, ["ward"]);
    let f = Formula::parse("y ~ I(age^2) + .")
        .unwrap()
        .expand_dot(&schema);
    let terms: Vec<String> = f.terms.iter().map(|t| t.to_string()).collect();
    assert_eq!(terms, ["I(age^2)", "age", "ward"]);
}
