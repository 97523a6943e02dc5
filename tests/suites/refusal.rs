//! The refusal suite: every query that would need raw rows (or state that
//! grows with the rows) to leave a client is refused before anything runs,
//! with an error naming the operator or function and, where one exists, the
//! bounded alternative.

use fedsql::{FedContext, FedError};

use crate::support::{Format, demo_rows, federation, split_sizes};

/// (query, words the refusal must contain)
const REFUSED: &[(&str, &[&str])] = &[
    (
        "SELECT * FROM clinic",
        &["`SELECT *` returns raw rows of federated table `clinic`"],
    ),
    (
        "SELECT age, bmi FROM clinic WHERE age > 40",
        &["raw rows of federated table `clinic`"],
    ),
    ("SELECT age FROM clinic ORDER BY age", &["raw rows"]),
    (
        "SELECT age FROM clinic ORDER BY age LIMIT 5",
        &["LIMIT", "clinic"],
    ),
    ("SELECT * FROM clinic LIMIT 1", &["LIMIT"]),
    (
        "SELECT region, row_number() OVER (ORDER BY age) AS r FROM clinic",
        &["window function", "row_number"],
    ),
    (
        "SELECT avg(age) OVER (PARTITION BY region) AS a FROM clinic",
        &["window function"],
    ),
    (
        "SELECT count(*) FROM clinic a JOIN clinic b ON a.age = b.age",
        &["JOIN of federated `clinic` with federated `clinic`"],
    ),
    (
        "SELECT median(age) FROM clinic",
        &["`median`", "approx_median"],
    ),
    (
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age) FROM clinic",
        &["percentile_cont", "approx_percentile_cont"],
    ),
    ("SELECT array_agg(age) FROM clinic", &["`array_agg`"]),
    ("SELECT string_agg(sex, ',') FROM clinic", &["`string_agg`"]),
    (
        "SELECT nth_value(age, 2 ORDER BY age) FROM clinic",
        &["`nth_value`"],
    ),
    (
        "SELECT count(DISTINCT region) FROM clinic",
        &["count(DISTINCT ...)", "approx_distinct"],
    ),
    (
        "SELECT region, sum(DISTINCT age) FROM clinic GROUP BY region",
        &["sum(DISTINCT ...)"],
    ),
    (
        "SELECT count(DISTINCT region), count(DISTINCT sex) FROM clinic",
        &["DISTINCT"],
    ),
    // Smuggled through subqueries, CTEs and set operations.
    (
        "SELECT avg(age) FROM (SELECT age FROM clinic LIMIT 10)",
        &["LIMIT"],
    ),
    (
        "SELECT DISTINCT ON (region) region, age FROM clinic",
        &["DISTINCT ON"],
    ),
    (
        "SELECT * FROM (SELECT region, age FROM clinic) t WHERE age > 40",
        &["raw rows"],
    ),
    (
        "WITH r AS (SELECT age FROM clinic) SELECT age FROM r",
        &["raw rows"],
    ),
    (
        "SELECT count(*) FROM (SELECT median(age) AS m FROM clinic)",
        &["`median`"],
    ),
    (
        "SELECT sum(r) FROM (SELECT row_number() OVER () AS r FROM clinic)",
        &["window function"],
    ),
    (
        "SELECT count(*) FROM weights WHERE region IN (SELECT region FROM clinic)",
        &["subquery returns raw rows"],
    ),
    (
        "SELECT count(*) FROM clinic c WHERE EXISTS (SELECT 1 FROM clinic d WHERE d.age = c.age + 1)",
        &["subquery returns raw rows"],
    ),
    (
        "SELECT age, (SELECT avg(age) FROM clinic) AS m FROM clinic",
        &["raw rows"],
    ),
    ("SELECT age FROM clinic UNION ALL SELECT 1", &["UNION"]),
    (
        "SELECT count(*) FROM (SELECT age FROM clinic UNION ALL SELECT age FROM clinic)",
        &["UNION"],
    ),
    (
        "SELECT w.region, count(c.age) FROM weights w LEFT JOIN clinic c ON c.region = w.region GROUP BY w.region",
        &["LEFT JOIN keeps unmatched rows of the shared side"],
    ),
    (
        "SELECT count(*) FROM weights w FULL JOIN clinic c ON c.region = w.region",
        &["JOIN"],
    ),
];

#[tokio::test]
async fn refused_with_operator_and_alternative() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    f.fed
        .sql("CREATE TABLE weights (region VARCHAR, w DOUBLE) AS VALUES ('north', 1.5), ('south', 0.5)")
        .await
        .unwrap();
    for (sql, words) in REFUSED {
        // Refused by collect, before any client runs.
        let err = match f.fed.sql(sql).await {
            Ok(df) => match df.collect().await {
                Ok(rows) => panic!("not refused: {sql}\ngot {rows:?}"),
                Err(e) => e,
            },
            Err(e) => e,
        };
        assert!(
            matches!(err, FedError::Refused { .. }),
            "{sql}: expected a refusal, got: {err}"
        );
        let message = err.to_string();
        assert!(message.starts_with("refused: "), "{sql}: {message}");
        for word in *words {
            assert!(
                message.contains(word),
                "{sql}: refusal should mention {word:?}:\n{message}"
            );
        }
    }
}

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
    fedsql::coordinator::demo::register_demo_with(&ctx, false).unwrap();
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

#[tokio::test]
async fn aggregates_over_aggregates_and_shared_tables_are_not_refused() {
    let ctx = FedContext::new();
    fedsql::coordinator::demo::register_demo_with(&ctx, false).unwrap();
    for sql in [
        "SELECT 1 AS one",
        "SELECT region, count(*) AS n FROM clinic GROUP BY region ORDER BY n DESC LIMIT 2",
        "SELECT DISTINCT n FROM (SELECT region, count(*) AS n FROM clinic GROUP BY region)",
        "SELECT region, n, rank() OVER (ORDER BY n DESC) AS r FROM (SELECT region, count(*) AS n FROM clinic GROUP BY region)",
    ] {
        ctx.sql(sql)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// `SELECT DISTINCT cols` and `GROUP BY cols` without an aggregate ask what
/// `GROUP BY cols` with `count(*)` asks: all are answered alike (and meet
/// the same disclosure policy), equal to the centralized answer.
#[tokio::test]
async fn distinct_is_answered_as_group_by() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    for sql in [
        "SELECT DISTINCT region, sex FROM clinic ORDER BY region, sex",
        "SELECT region, sex FROM clinic GROUP BY region, sex ORDER BY region, sex",
        "SELECT count(*) AS groups FROM (SELECT DISTINCT region FROM clinic)",
    ] {
        crate::support::assert_consistent(&f, sql).await;
    }
}
