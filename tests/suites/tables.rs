//! Registering federated tables: folders of files or of client subfolders,
//! named clients mixing CSV and Parquet, declared column lists, schema
//! unification across clients, and clear errors for files that do not fit.

use std::path::Path;

use datafusion::arrow::datatypes::DataType;
use fedsql::{FedContext, FedError};
use tempfile::TempDir;

use crate::support::{assert_same_result, write_parquet};

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

async fn create(ctx: &FedContext, sql: &str) -> Result<(), FedError> {
    ctx.sql(sql).await.map(|_| ())
}

async fn rows(ctx: &FedContext, sql: &str) -> Vec<datafusion::arrow::record_batch::RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

/// The result of `sql` over a plain DataFusion table of these CSV rows.
async fn centralized(
    csv: &str,
    schema_sql: &str,
    sql: &str,
) -> Vec<datafusion::arrow::record_batch::RecordBatch> {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "all.csv", csv);
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE t {schema_sql} STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
        dir.path().join("all.csv").display()
    ))
    .await
    .unwrap();
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

#[tokio::test]
async fn folder_of_files_one_client_each() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "north.csv", "x,y\n1,2.5\n2,3.5\n");
    write(dir.path(), "south.csv", "x,y\n3,1.0\n");
    write(dir.path(), "notes.txt", "not a client");
    let ctx = FedContext::new();
    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let clients = ctx.clients_batch("t").await.unwrap();
    assert_eq!(clients.num_rows(), 2);
    let shown =
        datafusion::arrow::util::pretty::pretty_format_batches(&rows(&ctx, "SHOW CLIENTS t").await)
            .unwrap()
            .to_string();
    assert!(
        shown.contains("north") && shown.contains("south") && !shown.contains("notes"),
        "{shown}"
    );
    let got = rows(&ctx, "SELECT sum(x) AS sx, avg(y) AS ay FROM t").await;
    let want = centralized(
        "x,y\n1,2.5\n2,3.5\n3,1.0\n",
        "",
        "SELECT sum(x) AS sx, avg(y) AS ay FROM t",
    )
    .await;
    assert_same_result("folder", &got, &want, true, 1e-9);
}

#[tokio::test]
async fn subfolders_are_clients_holding_several_files() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "site_a/part1.csv", "k,v\na,1\nb,2\n");
    write(dir.path(), "site_a/part2.csv", "k,v\na,10\n");
    write(dir.path(), "site_b/only.csv", "k,v\nb,100\n");
    let ctx = FedContext::new();
    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let tables = ctx.tables().await.unwrap();
    let t = tables.iter().find(|t| t.name == "t").unwrap();
    assert_eq!(t.clients, Some(2));
    let got = rows(
        &ctx,
        "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k",
    )
    .await;
    let want = centralized(
        "k,v\na,1\nb,2\na,10\nb,100\n",
        "",
        "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k",
    )
    .await;
    assert_same_result("subfolders", &got, &want, true, 1e-9);
}

#[tokio::test]
async fn named_clients_may_mix_csv_and_parquet() {
    let dir = TempDir::new().unwrap();
    write(
        dir.path(),
        "a.csv",
        "region,age,sex,bmi,systolic,smoker,event,visits\nnorth,50,F,22.5,130,0,1,2\n",
    );
    write_parquet(
        &dir.path().join("b.parquet"),
        "region,age,sex,bmi,systolic,smoker,event,visits\nsouth,60,M,,150,1,0,4\nnorth,40,M,30.0,120,0,0,1\n",
        fedsql::frontend::demo::demo_schema(),
    );
    let ctx = FedContext::new();
    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('hospital_a' = '{}', 'hospital_b' = '{}')",
            dir.path().join("a.csv").display(),
            dir.path().join("b.parquet").display()
        ),
    )
    .await
    .unwrap();
    let clients = datafusion::arrow::util::pretty::pretty_format_batches(&[ctx
        .clients_batch("t")
        .await
        .unwrap()])
    .unwrap()
    .to_string();
    assert!(
        clients.contains("CSV") && clients.contains("PARQUET"),
        "{clients}"
    );
    let got = rows(&ctx, "SELECT region, count(*) AS n, avg(bmi) AS b, sum(age) AS a FROM t GROUP BY region ORDER BY region").await;
    let want = centralized(
        "region,age,sex,bmi,systolic,smoker,event,visits\nnorth,50,F,22.5,130,0,1,2\nsouth,60,M,,150,1,0,4\nnorth,40,M,30.0,120,0,0,1\n",
        "",
        "SELECT region, count(*) AS n, avg(bmi) AS b, sum(age) AS a FROM t GROUP BY region ORDER BY region",
    )
    .await;
    assert_same_result("mixed", &got, &want, true, 1e-9);
}

#[tokio::test]
async fn integer_at_one_client_and_float_at_another_widen_to_float() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "a.csv", "x,n\n1,1\n2,2\n");
    write(dir.path(), "b.csv", "x,n\n2.5,3\n");
    let ctx = FedContext::new();
    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let schema = ctx.session().table_provider("t").await.unwrap().schema();
    assert_eq!(schema.field(0).data_type(), &DataType::Float64);
    assert_eq!(schema.field(1).data_type(), &DataType::Int64);
    let got = rows(&ctx, "SELECT sum(x) AS s FROM t").await;
    let want = centralized("x,n\n1,1\n2,2\n2.5,3\n", "", "SELECT sum(x) AS s FROM t").await;
    assert_same_result("widen", &got, &want, true, 1e-9);
}

#[tokio::test]
async fn conflicting_types_name_client_file_and_column_and_a_declared_schema_fixes_it() {
    let dir = TempDir::new().unwrap();
    // c1 is all digits at one client and text at another.
    write(
        dir.path(),
        "a.csv",
        "c1,c2,c9,c11\n101,1,7,1.5\n102,2,8,2.5\n",
    );
    write(dir.path(), "b.csv", "c1,c2,c9,c11\nx7,3,9,0.25\n");
    let ctx = FedContext::new();
    let err = create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'b'") && err.contains("b.csv") && err.contains("column `c1`"),
        "{err}"
    );
    assert!(err.contains("declare the column types"), "{err}");

    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t (c1 VARCHAR NOT NULL, c2 TINYINT, c9 INT UNSIGNED, c11 REAL) STORED AS CSV LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let schema = ctx.session().table_provider("t").await.unwrap().schema();
    let types: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert!(
        matches!(types[0], DataType::Utf8 | DataType::Utf8View),
        "{types:?}"
    );
    assert_eq!(
        types[1..4],
        [DataType::Int8, DataType::UInt32, DataType::Float32]
    );
    assert!(!schema.field(0).is_nullable());
    let sql =
        "SELECT min(c1) AS lo, max(c1) AS hi, sum(c2) AS s2, sum(c9) AS s9, sum(c11) AS s11 FROM t";
    let got = rows(&ctx, sql).await;
    let want = centralized(
        "c1,c2,c9,c11\n101,1,7,1.5\n102,2,8,2.5\nx7,3,9,0.25\n",
        "(c1 VARCHAR NOT NULL, c2 TINYINT, c9 INT UNSIGNED, c11 REAL)",
        sql,
    )
    .await;
    assert_same_result("declared", &got, &want, true, 1e-9);
}

#[tokio::test]
async fn missing_or_extra_columns_name_the_client_and_file() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "a.csv", "x,y\n1,2\n");
    write(dir.path(), "b.csv", "x\n3\n");
    let ctx = FedContext::new();
    let err = create(
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
        err.contains("client 'b'") && err.contains("b.csv") && err.contains("missing column `y`"),
        "{err}"
    );

    write(dir.path(), "b.csv", "x,y,z\n3,4,5\n");
    let err = create(
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
        err.contains("client 'b'") && err.contains("column `z`"),
        "{err}"
    );

    // A declared column list that a client's header does not match.
    let err = create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t (x INT, y INT) LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'b'") && err.contains("declared columns"),
        "{err}"
    );
}

#[tokio::test]
async fn malformed_files_name_client_file_and_line() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "good.csv", "x,y\n1,2\n");
    write(dir.path(), "ragged.csv", "x,y\n1,2\n3,4,5\n");
    let ctx = FedContext::new();
    let err = create(
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
        err.contains("client 'ragged'") && err.contains("ragged.csv") && err.contains("line 3"),
        "{err}"
    );

    let dir = TempDir::new().unwrap();
    write(dir.path(), "good.parquet", "this is not parquet");
    let err = create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE p STORED AS PARQUET LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'good'") && err.contains("not a readable Parquet file"),
        "{err}"
    );

    // A bad value found only when the query runs names the client, the file and the line.
    let dir = TempDir::new().unwrap();
    write(dir.path(), "a.csv", "x,y\n1,2\n");
    write(dir.path(), "b.csv", "x,y\n1,2\n5,six\n");
    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE q (x INT, y INT) LOCATION '{}'",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let err = ctx
        .sql("SELECT sum(y) FROM q")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("client 'b'") && err.contains("b.csv") && err.contains("six"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_locations_and_statements_say_what_to_do() {
    let ctx = FedContext::new();
    let err = create(&ctx, "CREATE FEDERATED TABLE t LOCATION '/no/such/folder'")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("/no/such/folder"), "{err}");
    let empty = TempDir::new().unwrap();
    let err = create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t LOCATION '{}'",
            empty.path().display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("holds no"), "{err}");
    let err = create(&ctx, "CREATE FEDERATED TABLE t STORED AS CSV")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("LOCATION") && err.contains("usage"), "{err}");
    let err = create(
        &ctx,
        "CREATE FEDERATED TABLE t CLIENTS ('a' = '/no/such.csv')",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'a'") && err.contains("/no/such.csv"),
        "{err}"
    );
}

#[tokio::test]
async fn shared_tables_stay_ordinary_and_federated_tables_can_be_dropped() {
    let dir = TempDir::new().unwrap();
    write(dir.path(), "a.csv", "k,v\na,1\n");
    write(dir.path(), "shared.csv", "k,label\na,Alpha\n");
    let ctx = FedContext::new();
    create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('a' = '{}')",
            dir.path().join("a.csv").display()
        ),
    )
    .await
    .unwrap();
    create(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE labels STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
            dir.path().join("shared.csv").display()
        ),
    )
    .await
    .unwrap();
    // Shared tables answer raw queries as usual.
    assert_eq!(rows(&ctx, "SELECT * FROM labels").await[0].num_rows(), 1);
    let joined = rows(
        &ctx,
        "SELECT l.label, sum(t.v) AS s FROM t JOIN labels l ON t.k = l.k GROUP BY l.label",
    )
    .await;
    assert_eq!(joined[0].num_rows(), 1);
    let err = create(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('a' = '{}')",
            dir.path().join("a.csv").display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("already exists"), "{err}");
    rows(&ctx, "DROP TABLE t").await;
    assert!(ctx.tables().await.unwrap().iter().all(|t| t.name != "t"));
}
