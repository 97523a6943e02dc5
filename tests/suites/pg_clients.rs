//! `fedsql serve` driven by real clients: psql's `\copy (query) TO file`
//! (a `COPY … TO STDOUT` on the wire) on a server without `--allow-ddl`,
//! and SQLAlchemy 2 + psycopg 3 + pandas (`create_engine`, `pd.read_sql`),
//! with every Python warning an error. A client that is not installed
//! skips its test with a message.

use std::process::Command;

use fedsql::FedContext;
use fedsql::frontend::pgwire::{Server, ServerOptions, start};

async fn demo_server() -> Server {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Runs a client program beside the server (which answers on this
/// runtime meanwhile): its status, stdout and stderr.
async fn run(mut command: Command) -> (bool, String, String) {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn installed(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn psql(server: &Server, command: &str) -> Command {
    let mut psql = Command::new("psql");
    psql.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
        .args(["-p", &server.addr().port().to_string()])
        .args(["-U", "analyst", "-d", "fedsql", "-c", command])
        .env("PGCONNECT_TIMEOUT", "20");
    psql
}

/// The same query in-process: each row's values as text.
async fn in_process(sql: &str) -> Vec<Vec<String>> {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut rows = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .map(|c| {
                        datafusion::arrow::util::display::array_value_to_string(c, row).unwrap()
                    })
                    .collect(),
            );
        }
    }
    rows
}

fn assert_same_value(got: &str, want: &str) {
    match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(g), Ok(w)) => assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{got} != {want}"),
        _ => assert_eq!(got, want),
    }
}

const PER_SITE: &str = "SELECT _client, count(*) AS n, avg(bmi) AS mean_bmi FROM clinic GROUP BY _client ORDER BY _client";

#[tokio::test]
async fn psql_copy_to_a_file_runs_without_allow_ddl() {
    if !installed("psql", &["--version"]) {
        eprintln!("skipped: psql is not installed");
        return;
    }
    let server = demo_server().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("per_site.csv");
    let copy = format!("\\copy ({PER_SITE}) TO '{}' CSV HEADER", file.display());
    let (ok, out, err) = run(psql(&server, &copy)).await;
    assert!(ok, "psql failed: {out}\n{err}");
    let written = std::fs::read_to_string(&file).unwrap();
    let mut lines = written.lines();
    assert_eq!(lines.next(), Some("_client,n,mean_bmi"), "{written}");
    let want = in_process(PER_SITE).await;
    let got: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(got.len(), want.len(), "{written}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.len(), w.len(), "{written}");
        for (g, w) in g.iter().zip(w) {
            assert_same_value(g, w);
        }
    }

    // COPY … TO STDOUT in the text format, as psql prints it.
    let (ok, out, err) = run(psql(
        &server,
        "COPY (SELECT 'a' AS s, CAST(NULL AS INT) AS n UNION ALL SELECT 'b\tc', 2) TO STDOUT",
    ))
    .await;
    assert!(ok, "psql failed: {out}\n{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["a\t\\N", "b\\tc\t2"], "{out}");

    // A COPY that would write at the server is still refused.
    let target = dir.path().join("server_side.csv");
    let (ok, _, err) = run(psql(
        &server,
        &format!("COPY (SELECT 1) TO '{}'", target.display()),
    ))
    .await;
    assert!(!ok && err.contains("--allow-ddl"), "{err}");
    assert!(!target.exists());
}

const PANDAS: &str = r#"
import sys, warnings
warnings.simplefilter("error")
import pandas as pd
from sqlalchemy import create_engine, text

port = sys.argv[1]
engine = create_engine(f"postgresql+psycopg://analyst@127.0.0.1:{port}/fedsql")
query = sys.argv[2]
with engine.connect() as conn:
    first = pd.read_sql(text(query), conn)
second = pd.read_sql(query, engine)
assert first.equals(second), (first, second)
engine.dispose()
print(first.to_csv(index=False, float_format="%.17g"), end="")
"#;

#[tokio::test]
async fn sqlalchemy_psycopg_and_pandas_read_a_query_without_warnings() {
    if !installed("python3", &["-c", "import sqlalchemy, psycopg, pandas"]) {
        eprintln!(
            "skipped: python3 with sqlalchemy, psycopg and pandas is not installed (pip install sqlalchemy 'psycopg[binary]' pandas)"
        );
        return;
    }
    let server = demo_server().await;
    let mut python = Command::new("python3");
    python
        .args(["-c", PANDAS])
        .arg(server.addr().port().to_string())
        .arg(PER_SITE)
        .env("PYTHONWARNINGS", "error");
    let (ok, out, err) = run(python).await;
    assert!(ok, "python failed:\n{out}\n{err}");
    assert!(err.trim().is_empty(), "python wrote to stderr:\n{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("_client,n,mean_bmi"), "{out}");
    let want = in_process(PER_SITE).await;
    let got: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(got.len(), want.len(), "{out}");
    for (g, w) in got.iter().zip(&want) {
        for (g, w) in g.iter().zip(w) {
            assert_same_value(g, w);
        }
    }
}
