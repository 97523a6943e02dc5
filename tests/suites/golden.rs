//! Golden SQL files: the `.slt` files of `tests/golden/` (sqllogictest
//! format, run by the `sqllogictest` crate) and every statement of the
//! example files in `queries/`, run in every mode: the demo rows split over
//! 1, 3 and 7 in-process clients (seven with an empty and a one-row client,
//! as CSV and as Parquet files) and over two loopback workers.
//!
//! The check of every `query` record is virtual-global consistency: the
//! [`Dual`] database runs it federated and with plain DataFusion over the
//! concatenated rows (same table names, same schema) and fails the record
//! unless both give the same rows (integers and strings exactly, floats to
//! 1e-9 relative; in order when the SQL says ORDER BY, else as multisets;
//! t-digest queries, `approx_percentile_cont` and `approx_median`, to 5%).
//! A `statement ok` runs on both sides (shared tables); a `statement error
//! <regex>` runs federated only and expects an error matching the regex,
//! as refusals are.
//!
//! The expected table under a query's `----` is a second, readable check:
//! the federated rows, floats to 10 significant digits, unordered results
//! sorted. A query may leave it out (then only the comparison with the
//! centralized run counts); `FEDSQL_GOLDEN_REWRITE=1 cargo test --test
//! integration golden::one_client` writes it from the one-client run.
//!
//! A file may set the sites' disclosure policy on a header line,
//! `# policy: min_group_rows=5, extremes=refuse` (the table's OPTIONS in
//! process, the workers' policy over the network); files without one run
//! with no policy, so their answers are the centralized ones.

use std::fmt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::prelude::SessionContext;
use fedsql::FedContext;
use fedsql::site::release::policy::DisclosurePolicy;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Normalizer, Record, Runner};

use crate::remote::{Workers, remote_context};
use crate::support::{
    Federation, Format, demo_rows, fast_path_modes, federation_in_mode, federation_with,
    same_result, split_sizes,
};

/// Where the golden files are.
fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Every golden file, in name order.
fn golden_files() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "tests/golden/ holds the golden files");
    files
}

/// The settings of a file's `# policy:` header line, as (key, value).
fn policy_of(file: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(file).unwrap();
    let Some(line) = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix('#')?.trim().strip_prefix("policy:"))
    else {
        return Vec::new();
    };
    line.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|setting| {
            let (key, value) = setting
                .split_once('=')
                .unwrap_or_else(|| panic!("{}: `# policy: key=value, ...`", file.display()));
            (key.trim().to_string(), value.trim().to_string())
        })
        .collect()
}

/// The SQL of every `query` record of a golden file that expects rows.
pub(crate) fn queries(file: &str) -> Vec<String> {
    sqllogictest::parse_file::<DefaultColumnType>(golden_dir().join(file))
        .unwrap()
        .into_iter()
        .filter_map(|record| match record {
            Record::Query {
                sql,
                expected: sqllogictest::QueryExpect::Results { .. },
                ..
            } => Some(sql),
            _ => None,
        })
        .collect()
}

/// Every statement of each example file in `queries/` (the benchmark suite
/// excluded) as a golden script: CREATE and DROP as statements, the rest as
/// queries without expected rows (compared with the centralized run only).
fn example_scripts() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "queries/ should hold the example queries");
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut script = String::new();
            for sql in fedsql::frontend::split::split_statements(&text).unwrap() {
                let upper = sql.trim_start().to_ascii_uppercase();
                let kind = if upper.starts_with("CREATE") || upper.starts_with("DROP") {
                    "statement ok"
                } else {
                    "query"
                };
                // A record ends at an empty line.
                let lines: Vec<_> = sql.lines().filter(|l| !l.trim().is_empty()).collect();
                script.push_str(&format!("{kind}\n{}\n\n", lines.join("\n")));
            }
            (
                format!("queries/{}", path.file_name().unwrap().to_string_lossy()),
                script,
            )
        })
        .collect()
}

/// A failed record: federated error, or federated and centralized differ.
#[derive(Debug)]
pub(crate) struct GoldenError(String);

impl fmt::Display for GoldenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GoldenError {}

/// The database the files run against: a federation and the centralized
/// context over the same rows.
#[derive(Clone)]
pub(crate) struct Dual {
    fed: FedContext,
    central: SessionContext,
}

#[async_trait]
impl AsyncDB for Dual {
    type Error = GoldenError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, GoldenError> {
        let mut fields = Vec::new();
        let fed = match self.fed.sql(sql).await {
            Ok(df) => {
                fields = df.schema().fields().iter().cloned().collect();
                df.collect().await
            }
            Err(e) => Err(e),
        }
        .map_err(|e| GoldenError(e.to_string()))?;
        let central = match self.central.sql(sql).await {
            Ok(df) => df.collect().await,
            Err(e) => Err(e),
        }
        .map_err(|e| {
            GoldenError(format!(
                "answered federated, but the centralized run failed: {e}"
            ))
        })?;
        let upper = sql.to_ascii_uppercase();
        let ordered = upper.contains("ORDER BY");
        // t-digests merged from clients agree with one pass to the
        // sketch's accuracy, not bit for bit.
        let rel = if upper.contains("APPROX_PERCENTILE") || upper.contains("APPROX_MEDIAN") {
            0.05
        } else {
            1e-9
        };
        same_result(&fed, &central, ordered, rel).map_err(|difference| {
            GoldenError(format!(
                "federated and centralized answers differ: {difference}"
            ))
        })?;
        let types = fields.iter().map(|f| column_type(f.data_type())).collect();
        let mut rows = text_rows(&fed);
        if !ordered {
            rows.sort();
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "fedsql"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }
}

/// A column's sqllogictest type letter: I, R, T or ? (any).
fn column_type(t: &DataType) -> DefaultColumnType {
    match t {
        t if t.is_integer() => DefaultColumnType::Integer,
        t if t.is_floating() || matches!(t, DataType::Decimal128(..)) => {
            DefaultColumnType::FloatingPoint
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

/// A result as sqllogictest text: NULL, `(empty)`, floats to 10
/// significant digits (stable across the splits' rounding), the rest as
/// Arrow displays it.
fn text_rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let options = FormatOptions::default();
    let mut rows = Vec::new();
    for batch in batches {
        let columns: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| {
                let floats = c
                    .data_type()
                    .is_floating()
                    .then(|| datafusion::arrow::compute::cast(c, &DataType::Float64).unwrap());
                let display = ArrayFormatter::try_new(c.as_ref(), &options).unwrap();
                (c, floats, display)
            })
            .collect();
        for row in 0..batch.num_rows() {
            rows.push(
                columns
                    .iter()
                    .map(|(c, floats, display)| match floats {
                        _ if c.is_null(row) => "NULL".to_string(),
                        Some(f) => float_text(f.as_primitive::<Float64Type>().value(row)),
                        None => match display.value(row).to_string() {
                            s if s.is_empty() => "(empty)".to_string(),
                            s => s,
                        },
                    })
                    .collect(),
            );
        }
    }
    rows
}

/// A float to 10 significant digits, in its shortest decimal form.
fn float_text(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let rounded: f64 = format!("{v:.9e}").parse().unwrap();
    // No "-0".
    (rounded + 0.0).to_string()
}

/// Expected rows left out are not compared: the comparison with the
/// centralized run is the check.
fn validate(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    expected.is_empty() || sqllogictest::default_validator(normalizer, actual, expected)
}

/// A runner whose every connection is `db`.
fn runner(db: Dual) -> Runner<Dual, impl sqllogictest::MakeConnection<Conn = Dual>> {
    let mut runner = Runner::new(move || {
        let db = db.clone();
        async move { Ok::<_, GoldenError>(db) }
    });
    runner.with_validator(validate);
    runner
}

/// How the rows are split.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// In-process clients, the demo rows split by [`split_sizes`], with
    /// the site engine's fast path on or off.
    Clients(usize, Format, bool),
    /// Two `fedsql worker`s on loopback, of a third and two thirds.
    Workers,
}

/// A federation for one file; the workers live as long as it.
struct Setup {
    federation: Federation,
    _workers: Option<Workers>,
}

impl Setup {
    async fn new(mode: Mode, policy: &[(String, String)]) -> Self {
        let n = demo_rows().1.len();
        match mode {
            Mode::Clients(clients, format, fast_path) => {
                let options = policy
                    .iter()
                    .map(|(k, v)| format!("'{k}' '{v}'"))
                    .collect::<Vec<_>>()
                    .join(", ");
                Self {
                    federation: federation_in_mode(
                        &split_sizes(n, clients),
                        format,
                        &options,
                        fast_path,
                    )
                    .await,
                    _workers: None,
                }
            }
            Mode::Workers => {
                let mut federation = federation_with(&[n / 3, n - n / 3], Format::Csv, "").await;
                let policy = DisclosurePolicy::from_options(policy).unwrap();
                let workers = Workers::start_with(&federation.client_files, "clinic", |mut c| {
                    c.policy = policy.clone();
                    c
                })
                .await;
                federation.fed = remote_context(&workers).await;
                Self {
                    federation,
                    _workers: Some(workers),
                }
            }
        }
    }

    fn db(&self) -> Dual {
        Dual {
            fed: self.federation.fed.clone(),
            central: self.federation.central.clone(),
        }
    }
}

/// Runs every golden file and example script in one mode; each file on a
/// federation of its own (its policy, its shared tables).
async fn run_mode(mode: Mode) {
    let rewrite = std::env::var_os("FEDSQL_GOLDEN_REWRITE").is_some()
        && matches!(mode, Mode::Clients(1, Format::Csv, true));
    let mut failures = Vec::new();
    for file in golden_files() {
        let setup = Setup::new(mode, &policy_of(&file)).await;
        let mut runner = runner(setup.db());
        if rewrite {
            // Only expected tables are rewritten: every other check
            // (errors, federated = centralized) must pass first.
            runner.with_validator(|_, _, _| true);
            if let Err(e) = runner.run_file_async(&file).await {
                failures.push(e.display(false).to_string());
                continue;
            }
            let setup = Setup::new(mode, &policy_of(&file)).await;
            runner = self::runner(setup.db());
            runner
                .update_test_file(
                    &file,
                    " ",
                    sqllogictest::default_validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::strict_column_validator,
                )
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        } else if let Err(e) = runner.run_file_async(&file).await {
            failures.push(e.display(false).to_string());
        }
    }
    let setup = Setup::new(mode, &[]).await;
    for (name, script) in example_scripts() {
        let mut runner = runner(setup.db());
        if let Err(e) = runner.run_script_with_name_async(&script, &*name).await {
            failures.push(e.display(false).to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "{mode:?} ({} failures):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Runs the named golden files (none with a policy) against a federation
/// built elsewhere: many clients, workers, mixed clients.
pub(crate) async fn check_files(f: &Federation, files: &[&str]) {
    let db = Dual {
        fed: f.fed.clone(),
        central: f.central.clone(),
    };
    for file in files {
        let path = golden_dir().join(file);
        assert!(policy_of(&path).is_empty(), "{file} sets a policy");
        if let Err(e) = runner(db.clone()).run_file_async(&path).await {
            panic!("(clients of sizes {:?})\n{}", f.sizes, e.display(false));
        }
    }
}

#[tokio::test]
async fn one_client() {
    for fast_path in fast_path_modes() {
        run_mode(Mode::Clients(1, Format::Csv, fast_path)).await;
    }
}

#[tokio::test]
async fn three_clients_with_a_one_row_client() {
    for fast_path in fast_path_modes() {
        run_mode(Mode::Clients(3, Format::Csv, fast_path)).await;
    }
}

#[tokio::test]
async fn seven_clients_with_an_empty_and_a_one_row_client() {
    let sizes = split_sizes(demo_rows().1.len(), 7);
    assert!(sizes.contains(&0) && sizes.contains(&1));
    for fast_path in fast_path_modes() {
        run_mode(Mode::Clients(7, Format::Csv, fast_path)).await;
    }
}

#[tokio::test]
async fn seven_parquet_clients() {
    for fast_path in fast_path_modes() {
        run_mode(Mode::Clients(7, Format::Parquet, fast_path)).await;
    }
}

#[tokio::test]
async fn two_loopback_workers() {
    run_mode(Mode::Workers).await;
}

#[test]
fn floats_print_to_ten_significant_digits() {
    assert_eq!(float_text(0.1 + 0.2), "0.3");
    assert_eq!(float_text(-1.0 / 3.0), "-0.3333333333");
    assert_eq!(float_text(123456789012.5), "123456789000");
    assert_eq!(float_text(-0.0), "0");
    assert_eq!(float_text(5.0), "5");
}
