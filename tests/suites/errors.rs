//! Errors that say what to do (issue 19, point 7): table options, CSV
//! options by DataFusion's names, parse errors that name the client,
//! column, data row and file line, and statement-level mistakes.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Float64Type;
use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use tempfile::TempDir;

async fn run(ctx: &FedContext, sql: &str) -> fedsql::Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

fn folder(files: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// A context whose table `t (x BIGINT, y BIGINT)` is the CSV files of `dir`.
async fn xy_table(dir: &TempDir) -> FedContext {
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t (x BIGINT, y BIGINT) LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    ctx
}

fn float(batches: &[RecordBatch], column: usize) -> f64 {
    let c = datafusion::arrow::compute::cast(
        batches[0].column(column),
        &datafusion::arrow::datatypes::DataType::Float64,
    )
    .unwrap();
    c.as_primitive::<Float64Type>().value(0)
}

#[tokio::test]
async fn a_bad_value_names_client_column_data_row_and_file_line() {
    let dir = folder(&[("a.csv", "x,y\n1,2\n3,4\nabc,5\n"), ("b.csv", "x,y\n7,8\n")]);
    let ctx = xy_table(&dir).await;
    let e = run(&ctx, "SELECT sum(x) FROM t")
        .await
        .unwrap_err()
        .to_string();
    for words in [
        "client 'a'",
        "a.csv",
        "column `x`",
        "'abc' at data row 3 (file line 4, the header counted)",
        "is not a Int64",
    ] {
        assert!(e.contains(words), "{words}: {e}");
    }
    // Under a disclosure policy: one fixed refusal, with no kind, column or
    // position (whether and how a query fails must not tell a row's values).
    run(
        &ctx,
        &format!(
            "CREATE OR REPLACE FEDERATED TABLE t (x BIGINT, y BIGINT) LOCATION '{}' OPTIONS ('min_group_rows' '1')",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let e = run(&ctx, "SELECT sum(x) FROM t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(fedsql::site::local::EVALUATION_REFUSAL), "{e}");
    assert!(
        !e.contains("abc")
            && !e.contains("a.csv")
            && !e.contains("line 4")
            && !e.contains("row 3")
            && !e.contains("parse"),
        "{e}"
    );
}

#[tokio::test]
async fn other_na_tokens_are_named_and_format_null_value_reads_them_as_null() {
    let dir = folder(&[
        ("a.csv", "x,y\n1,2.5\n3,4\n"),
        ("b.csv", "x,y\n5,.\n7,8\n.,1\n"),
    ]);
    let ctx = FedContext::new();
    let e = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("reads as text at site 'b' only because of '.' tokens")
            && e.contains("while site 'a' reads it as Int64")
            && e.contains("OPTIONS ('format.null_value.b' '.')"),
        "{e}"
    );
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}' OPTIONS ('format.null_value' '.')",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let got = run(
        &ctx,
        "SELECT sum(x), count(x), sum(y), count(y), count(*) FROM t",
    )
    .await
    .unwrap();
    // Centralized: the same rows with '.' as NULL.
    let central = datafusion::prelude::SessionContext::new();
    let want = central
        .sql("SELECT sum(x), count(x), sum(y), count(y), count(*) FROM (VALUES (1, 2.5), (3, 4.0), (5, NULL), (7, 8.0), (NULL, 1.0)) AS v(x, y)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    for i in 0..5 {
        assert_eq!(float(&got, i), float(&want, i), "column {i}");
    }
}

#[tokio::test]
async fn csv_options_use_datafusions_names() {
    let dir = folder(&[("a.csv", "x;y\n1;2\n3;4\n"), ("b.csv", "x;y\n5;6\n")]);
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}' OPTIONS ('format.delimiter' ';', 'format.has_header' 'true', 'format.quote' '\"')",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let got = run(&ctx, "SELECT sum(x), sum(y) FROM t").await.unwrap();
    assert_eq!((float(&got, 0), float(&got, 1)), (9.0, 12.0));
}

#[tokio::test]
async fn unknown_options_schemes_and_words_are_named() {
    let dir = folder(&[("a.csv", "x\n1\n")]);
    let ctx = FedContext::new();
    for (sql, words) in [
        (
            format!(
                "CREATE FEDERATED TABLE t LOCATION '{}' OPTIONS ('format.nul_value' 'NA')",
                dir.path().display()
            ),
            "unknown option 'format.nul_value': did you mean 'format.null_value'?",
        ),
        (
            format!(
                "CREATE FEDERATED TABLE t LOCATION '{}' OPTIONS ('min_grup_rows' '5')",
                dir.path().display()
            ),
            "did you mean 'min_group_rows'?",
        ),
        (
            "CREATE FEDERATED TABLE t CLIENTS ('a' = 'http://example.org:8080/t')".to_string(),
            "the scheme `http://` is not one a worker speaks",
        ),
        (
            format!(
                "CREATE FEDERATED TABEL t LOCATION '{}'",
                dir.path().display()
            ),
            "expected TABLE, found `TABEL`",
        ),
    ] {
        let e = run(&ctx, &sql).await.unwrap_err().to_string();
        assert!(e.contains(words), "{sql}: {e}");
    }
}

#[tokio::test]
async fn a_backslash_command_beside_sql_in_one_c_is_refused() {
    let ctx = FedContext::new();
    let args =
        fedsql::frontend::cli::try_parse_args(["fedsql", "--no-demo", "-c", "SELECT 1; \\d"])
            .unwrap();
    let mut out = Vec::new();
    let e =
        fedsql::frontend::cli::run_sources(&ctx, &args.sources, args.repl_options(true), &mut out)
            .await
            .unwrap_err()
            .to_string();
    assert!(e.contains("one backslash command per -c"), "{e}");
    assert!(out.is_empty(), "nothing ran");
}

#[tokio::test]
async fn a_diverging_fedsgd_says_what_to_change() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo(&ctx).unwrap();
    run(
        &ctx,
        "SELECT * FROM fedsgd('clinic', 'systolic ~ age', 'linear', 'learning_rate=0.001, rounds=6')",
    )
    .await
    .unwrap();
    let notices = ctx.take_notices().join("\n");
    assert!(
        notices.contains("the loss is diverging")
            && notices.contains("standardize=true")
            && notices.contains("smaller learning_rate"),
        "{notices}"
    );
    // Standardized, the same steps converge quietly.
    run(
        &ctx,
        "SELECT * FROM fedsgd('clinic', 'systolic ~ age', 'linear', 'learning_rate=0.1, rounds=6, standardize=true')",
    )
    .await
    .unwrap();
    assert!(!ctx.take_notices().join("\n").contains("diverging"));
}

/// A client across a "network" whose calls number `fail_from..fail_until`
/// (counted from 1) fail as a dropped connection would.
#[derive(Debug)]
struct Flaky {
    inner: fedsql::site::local::LocalClient,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    fail_from: usize,
    fail_until: usize,
}

#[async_trait::async_trait]
impl fedsql::protocol::site::Site for Flaky {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn format(&self) -> String {
        self.inner.format()
    }
    async fn encode(
        &self,
        request: &fedsql::protocol::site::SiteRequest<'_>,
    ) -> fedsql::Result<fedsql::protocol::encoder::StateBatch> {
        let call = 1 + self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if (self.fail_from..self.fail_until).contains(&call) {
            return Err(fedsql::FedError::Client {
                client: self.name().to_string(),
                location: self.location(),
                message: "connection reset by peer".into(),
            });
        }
        self.inner.encode(request).await
    }
    async fn explain(
        &self,
        request: &fedsql::protocol::site::SiteRequest<'_>,
    ) -> fedsql::Result<String> {
        self.inner.explain(request).await
    }
}

/// The demo rows over two clients, the second flaky; and the count of the
/// flaky client's calls.
fn flaky_context(
    fail_from: usize,
    fail_until: usize,
) -> (FedContext, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use fedsql::frontend::demo::demo_schema;
    use std::sync::Arc;
    let schema = demo_schema();
    let (header, rows) = crate::support::demo_rows();
    let half = rows.len() / 2;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut runners: Vec<Arc<dyn fedsql::protocol::site::Site>> = Vec::new();
    for (i, part) in [&rows[..half], &rows[half..]].into_iter().enumerate() {
        let csv = format!("{header}\n{}\n", part.join("\n"));
        let batches: Vec<RecordBatch> =
            datafusion::arrow::csv::ReaderBuilder::new(Arc::clone(&schema))
                .with_header(true)
                .build(std::io::Cursor::new(csv.into_bytes()))
                .unwrap()
                .map(|b| b.unwrap())
                .collect();
        let inner = fedsql::site::local::LocalClient::from_batches(
            &format!("s{i}"),
            "memory",
            Arc::clone(&schema),
            batches,
            Arc::new(fedsql::site::engine::SiteEngine::new()),
        )
        .unwrap();
        runners.push(if i == 1 {
            Arc::new(Flaky {
                inner,
                calls: Arc::clone(&calls),
                fail_from,
                fail_until,
            })
        } else {
            Arc::new(inner)
        });
    }
    let ctx = FedContext::new();
    ctx.register_federated(fedsql::coordinator::federated_table::FederatedTable::new(
        "clinic", schema, runners,
    ))
    .unwrap();
    (ctx, calls)
}

/// A call that fails after it may have reached its client is never sent
/// again (a timed-out worker could still be running it, and would do its
/// work twice): the round fails naming the client and the round, and the
/// coefficients of the round before are kept.
#[tokio::test]
async fn a_lost_client_is_not_retried_and_the_round_is_named_and_the_coefficients_kept() {
    use std::sync::atomic::Ordering;
    let sql = "SELECT * FROM glm('clinic', 'event ~ age + bmi', 'binomial')";
    let (steady, calls) = flaky_context(usize::MAX, usize::MAX);
    run(&steady, sql).await.unwrap();
    assert!(calls.load(Ordering::SeqCst) > 3, "a fit of several rounds");
    // Its third call fails, once: it is not made again.
    let (once, calls) = flaky_context(3, 4);
    let e = run(&once, sql).await.unwrap_err().to_string();
    assert!(
        e.contains("client 's1'") && e.contains("glm round 3 failed"),
        "{e}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the failed call was not sent again"
    );
    let notices = once.take_notices().join("\n");
    assert!(
        notices.contains("glm stopped in round 3; the last coefficients were: (Intercept) = "),
        "{notices}"
    );
}

/// Sites cache their plans and files' footers, keyed by each file's size
/// and modification time, checked every round: a file that changes between
/// queries is read afresh (in-process here; a worker serves through the
/// same site code).
#[tokio::test]
async fn a_file_that_changes_between_queries_is_read_afresh() {
    let dir = folder(&[("a.csv", "x,y\n1,2\n3,4\n"), ("b.csv", "x,y\n7,8\n")]);
    let ctx = xy_table(&dir).await;
    let sum = "SELECT sum(x) FROM t";
    assert_eq!(float(&run(&ctx, sum).await.unwrap(), 0), 11.0);
    std::fs::write(dir.path().join("b.csv"), "x,y\n7,8\n10,1\n").unwrap();
    assert_eq!(float(&run(&ctx, sum).await.unwrap(), 0), 21.0);
    std::fs::write(dir.path().join("b.csv"), "x,y\n7,8\n10,1\nabc,2\n").unwrap();
    let e = run(&ctx, sum).await.unwrap_err().to_string();
    assert!(e.contains("'b'") && e.contains("`x`"), "{e}");
}
