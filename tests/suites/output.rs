//! What the CLI and REPL print (issue 19, points 1 and 2): machine formats
//! that hold only the result (read back with the csv and serde_json
//! crates), explicit nulls, NaN and infinity, nested values in CSV, a pipe
//! closed early; and tables that read like R — significant digits, `NULL`,
//! `< 2e-16`, and R's `summary()` lines around `lm` and `glm` tables,
//! compared with R's own transcript (`testdata/reference/summary_print.txt`,
//! written by `summary_print.R`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use fedsql::FedContext;
use fedsql::frontend::print::OutputFormat;
use fedsql::frontend::repl::{ReplOptions, Session};

/// Models on reference data that stays put (the demo's data may be
/// regenerated): NULLs in both, so rows are deleted; `x3 = x1 + x2` is aliased.
const GLM: &str = "SELECT * FROM glm('synthetic_poisson', 'y ~ x1 + x2', 'poisson')";
const LM: &str = "SELECT * FROM lm('synthetic_lm', 'y ~ x1 + x2 + x3')";

/// Registers the two reference datasets, each over one client (paths from
/// the repository's root).
const REGISTER: &str = "CREATE FEDERATED TABLE synthetic_poisson CLIENTS \
     ('all' = 'testdata/reference/synthetic_poisson.csv'); \
     CREATE FEDERATED TABLE synthetic_lm CLIENTS ('all' = 'testdata/reference/synthetic_lm.csv')";

/// The demo federation and the two reference datasets.
async fn demo() -> FedContext {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo(&ctx).unwrap();
    let root = format!("{}/testdata/", env!("CARGO_MANIFEST_DIR"));
    for statement in REGISTER.replace("testdata/", &root).split(';') {
        ctx.sql(statement).await.unwrap();
    }
    ctx
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A writer the test can read after the session wrote to it.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Runs `script` in `format` with timing on; returns (output, diagnostics).
async fn run_split(ctx: &FedContext, script: &str, format: OutputFormat) -> (String, String) {
    let mut session = Session::new(
        ctx,
        ReplOptions {
            format,
            ..ReplOptions::default()
        },
    );
    let diagnostics = Shared::default();
    session.set_diagnostics(Box::new(diagnostics.clone()));
    let mut out = Vec::new();
    session.run_text(script, &mut out).await.unwrap();
    (String::from_utf8(out).unwrap(), diagnostics.text())
}

/// Table format without the timing line.
async fn run_table(ctx: &FedContext, script: &str) -> String {
    let mut session = Session::new(
        ctx,
        ReplOptions {
            timing: false,
            ..ReplOptions::default()
        },
    );
    let mut out = Vec::new();
    session.run_text(script, &mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

fn csv_records(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

// ---------------------------------------------------------------- point 1

#[tokio::test]
async fn a_glm_in_csv_is_only_its_coefficient_rows() {
    let ctx = demo().await;
    let (out, diagnostics) = run_split(&ctx, &format!("{GLM};"), OutputFormat::Csv).await;
    let (header, rows) = csv_records(&out);
    assert_eq!(
        header,
        [
            "term",
            "estimate",
            "std_error",
            "statistic",
            "p_value",
            "conf_low",
            "conf_high"
        ]
    );
    let terms: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(terms, ["(Intercept)", "x1", "x2"]);
    // Every digit: the estimate parses back to what R prints to 5 digits.
    let estimate: f64 = rows[1][1].parse().unwrap();
    assert!((estimate - 0.51381).abs() < 5e-6, "{estimate}");
    assert!(
        rows[1][1].len() > 10,
        "machine formats keep every digit: {}",
        rows[1][1]
    );
    // The summary lines and the row count went to the diagnostics.
    assert!(
        diagnostics.contains("Residual deviance: 1655.4  on 736  degrees of freedom"),
        "{diagnostics}"
    );
    assert!(diagnostics.contains("3 row(s) fetched."), "{diagnostics}");
    assert!(
        !out.contains("deviance") && !out.contains("fetched"),
        "{out}"
    );
}

#[tokio::test]
async fn json_and_ndjson_parse_and_write_explicit_nulls() {
    let ctx = demo().await;
    let (out, diagnostics) = run_split(&ctx, &format!("{LM};"), OutputFormat::Json).await;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 4);
    // The aliased term: every key is there, with null.
    let aliased = &rows[3];
    assert_eq!(aliased["term"], "x3");
    for key in [
        "estimate",
        "std_error",
        "statistic",
        "p_value",
        "conf_low",
        "conf_high",
    ] {
        assert_eq!(
            aliased.get(key),
            Some(&serde_json::Value::Null),
            "{key}: {aliased}"
        );
    }
    assert!(diagnostics.contains("Multiple R-squared:"), "{diagnostics}");

    let (out, _) = run_split(&ctx, &format!("{LM};"), OutputFormat::NdJson).await;
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines, rows);
}

#[tokio::test]
async fn nan_and_infinity_are_null_in_json_and_words_in_csv() {
    let ctx = demo().await;
    let sql = "SELECT CAST('NaN' AS DOUBLE) AS nan, CAST('inf' AS DOUBLE) AS pos, \
               CAST('-inf' AS DOUBLE) AS neg, CAST(NULL AS DOUBLE) AS missing, 1.5 AS x;";
    let (out, _) = run_split(&ctx, sql, OutputFormat::Json).await;
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        rows,
        serde_json::json!([{"nan": null, "pos": null, "neg": null, "missing": null, "x": 1.5}])
    );
    let (out, _) = run_split(&ctx, sql, OutputFormat::Csv).await;
    assert_eq!(out, "nan,pos,neg,missing,x\nNaN,inf,-inf,,1.5\n");
    let table = run_table(&ctx, sql).await;
    assert!(
        table.contains("| NaN | Inf | -Inf | NULL    | 1.5 |"),
        "{table}"
    );
}

#[tokio::test]
async fn csv_writes_nested_values_as_json_text() {
    let ctx = demo().await;
    let sql = "SELECT region, covariance_matrix(age, systolic) AS cov, var_samp(age) AS var_age, \
               [1, 2] AS list FROM clinic GROUP BY region ORDER BY region;";
    let (out, _) = run_split(&ctx, sql, OutputFormat::Csv).await;
    let (header, rows) = csv_records(&out);
    assert_eq!(header, ["region", "cov", "var_age", "list"]);
    assert_eq!(rows.len(), 4);
    for row in rows {
        let cov: serde_json::Value = serde_json::from_str(&row[1]).unwrap();
        assert_eq!(cov["names"], serde_json::json!(["age", "systolic"]));
        let var_age: f64 = row[2].parse().unwrap();
        let cell = cov["matrix"][0][0].as_f64().unwrap();
        assert!(
            (cell - var_age).abs() < 1e-9 * var_age,
            "{cell} vs {var_age}"
        );
        assert_eq!(row[3], "[1,2]");
    }
}

fn fedsql(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fedsql"));
    command
        .env("HOME", home)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

#[test]
fn the_binary_writes_results_to_stdout_and_the_rest_to_stderr() {
    let home = tempfile::tempdir().unwrap();
    let output = fedsql(home.path())
        .args(["--format", "csv", "-c", REGISTER, "-c", GLM])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let (header, rows) = csv_records(&String::from_utf8(output.stdout).unwrap());
    assert_eq!(header[0], "term");
    assert_eq!(rows.len(), 3);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("AIC: 3510.9"), "{stderr}");
    assert!(stderr.contains("3 row(s) fetched."), "{stderr}");
}

#[test]
fn a_pipe_closed_early_ends_quietly_with_success() {
    let home = tempfile::tempdir().unwrap();
    for format in ["csv", "table", "ndjson"] {
        let mut child = fedsql(home.path())
            .args(["-q", "--format", format, "-c"])
            .arg("SELECT value, value * 2 AS twice FROM generate_series(1, 300000) AS t(value)")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `| head -1`: read one line, then close the pipe.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            output.status.success(),
            "{format}: {:?} {stderr}",
            output.status
        );
        assert_eq!(stderr, "", "{format}");
    }
}

// ---------------------------------------------------------------- point 2

/// R's transcript, split into the two models' printouts.
fn r_transcript() -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(repo("testdata/reference/summary_print.txt")).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let second = lines
        .iter()
        .rposition(|l| l == "Call:")
        .expect("two models");
    (lines[..second].to_vec(), lines[second..].to_vec())
}

/// The lines of `lines` from the first that starts with `from` to the
/// first after it that starts with `to`, both included.
fn block(lines: &[String], from: &str, to: &str) -> Vec<String> {
    let start = lines
        .iter()
        .position(|l| l.starts_with(from))
        .unwrap_or_else(|| panic!("{from} in {lines:#?}"));
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.starts_with(to))
            .unwrap_or_else(|| panic!("{to} in {lines:#?}"));
    lines[start..=end].to_vec()
}

/// R's coefficient rows: term, then the printed cells.
fn r_coefficients(lines: &[String]) -> Vec<(String, Vec<String>)> {
    let start = lines
        .iter()
        .position(|l| l.starts_with("Coefficients:"))
        .unwrap()
        + 2;
    lines[start..]
        .iter()
        .take_while(|l| !l.starts_with("---"))
        .map(|l| {
            let (term, rest) = l.split_at(12);
            // "< 2e-16" is one cell.
            let rest = rest.replace("< 2e-16", "<2e-16");
            let cells = rest
                .split_whitespace()
                .map(|c| c.replace("<2e-16", "< 2e-16"))
                .collect();
            (term.trim().to_string(), cells)
        })
        .collect()
}

/// Our table's rows: the cells between the bars.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// `ours` (7 significant digits) shown with R's decimals equals `theirs`,
/// up to one unit in R's last digit.
fn same_digits(ours: &str, theirs: &str) -> bool {
    if ours == theirs {
        return true;
    }
    let (Ok(a), Ok(b)) = (ours.parse::<f64>(), theirs.parse::<f64>()) else {
        return false;
    };
    if theirs.contains('e') {
        return ((a - b) / b).abs() < 0.01;
    }
    // R's standard errors use the weights of the last IRLS iteration,
    // fedsql's those at the final estimate (README: ~1e-6 relative apart),
    // so the last digit R shows may differ by one.
    let decimals = theirs.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
    (a - b).abs() <= 1.000001 * 10f64.powi(-decimals)
}

async fn check_against_r(sql: &str, r: &[String], footer_end: &str) {
    let ctx = demo().await;
    let out = run_table(&ctx, &format!("{sql};")).await;
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    // The call and the Coefficients line, as R prints them.
    assert_eq!(block(&lines, "Call:", "Coefficients"), {
        let mut call = block(r, "Call:", "Coefficients");
        // R's residual quantiles (every residual) are not shown.
        let blank_before_residuals = call.iter().position(|l| l.contains("Residuals")).unwrap() - 1;
        call.drain(blank_before_residuals..call.len() - 2);
        call
    });
    // The footer, line by line and digit by digit.
    assert_eq!(
        block(&lines, "---", footer_end),
        block(r, "---", footer_end),
        "{out}"
    );
    // The table: each estimate, standard error, statistic and p-value
    // shown to R's digits, the stars, and NA for an aliased term.
    let rows = table_rows(&out);
    assert_eq!(
        rows[0],
        [
            "term",
            "estimate",
            "std_error",
            "statistic",
            "p_value",
            "",
            "conf_low",
            "conf_high"
        ]
    );
    let expected = r_coefficients(r);
    assert_eq!(rows.len() - 1, expected.len(), "{out}");
    for (row, (term, cells)) in rows[1..].iter().zip(&expected) {
        assert_eq!(&row[0], term, "{out}");
        if cells[0] == "NA" {
            assert_eq!(row[1..5], ["NA", "NA", "NA", "NA"], "{out}");
            assert_eq!(row[5], "");
            continue;
        }
        for (ours, theirs) in row[1..5].iter().zip(cells) {
            assert!(
                same_digits(ours, theirs),
                "{term}: {ours} vs R's {theirs}\n{out}"
            );
        }
        assert_eq!(row[5], cells[4], "{term}: stars\n{out}");
    }
}

#[tokio::test]
async fn a_glm_prints_rs_summary_lines() {
    let (glm, _) = r_transcript();
    check_against_r(GLM, &glm, "Number of Fisher Scoring iterations").await;
}

#[tokio::test]
async fn an_lm_prints_rs_summary_lines_with_na_for_an_aliased_term() {
    let (_, lm) = r_transcript();
    check_against_r(LM, &lm, "F-statistic").await;
}

#[tokio::test]
async fn digits_null_and_tiny_p_values_in_tables() {
    let ctx = demo().await;
    // 7 significant digits by default; \digits and SET change them; 0 is all.
    let sql = "SELECT 2.0 / 3 AS third, 123456789.123 AS big, 1e-10 AS tiny, \
               CAST(NULL AS VARCHAR) AS missing, '' AS empty;";
    let out = run_table(&ctx, sql).await;
    assert!(
        out.contains("| 0.6666667 | 123456789 | 1e-10 | NULL    |       |"),
        "{out}"
    );
    let out = run_table(&ctx, &format!("\\digits 3\n{sql}")).await;
    assert!(
        out.starts_with("Floats show 3 significant digits.\n"),
        "{out}"
    );
    assert!(out.contains("| 0.667 | 1.23e+08 | 1e-10 |"), "{out}");
    let out = run_table(
        &ctx,
        &format!("SET fedsql.display_digits = 0;\n{sql}\n\\digits"),
    )
    .await;
    assert!(
        out.contains("| 0.6666666666666666 | 123456789.123 | 1e-10 |"),
        "{out}"
    );
    assert!(out.ends_with("Floats show all their digits.\n"), "{out}");
    let out = run_table(&ctx, "\\digits 5\nSELECT 2.0 / 3 AS third;").await;
    assert!(out.contains("| 0.66667 |"), "{out}");
    // p-values below 2.2e-16, in any table; a projection has no stars and
    // its model's summary follows as text.
    let ctx = demo().await;
    let out = run_table(&ctx, &format!("SELECT term, p_value FROM ({LM}) AS fit;")).await;
    assert!(out.contains("| (Intercept) | 0.005473993 |"), "{out}");
    assert!(out.contains("| x1          | < 2e-16 "), "{out}");
    assert!(out.contains("| x3          | NULL "), "{out}");
    assert!(
        out.contains("Residual standard error: 4.839 on 428 degrees of freedom"),
        "{out}"
    );
    assert!(
        !out.contains("Coefficients:") && !out.contains("Signif. codes"),
        "{out}"
    );
}

// ---------------------------------------------------------------- point 9

#[tokio::test]
async fn copy_writes_a_federated_querys_result() {
    let ctx = demo().await;
    let dir = tempfile::tempdir().unwrap();
    let sql = "SELECT region, count(*) AS n, avg(systolic) AS mean_sbp FROM clinic GROUP BY region ORDER BY region";
    let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut expected_csv = Vec::new();
    fedsql::frontend::print::print_batches(
        &expected,
        &expected[0].schema(),
        OutputFormat::Csv,
        &mut expected_csv,
    )
    .unwrap();
    for file in ["by_region.csv", "by_region.parquet"] {
        let path = dir.path().join(file);
        let copied = ctx
            .sql(&format!("COPY ({sql}) TO '{}'", path.display()))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let count = copied[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::UInt64Array>()
            .unwrap()
            .value(0);
        assert_eq!(count, 4);
        // Read back as a shared table.
        let back = fedsql::FedContext::new();
        let kind = if file.ends_with("csv") {
            "CSV"
        } else {
            "PARQUET"
        };
        back.sql(&format!(
            "CREATE EXTERNAL TABLE back STORED AS {kind} LOCATION '{}'",
            path.display()
        ))
        .await
        .unwrap();
        let rows = back
            .sql("SELECT * FROM back ORDER BY region")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let mut got = Vec::new();
        fedsql::frontend::print::print_batches(
            &rows,
            &rows[0].schema(),
            OutputFormat::Csv,
            &mut got,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(expected_csv.clone()).unwrap(),
            "{file}"
        );
    }
    // The exposure check applies: raw rows are not written.
    let refused = ctx
        .sql(&format!(
            "COPY clinic TO '{}'",
            dir.path().join("raw.csv").display()
        ))
        .await;
    let error = match refused {
        Ok(df) => df.collect().await.unwrap_err(),
        Err(e) => e,
    };
    assert!(error.to_string().starts_with("refused: "), "{error}");
    assert!(!dir.path().join("raw.csv").exists());
}

/// The data rows of the demo's client files (header lines not counted).
fn demo_rows() -> usize {
    std::fs::read_dir(repo("testdata/clinic"))
        .unwrap()
        .map(|entry| {
            std::fs::read_to_string(entry.unwrap().path())
                .unwrap()
                .lines()
                .count()
                - 1
        })
        .sum()
}

#[test]
fn the_readme_examples_run_as_written() {
    let home = tempfile::tempdir().unwrap();
    let output = fedsql(home.path())
        .args(["-q", "--format", "csv", "-c"])
        .arg("CREATE FEDERATED TABLE visits STORED AS PARQUET LOCATION 'testdata/visits/'; SELECT region, count(*) AS n FROM visits GROUP BY region ORDER BY region")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "region,n\neast,30\nnorth,55\nsouth,42\nwest,8\n"
    );
    // Registering data: clients named one by one, and a declared schema.
    let output = fedsql(home.path())
        .args(["-q", "--format", "csv", "-c"])
        .arg(
            "CREATE FEDERATED TABLE visits_all CLIENTS (\
                 'north' = 'testdata/visits/north_clinic.parquet', \
                 'south' = 'testdata/visits/south_clinic.parquet', \
                 'west'  = 'testdata/visits_west/'); \
             SELECT count(*) AS n FROM visits_all; \
             CREATE FEDERATED TABLE t (region VARCHAR NOT NULL, age INT, sex VARCHAR, bmi DOUBLE, \
                 systolic INT, smoker TINYINT, event TINYINT, visits INT UNSIGNED) \
                 STORED AS CSV LOCATION 'testdata/clinic/'; \
             SELECT count(*) AS n FROM t",
        )
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!("n\n127\nn\n{}\n", demo_rows())
    );
    let output = fedsql(home.path())
        .args(["-q", "-f", "queries/02_by_region.sql"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}
