//! The virtual column `_client` (issue 19, point 5): each client's name as
//! a constant bound into its own plan, grouped, filtered and selected like
//! any other column; compared with the same query over each client's file
//! read on its own in a plain DataFusion context.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};
use fedsql::FedContext;
use tempfile::TempDir;

use crate::support::{Cell, Format, assert_same_result, federation, rows_of};

/// The client files of a federation, each read on its own, put together
/// with a `_client` column naming the file's stem.
async fn central_by_client(f: &crate::support::Federation) -> SessionContext {
    let central = SessionContext::new();
    let mut parts = Vec::new();
    for (i, path) in f.client_files.iter().enumerate() {
        let name = format!("part{i}");
        let file = path.to_str().unwrap();
        if file.ends_with(".parquet") {
            central
                .register_parquet(&name, file, ParquetReadOptions::default())
                .await
                .unwrap();
        } else {
            central
                .register_csv(&name, file, CsvReadOptions::new())
                .await
                .unwrap();
        }
        let stem = path.file_stem().unwrap().to_str().unwrap();
        parts.push(format!("SELECT '{stem}' AS _client, * FROM {name}"));
    }
    central
        .sql(&format!(
            "CREATE VIEW clinic AS {}",
            parts.join(" UNION ALL ")
        ))
        .await
        .unwrap();
    central
}

async fn both(f: &crate::support::Federation, central: &SessionContext, sql: &str) {
    let fed = f.fed.sql(sql).await.unwrap().collect().await.unwrap();
    let want = central.sql(sql).await.unwrap().collect().await.unwrap();
    assert_same_result(sql, &fed, &want, sql.contains("ORDER BY"), 1e-9);
}

#[tokio::test]
async fn client_counts_equal_each_files_rows() {
    let f = federation(&[1, 300, 759], Format::Csv).await;
    let batches = f
        .fed
        .sql("SELECT _client, count(*) AS n FROM clinic GROUP BY _client ORDER BY _client")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let rows = rows_of(&batches);
    let want: Vec<Vec<Cell>> = f
        .client_files
        .iter()
        .map(|p| {
            let lines = std::fs::read_to_string(p).unwrap().lines().count() - 1;
            vec![
                Cell::Text(p.file_stem().unwrap().to_str().unwrap().to_string()),
                Cell::Text(lines.to_string()),
            ]
        })
        .collect();
    assert_eq!(rows, want);
    assert_eq!(
        f.sizes.iter().sum::<usize>(),
        want.iter()
            .map(|r| match &r[1] {
                Cell::Text(t) => t.parse::<usize>().unwrap(),
                _ => 0,
            })
            .sum::<usize>()
    );
}

#[tokio::test]
async fn client_groups_filters_and_expressions_match_each_file() {
    let f = federation(&[120, 1, 400, 539], Format::Parquet).await;
    let central = central_by_client(&f).await;
    for sql in [
        "SELECT _client, count(*) AS n, avg(bmi) AS mean_bmi, stddev(systolic) AS sd FROM clinic GROUP BY _client ORDER BY _client",
        "SELECT count(*) AS n, sum(age) AS s FROM clinic WHERE _client = 'c2'",
        "SELECT region, count(*) AS n FROM clinic WHERE _client IN ('c0', 'c3') AND age > 40 GROUP BY region ORDER BY region",
        "SELECT upper(_client) AS site, region, avg(age) AS a FROM clinic GROUP BY upper(_client), region ORDER BY site, region",
        "SELECT approx_distinct(_client) AS sites FROM clinic",
    ] {
        both(&f, &central, sql).await;
    }
}

#[tokio::test]
async fn a_real_client_column_takes_precedence_and_says_so() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.csv"), "_client,x\nzeta,1\nzeta,2\n").unwrap();
    std::fs::write(dir.path().join("b.csv"), "_client,x\neta,3\n").unwrap();
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t LOCATION '{}'",
        dir.path().display()
    ))
    .await
    .unwrap();
    let notices = ctx.take_notices().join("\n");
    assert!(notices.contains("its own column `_client`"), "{notices}");
    let batches = ctx
        .sql("SELECT _client, sum(x) AS s FROM t GROUP BY _client ORDER BY _client")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        rows_of(&batches),
        vec![
            vec![Cell::Text("eta".into()), Cell::Text("3".into())],
            vec![Cell::Text("zeta".into()), Cell::Text("3".into())],
        ]
    );
}

#[tokio::test]
async fn workers_get_their_name_bound_by_the_coordinator() {
    let f = federation(&[1, 300, 759], Format::Csv).await;
    let workers = crate::remote::Workers::start(&f.client_files, "clinic").await;
    let ctx = crate::remote::remote_context(&workers).await;
    let batches = ctx
        .sql("SELECT _client, count(*) AS n FROM clinic WHERE _client <> 'nobody' GROUP BY _client ORDER BY _client")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let want: Vec<Vec<Cell>> = f
        .sizes
        .iter()
        .enumerate()
        .map(|(i, n)| vec![Cell::Text(format!("h{i}")), Cell::Text(n.to_string())])
        .collect();
    assert_eq!(rows_of(&batches), want);
}

#[tokio::test]
async fn show_clients_says_whether_each_client_is_reachable_and_why_not() {
    let f = federation(&[530, 530], Format::Csv).await;
    std::fs::remove_file(&f.client_files[1]).unwrap();
    let batches = f
        .fed
        .sql("SHOW CLIENTS clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let b = &batches[0];
    let reachable = b.column_by_name("reachable").unwrap().as_boolean();
    let why = b.column_by_name("why_not").unwrap().as_string::<i32>();
    assert!(reachable.value(0) && why.is_null(0));
    assert!(!reachable.value(1));
    assert!(
        why.value(1).contains("is missing") && why.value(1).contains("c1"),
        "{}",
        why.value(1)
    );
}
