//! Formulas as R users write them (issue 19, point 3): `C(x,
//! Treatment('level'))`, `I(...)`, `log()`, `exp()`, `sqrt()` and `.` give
//! the same fit as the plain formula over a query that computes the same
//! columns; malformed formulas are errors; a factor level seen at one
//! client only is noticed.

use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use tempfile::TempDir;

use crate::lm::{terms, value};
use crate::support::{Format, close, federation};

async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The two fits have the same estimates and standard errors, term by term
/// in order; `names` are the terms the first must have.
fn assert_same_fit(what: &str, a: &[RecordBatch], b: &[RecordBatch], names: &[&str]) {
    assert_eq!(terms(a), names, "{what}");
    assert_eq!(terms(a).len(), terms(b).len(), "{what}");
    for (row, name) in names.iter().enumerate() {
        for column in ["estimate", "std_error"] {
            let (x, y) = (
                value(a, row, column).unwrap(),
                value(b, row, column).unwrap(),
            );
            assert!(close(x, y, 1e-9), "{what}: {name} {column}: {x} vs {y}");
        }
    }
}

const COMPUTED: &str = "SELECT systolic, event, \
    CAST(region = ''east'' AS DOUBLE) AS r_east, CAST(region = ''north'' AS DOUBLE) AS r_north, \
    CAST(region = ''south'' AS DOUBLE) AS r_south, \
    power(CAST(age AS DOUBLE), 2.0) AS age2, ln(bmi) AS log_bmi, sqrt(CAST(visits AS DOUBLE)) AS sqrt_visits, \
    exp(-CAST(age AS DOUBLE) / 50.0) AS exp_age \
    FROM clinic";

#[tokio::test]
async fn reference_levels_and_transforms_equal_computed_columns() {
    let f = federation(&[1, 400, 659], Format::Csv).await;
    let names = [
        "(Intercept)",
        "C(region, Treatment('west'))[T.east]",
        "C(region, Treatment('west'))[T.north]",
        "C(region, Treatment('west'))[T.south]",
        "I(age^2)",
        "log(bmi)",
        "sqrt(visits)",
        "exp(-age / 50)",
    ];
    let rhs =
        "C(region, Treatment(''west'')) + I(age^2) + log(bmi) + sqrt(visits) + exp(-age / 50)";
    let plain = "r_east + r_north + r_south + age2 + log_bmi + sqrt_visits + exp_age";
    let a = run(
        &f.fed,
        &format!("SELECT * FROM lm('clinic', 'systolic ~ {rhs}')"),
    )
    .await;
    let b = run(
        &f.fed,
        &format!("SELECT * FROM lm('{COMPUTED}', 'systolic ~ {plain}')"),
    )
    .await;
    assert_same_fit("lm", &a, &b, &names);
    // The double-quoted form is the same reference.
    let c = run(
        &f.fed,
        &format!(
            "SELECT * FROM lm('clinic', 'systolic ~ {}')",
            rhs.replace("''west''", "\"west\"")
        ),
    )
    .await;
    assert_same_fit("lm, Treatment(\"west\")", &c, &b, &names);
    let a = run(
        &f.fed,
        &format!("SELECT * FROM glm('clinic', 'event ~ {rhs}', 'binomial')"),
    )
    .await;
    let b = run(
        &f.fed,
        &format!("SELECT * FROM glm('{COMPUTED}', 'event ~ {plain}', 'binomial')"),
    )
    .await;
    assert_same_fit("glm", &a, &b, &names);
}

#[tokio::test]
async fn dot_is_every_other_column_but_client() {
    let f = federation(&[300, 760], Format::Csv).await;
    let a = run(
        &f.fed,
        "SELECT * FROM lm('SELECT systolic, age, bmi, sex, _client FROM clinic', 'systolic ~ .')",
    )
    .await;
    let b = run(
        &f.fed,
        "SELECT * FROM lm('clinic', 'systolic ~ age + bmi + sex')",
    )
    .await;
    assert_same_fit("lm .", &a, &b, &["(Intercept)", "age", "bmi", "sex[T.M]"]);
    let a = run(
        &f.fed,
        "SELECT * FROM glm('SELECT event, age, bmi, smoker FROM clinic', 'event ~ . - bmi + I(age^2)', 'binomial')",
    )
    .await;
    let b = run(
        &f.fed,
        "SELECT * FROM glm('clinic', 'event ~ age + smoker + I(age^2)', 'binomial')",
    )
    .await;
    assert_same_fit(
        "glm .",
        &a,
        &b,
        &["(Intercept)", "age", "smoker", "I(age^2)"],
    );
}

#[tokio::test]
async fn malformed_formulas_are_errors() {
    let f = federation(&[1060], Format::Csv).await;
    for (formula, words) in [
        ("systolic ~ age +", "ends with `+`"),
        ("systolic ~ age + + bmi", "a term is missing"),
        ("systolic ~ age^2", "I(x^2)"),
        ("systolic ~ C(region, Treatment(''nowhere''))", "'nowhere'"),
        ("systolic ~ log(region)", "numeric"),
    ] {
        let sql = format!("SELECT * FROM lm('clinic', '{formula}')");
        let err = match f.fed.sql(&sql).await {
            Ok(df) => df.collect().await.map(|_| ()).unwrap_err(),
            Err(e) => e,
        }
        .to_string();
        assert!(err.contains(words), "{formula}: {err}");
    }
}

#[tokio::test]
async fn a_level_at_one_client_only_is_noticed() {
    let dir = TempDir::new().unwrap();
    let a: String = (0..30)
        .map(|i| format!("{},{}\n", ["general", "icu"][i % 2], i % 7))
        .collect();
    let b: String = (0..30)
        .map(|i| format!("{},{}\n", ["general", "icu", "Generl"][i % 3], i % 5))
        .collect();
    std::fs::write(dir.path().join("a.csv"), format!("ward,y\n{a}")).unwrap();
    std::fs::write(dir.path().join("b.csv"), format!("ward,y\n{b}")).unwrap();
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t LOCATION '{}'",
        dir.path().display()
    ))
    .await
    .unwrap();
    ctx.take_notices();
    run(&ctx, "SELECT * FROM lm('t', 'y ~ ward')").await;
    let notices = ctx.take_notices().join("\n");
    assert!(
        notices.contains("level 'Generl' of factor `ward` occurs at one client only ('b', of 2)"),
        "{notices}"
    );
    assert!(!notices.contains("'icu'"), "{notices}");
}
