//! `lm` and `lm_stats` against reference values computed once by
//! statsmodels (testdata/reference/generate.py) and NIST's certified values
//! for the Longley data, with each dataset split unevenly over clients
//! (one of them holding a single row).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use fedsql::FedContext;
use tempfile::TempDir;

use crate::support::close;

pub(crate) fn reference(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/reference")
        .join(name)
}

/// Splits a dataset's rows into CSV clients of the given sizes (-1: the rest).
pub(crate) fn split_dataset(dataset: &str, sizes: &[i64]) -> TempDir {
    let text = std::fs::read_to_string(reference(&format!("{dataset}.csv"))).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let dir = TempDir::new().unwrap();
    let mut start = 0usize;
    for (i, size) in sizes.iter().enumerate() {
        let n = if *size < 0 {
            rows.len() - start
        } else {
            *size as usize
        };
        let chunk = &rows[start..start + n];
        start += n;
        let body: String = chunk.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(
            dir.path().join(format!("site{i}.csv")),
            format!("{header}\n{body}"),
        )
        .unwrap();
    }
    assert_eq!(start, rows.len(), "sizes must cover every row");
    dir
}

pub(crate) async fn federated(dataset: &str, sizes: &[i64]) -> (FedContext, TempDir) {
    let dir = split_dataset(dataset, sizes);
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE {dataset} LOCATION '{}'",
        dir.path().display()
    ))
    .await
    .unwrap();
    (ctx, dir)
}

async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Rows of a reference CSV as maps from column to text.
pub(crate) fn read_csv(name: &str) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(reference(name)).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            // Term names may hold commas only inside brackets, which these files do not have.
            header
                .iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

pub(crate) fn value(batches: &[RecordBatch], row: usize, column: &str) -> Option<f64> {
    let col = batches[0].column_by_name(column).unwrap();
    if col.is_null(row) {
        return None;
    }
    let col = datafusion::arrow::compute::cast(col, &DataType::Float64).unwrap();
    Some(col.as_primitive::<Float64Type>().value(row))
}

pub(crate) fn terms(batches: &[RecordBatch]) -> Vec<String> {
    let t = batches[0].column_by_name("term").unwrap();
    let t = datafusion::arrow::compute::cast(t, &DataType::Utf8).unwrap();
    t.as_string::<i32>()
        .iter()
        .map(|s| s.unwrap().to_string())
        .collect()
}

/// Compares `lm` output with a reference `.coef.csv`, by term name.
fn assert_coefficients(what: &str, got: &[RecordBatch], reference_file: &str, rel: f64) {
    let want = read_csv(reference_file);
    let names = terms(got);
    assert_eq!(names.len(), want.len(), "{what}: terms {names:?}");
    for row in &want {
        let term = &row["term"];
        let i = names
            .iter()
            .position(|n| n == term)
            .unwrap_or_else(|| panic!("{what}: no term {term} in {names:?}"));
        for column in [
            "estimate",
            "std_error",
            "statistic",
            "p_value",
            "conf_low",
            "conf_high",
        ] {
            let expected = row[column].parse::<f64>().ok();
            let actual = value(got, i, column);
            match (expected, actual) {
                (None, None) => {}
                (Some(e), Some(a)) => {
                    // p-values far out in the tail are compared relatively but
                    // more loosely: they come from different t implementations.
                    let tol = if column == "p_value" {
                        rel.max(1e-6)
                    } else {
                        rel
                    };
                    assert!(
                        close(a, e, tol),
                        "{what}: {term} {column}: got {a}, reference {e}"
                    );
                }
                (e, a) => panic!("{what}: {term} {column}: got {a:?}, reference {e:?}"),
            }
        }
    }
}

fn assert_stats(what: &str, got: &[RecordBatch], reference_file: &str, rel: f64) {
    let want = &read_csv(reference_file)[0];
    for (column, expected) in want {
        let expected: f64 = expected.parse().unwrap();
        let actual = value(got, 0, column).unwrap_or_else(|| panic!("{what}: {column} is NULL"));
        let tol = if column == "f_p_value" {
            rel.max(1e-6)
        } else {
            rel
        };
        assert!(
            close(actual, expected, tol),
            "{what}: {column}: got {actual}, reference {expected}"
        );
    }
}

/// (dataset, formula, reference model, client sizes)
const MODELS: &[(&str, &str, &str, &[i64])] = &[
    (
        "longley",
        "totemp ~ gnpdefl + gnp + unemp + armed + pop + year",
        "longley_lm",
        &[1, 6, 2, -1],
    ),
    (
        "stackloss",
        "stackloss ~ airflow + watertemp + acidconc",
        "stackloss_lm",
        &[2, 10, 1, -1],
    ),
    (
        "grunfeld",
        "invest ~ value + capital + C(firm)",
        "grunfeld_lm",
        &[1, 80, 0, 60, -1],
    ),
    (
        "synthetic_lm",
        "y ~ x1 + x2 + C(grp) + x1:C(grp)",
        "synthetic_lm",
        &[1, 200, 120, -1],
    ),
    (
        "synthetic_lm",
        "y ~ x1 + x2 - 1",
        "synthetic_lm_noint",
        &[2, 300, -1],
    ),
    (
        "synthetic_lm",
        "y ~ x1 + x2 + x3",
        "synthetic_lm_aliased",
        &[1, 250, -1],
    ),
];

#[tokio::test]
async fn coefficients_and_statistics_match_statsmodels() {
    for (dataset, formula, model, sizes) in MODELS {
        let (ctx, _dir) = federated(dataset, sizes).await;
        let what = format!("{model} ({formula}) over clients {sizes:?}");
        let coef = run(&ctx, &format!("SELECT * FROM lm('{dataset}', '{formula}')")).await;
        assert_coefficients(&what, &coef, &format!("{model}.coef.csv"), 1e-8);
        let stats = run(
            &ctx,
            &format!("SELECT * FROM lm_stats('{dataset}', '{formula}')"),
        )
        .await;
        assert_stats(&what, &stats, &format!("{model}.stats.csv"), 1e-8);
    }
}

#[tokio::test]
async fn longley_gives_nist_certified_values() {
    let (ctx, _dir) = federated("longley", &[1, 2, 5, -1]).await;
    let formula = "totemp ~ gnpdefl + gnp + unemp + armed + pop + year";
    let coef = run(&ctx, &format!("SELECT * FROM lm('longley', '{formula}')")).await;
    let stats = run(
        &ctx,
        &format!("SELECT * FROM lm_stats('longley', '{formula}')"),
    )
    .await;
    let names = terms(&coef);
    let mut checked = 0;
    for row in read_csv("longley_nist.csv") {
        let certified: f64 = row["value"].parse().unwrap();
        let got = match row["quantity"].as_str() {
            "estimate" | "std_error" => {
                let i = names.iter().position(|n| *n == row["term"]).unwrap();
                value(&coef, i, &row["quantity"]).unwrap()
            }
            "residual_sd" => value(&stats, 0, "sigma").unwrap(),
            "r_squared" => value(&stats, 0, "r_squared").unwrap(),
            "f_statistic" => value(&stats, 0, "f_statistic").unwrap(),
            _ => continue,
        };
        // NIST asks for agreement in at least 7 significant digits; the
        // centered co-moments give about 11 on this data.
        assert!(
            close(got, certified, 1e-9),
            "{} {}: {got} vs certified {certified}",
            row["quantity"],
            row["term"]
        );
        checked += 1;
    }
    assert_eq!(checked, 17, "7 estimates, 7 standard errors, sigma, R², F");
}

#[tokio::test]
async fn the_fit_is_the_same_however_the_rows_are_split() {
    let formula = "y ~ x1 + x2 + C(grp) + x1:C(grp)";
    let mut results = Vec::new();
    for sizes in [&[-1][..], &[1, -1][..], &[0, 3, 100, 1, 50, -1][..]] {
        let (ctx, _dir) = federated("synthetic_lm", sizes).await;
        results.push(
            run(
                &ctx,
                &format!("SELECT * FROM lm('synthetic_lm', '{formula}')"),
            )
            .await,
        );
    }
    for other in &results[1..] {
        crate::support::assert_same_result("lm over splits", other, &results[0], true, 1e-9);
    }
}

#[tokio::test]
async fn query_sources_filter_at_the_clients() {
    let (ctx, _dir) = federated("grunfeld", &[1, 100, -1]).await;
    // The same fit on a filtered source, and on a shared copy of the filtered rows.
    let query = "SELECT * FROM grunfeld WHERE year >= 1945";
    let got = run(
        &ctx,
        &format!("SELECT * FROM lm('{query}', 'invest ~ value + capital')"),
    )
    .await;
    let rows = std::fs::read_to_string(reference("grunfeld.csv")).unwrap();
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("all.csv"), rows).unwrap();
    let shared = FedContext::new();
    shared
        .sql(&format!(
            "CREATE FEDERATED TABLE g CLIENTS ('all' = '{}')",
            dir.path().join("all.csv").display()
        ))
        .await
        .unwrap();
    let want = run(
        &shared,
        "SELECT * FROM lm('SELECT * FROM g WHERE year >= 1945', 'invest ~ value + capital')",
    )
    .await;
    crate::support::assert_same_result("filtered source", &got, &want, true, 1e-9);
    let stats = run(
        &ctx,
        &format!("SELECT nobs FROM lm_stats('{query}', 'invest ~ value + capital')"),
    )
    .await;
    let year_at = read_csv("grunfeld.csv");
    let kept = year_at
        .iter()
        .filter(|r| r["year"].parse::<f64>().unwrap() >= 1945.0)
        .count();
    assert_eq!(value(&stats, 0, "nobs"), Some(kept as f64));
}

#[tokio::test]
async fn errors_name_the_problem() {
    let (ctx, _dir) = federated("synthetic_lm", &[1, -1]).await;
    let fails = |sql: &'static str| {
        let ctx = ctx.clone();
        async move {
            match ctx.sql(sql).await {
                Ok(df) => df
                    .collect()
                    .await
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                Err(e) => e.to_string(),
            }
        }
    };
    let e = fails("SELECT * FROM lm('synthetic_lm', 'y ~ x1 + nope')").await;
    assert!(e.contains("`nope`") && e.contains("x1, x2"), "{e}");
    let e = fails("SELECT * FROM lm('SELECT *, to_date(''2020-01-01'') AS d FROM synthetic_lm', 'y ~ x1 + d')").await;
    assert!(
        e.contains("column `d` is Date32") && e.contains("C(d)"),
        "{e}"
    );
    let e = fails("SELECT * FROM lm('SELECT * FROM synthetic_lm WHERE x1 > 1e9', 'y ~ x1')").await;
    assert!(e.contains("no rows"), "{e}");
    let e = fails("SELECT * FROM lm('SELECT * FROM synthetic_lm WHERE y IS NULL', 'y ~ x1')").await;
    assert!(e.contains("no rows left") && e.contains("NULL"), "{e}");
    let e = fails("SELECT * FROM lm('synthetic_lm', 'y x1')").await;
    assert!(e.contains("response ~ terms"), "{e}");
    let e = fails("SELECT * FROM lm('synthetic_lm', 'grp ~ x1')").await;
    assert!(e.contains("numeric response"), "{e}");
    let e = fails("SELECT * FROM lm('synthetic_lm')").await;
    assert!(e.contains("usage"), "{e}");
}
