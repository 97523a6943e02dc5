//! Refusals where they need code: a refused query runs at no client, and
//! the DataFrame API is refused as SQL is. The refused queries themselves,
//! each with the words of its refusal, are the golden file
//! tests/golden/refusals.slt.

use fedsql::{FedContext, FedError};

#[tokio::test]
async fn refused_before_any_client_runs() {
    // A client whose file is broken in its data rows: running anything at
    // that client fails, so a refusal (not a read error) proves nothing ran.
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.csv"), "x,y\n1,2\n3,4\n").unwrap();
    std::fs::write(dir.path().join("b.csv"), "x,y\n1,2\n3,oops\n").unwrap();
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t (x INT, y INT) STORED AS CSV LOCATION '{}'",
        dir.path().display()
    ))
    .await
    .unwrap();
    let err = ctx
        .sql("SELECT * FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(matches!(err, FedError::Refused { .. }), "{err}");
    let err = ctx
        .sql("SELECT sum(y) FROM t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(err, FedError::Client { .. }),
        "running does reach the broken client: {err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("client 'b'") && message.contains("b.csv") && message.contains("oops"),
        "{message}"
    );
}

#[tokio::test]
async fn the_dataframe_api_is_refused_too() {
    use datafusion::prelude::*;
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let err = ctx
        .table("clinic")
        .await
        .unwrap()
        .filter(col("age").gt(lit(40)))
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("raw rows of federated table `clinic`"),
        "{err}"
    );
}
