//! Data as it comes (issue 58, point 6): a federation of CSV files written
//! by R (`NA` for a missing value), by pandas (an empty field) and by a
//! database export (`NULL`, `NaN`) reads its numeric columns as numbers,
//! and its answers equal the centralized ones (NA as NULL) — with an empty
//! site, a one-row site, and a site whose first `NA` comes after the rows
//! that schema inference reads. A text column keeps its text; a site's own
//! token is set with `'format.null_value.<site>'`.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use tempfile::TempDir;

async fn run(ctx: &FedContext, sql: &str) -> fedsql::Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// Row `i` of the study: (site group, bmi, age), `None` where missing.
fn row(i: usize) -> (&'static str, Option<f64>, Option<i64>) {
    let bmi = (i % 7 != 3).then(|| 18.5 + (i * 37 % 130) as f64 / 10.0);
    let age = (i % 11 != 5).then(|| 30 + (i * 13 % 50) as i64);
    (if i.is_multiple_of(2) { "A" } else { "B" }, bmi, age)
}

/// The rows `range` as a CSV file, missing values written as `missing`.
fn csv(range: std::ops::Range<usize>, missing: &str) -> String {
    csv_filled(range, missing, 0)
}

/// The same, but the first `filled` rows have no missing value (so that
/// the first token comes after the rows schema inference reads).
fn csv_filled(range: std::ops::Range<usize>, missing: &str, filled: usize) -> String {
    let mut text = String::from("id,grp,bmi,age\n");
    for (k, i) in range.enumerate() {
        let (grp, mut bmi, mut age) = row(i);
        if k < filled {
            bmi = bmi.or(Some(25.5));
            age = age.or(Some(40));
        }
        let bmi = bmi.map_or(missing.to_string(), |b| format!("{b}"));
        let age = age.map_or(missing.to_string(), |a| a.to_string());
        text.push_str(&format!("{i},{grp},{bmi},{age}\n"));
    }
    text
}

fn sites(files: &[(&str, String)]) -> TempDir {
    let dir = TempDir::new().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(format!("{name}.csv")), text).unwrap();
    }
    dir
}

fn value(batches: &[RecordBatch], column: usize) -> f64 {
    let c =
        datafusion::arrow::compute::cast(batches[0].column(column), &DataType::Float64).unwrap();
    c.as_primitive::<Float64Type>().value(0)
}

/// The centralized answers over the files' rows (every token a missing
/// value): avg(bmi), count(bmi), sum(age), count(age), count(*).
fn centralized(files: &[&str]) -> [f64; 5] {
    let (mut bmi, mut age, mut n) = (Vec::new(), Vec::new(), 0usize);
    for text in files {
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split(',').collect();
            n += 1;
            bmi.extend(fields[2].parse::<f64>().ok().filter(|b| !b.is_nan()));
            age.extend(fields[3].parse::<i64>().ok());
        }
    }
    [
        bmi.iter().sum::<f64>() / bmi.len() as f64,
        bmi.len() as f64,
        age.iter().sum::<i64>() as f64,
        age.len() as f64,
        n as f64,
    ]
}

const QUERY: &str = "SELECT avg(bmi), count(bmi), sum(age), count(age), count(*) FROM study";

async fn assert_centralized(ctx: &FedContext, files: &[&str]) {
    let got = run(ctx, QUERY).await.unwrap();
    for (i, want) in centralized(files).iter().enumerate() {
        let got = value(&got, i);
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "column {i}: {got} != {want}"
        );
    }
}

#[tokio::test]
async fn r_and_pandas_sites_read_numbers_as_numbers() {
    // R's write.csv (NA), pandas' to_csv (empty), a database export
    // (NULL), a site whose first NA is past the rows inference reads, a
    // one-row site and an empty one.
    let files = [
        ("r_site", csv(0..40, "NA")),
        ("pandas_site", csv(40..90, "")),
        ("db_site", csv(90..120, "NULL")),
        ("late_na", csv_filled(120..1620, "NaN", 1100)),
        ("one_row", csv(1620..1621, "NA")),
        ("empty", csv(0..0, "NA")),
    ];
    let dir = sites(&files);
    let texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
    assert!(!texts[3][..texts[3].find("1219,").unwrap()].contains("NaN"));
    assert!(texts[3].contains(",NaN"));
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE study LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let schema = ctx.session().table("study").await.unwrap().schema().clone();
    assert_eq!(
        schema.field_with_name(None, "bmi").unwrap().data_type(),
        &DataType::Float64
    );
    assert_eq!(
        schema.field_with_name(None, "age").unwrap().data_type(),
        &DataType::Int64
    );
    assert_centralized(&ctx, &texts).await;
    // Grouped by the text column: every site's groups, NA nowhere.
    let batches = run(
        &ctx,
        "SELECT grp, count(*) AS n FROM study GROUP BY grp ORDER BY grp",
    )
    .await
    .unwrap();
    let groups: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let grp = b.column(0).as_string_view_opt().map(|a| {
                a.iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect::<Vec<_>>()
            });
            grp.unwrap_or_else(|| {
                b.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect()
            })
        })
        .collect();
    assert_eq!(groups, ["A", "B"]);
}

#[tokio::test]
async fn a_text_column_keeps_na_as_text() {
    // "NA" is Namibia's country code: in a text column it stays text.
    let dir = sites(&[
        ("a", "country,x\nNA,1\nDE,2\n".to_string()),
        ("b", "country,x\nFR,NA\nNA,4\n".to_string()),
    ]);
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let got = run(
        &ctx,
        "SELECT count(*) FILTER (WHERE country = 'NA'), count(x), sum(x) FROM t",
    )
    .await
    .unwrap();
    assert_eq!(
        [value(&got, 0), value(&got, 1), value(&got, 2)],
        [2.0, 3.0, 7.0]
    );
}

#[tokio::test]
async fn a_site_of_its_own_token_is_named_and_set_per_site() {
    // A SAS export writes '.' for a missing value.
    let files = [("r_site", csv(0..40, "NA")), ("sas_site", csv(40..90, "."))];
    let dir = sites(&files);
    let texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
    let ctx = FedContext::new();
    let location = dir.path().display();
    let e = run(
        &ctx,
        &format!("CREATE FEDERATED TABLE study LOCATION '{location}'"),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("column `bmi` reads as text at site 'sas_site' only because of '.' tokens")
            && e.contains("while site 'r_site' reads it as Float64")
            && e.contains("OPTIONS ('format.null_value.sas_site' '.')"),
        "{e}"
    );
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE study LOCATION '{location}' OPTIONS ('format.null_value.sas_site' '.')"
        ),
    )
    .await
    .unwrap();
    assert_centralized(&ctx, &texts).await;
    // A site that is not one of the table's is an unknown option.
    let e = run(
        &ctx,
        &format!(
            "CREATE OR REPLACE FEDERATED TABLE study LOCATION '{location}' OPTIONS ('format.null_value.nowhere' '.')"
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown option 'format.null_value.nowhere'"),
        "{e}"
    );
}
