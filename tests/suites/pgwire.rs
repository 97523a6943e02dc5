//! `fedsql serve`: a server started in the test on 127.0.0.1 (port 0),
//! driven by tokio-postgres — simple and extended protocol, types, errors
//! with their SQLSTATE and HINT, the catalog psql reads, notices, cancel
//! and timeout, SCRAM, concurrent sessions, a dropped connection.

use std::sync::Arc;
use std::time::Duration;

use fedsql::FedContext;
use fedsql::frontend::pgwire::{Server, ServerOptions, auth, start};
use futures::{StreamExt, stream};
use tokio::sync::mpsc;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage};

/// A query that runs for minutes over a shared table (nothing federated),
/// for cancel and timeout. Its scan yields between batches, so an aborted
/// statement stops (a filter that drops every row of a cross join would
/// loop inside one poll, and run on after its cancel).
const LONG_QUERY: &str = "SELECT sum(value % 3) FROM generate_series(1, 20000000000)";

async fn demo_server(options: ServerOptions) -> Server {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            ..options
        },
    )
    .await
    .unwrap()
}

fn config(server: &Server, user: &str) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(server.addr().port())
        .user(user)
        .dbname("fedsql");
    config
}

/// A client whose notices are collected.
async fn connect_with_notices(
    config: &tokio_postgres::Config,
) -> Result<(Client, mpsc::UnboundedReceiver<String>), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notice(notice) = message {
                let _ = tx.send(notice.message().to_string());
            }
        }
    });
    Ok((client, rx))
}

async fn connect(server: &Server) -> Client {
    connect_with_notices(&config(server, "analyst"))
        .await
        .unwrap()
        .0
}

/// The rows of a simple query, as text.
pub(crate) async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The same query in-process, as text (arrow's display).
async fn in_process_rows(sql: &str) -> Vec<Vec<String>> {
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

fn db_error(e: &tokio_postgres::Error) -> &tokio_postgres::error::DbError {
    e.as_db_error()
        .unwrap_or_else(|| panic!("not a database error: {e:?}"))
}

#[tokio::test]
async fn simple_protocol_answers_as_in_process() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let sql = "SELECT region, count(*) AS n, sum(systolic) AS s FROM clinic WHERE age >= 40 GROUP BY region ORDER BY region";
    let wire = simple_rows(&client, sql).await;
    let local = in_process_rows(sql).await;
    assert_eq!(wire.len(), 4);
    let wire: Vec<Vec<String>> = wire
        .into_iter()
        .map(|r| r.into_iter().map(Option::unwrap).collect())
        .collect();
    assert_eq!(wire, local);
    // Several statements in one simple query; empty statements are fine.
    let messages = client.simple_query("SELECT 1; ; SELECT 2").await.unwrap();
    let rows = messages
        .iter()
        .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 2);
}

#[tokio::test]
async fn extended_protocol_with_parameters() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let statement = client
        .prepare("SELECT count(*) AS n, avg(age) AS mean_age FROM clinic WHERE age >= $1 AND region = $2")
        .await
        .unwrap();
    assert_eq!(statement.params(), &[Type::INT8, Type::TEXT]);
    assert_eq!(statement.columns()[0].type_(), &Type::INT8);
    assert_eq!(statement.columns()[1].type_(), &Type::FLOAT8);
    for (age, region) in [(40i64, "north"), (60, "south")] {
        let row = client
            .query_one(&statement, &[&age, &region])
            .await
            .unwrap();
        let local = in_process_rows(&format!(
            "SELECT count(*), avg(age) FROM clinic WHERE age >= {age} AND region = '{region}'"
        ))
        .await;
        assert_eq!(row.get::<_, i64>(0).to_string(), local[0][0]);
        let mean: f64 = row.get(1);
        assert!((mean - local[0][1].parse::<f64>().unwrap()).abs() < 1e-9);
    }
    // A statement without parameters, through the extended protocol.
    let rows = client
        .query(
            "SELECT region FROM clinic GROUP BY region ORDER BY region",
            &[],
        )
        .await
        .unwrap();
    let regions: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(regions, ["east", "north", "south", "west"]);
}

#[tokio::test]
async fn every_output_type_has_its_oid() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let sql = "SELECT count(*) AS n, CAST(count(*) AS INT) AS n32, avg(bmi) AS mean_bmi, \
               CAST(avg(bmi) AS REAL) AS mean32, 'text' AS label, count(*) > 0 AS any_rows, \
               DATE '2024-03-01' AS day, TIMESTAMP '2024-03-01 12:30:00' AS at, \
               CAST(1.25 AS DECIMAL(10, 2)) AS price, \
               covariance_matrix(age, bmi) AS cov \
               FROM clinic";
    let statement = client.prepare(sql).await.unwrap();
    let types: Vec<&Type> = statement.columns().iter().map(|c| c.type_()).collect();
    assert_eq!(
        &types[..9],
        &[
            &Type::INT8,
            &Type::INT4,
            &Type::FLOAT8,
            &Type::FLOAT4,
            &Type::TEXT,
            &Type::BOOL,
            &Type::DATE,
            &Type::TIMESTAMP,
            &Type::NUMERIC
        ]
    );
    // The labeled matrix (a struct of nested lists) is JSON text, OID 114.
    assert_eq!(types[9], &Type::JSON);
    assert_eq!(types[9].oid(), 114);
    let row = client.query_one(&statement, &[]).await.unwrap();
    assert!(row.get::<_, i64>(0) > 0);
    assert_eq!(row.get::<_, String>(4), "text");
    assert!(row.get::<_, bool>(5));
    assert_eq!(
        row.get::<_, chrono::NaiveDate>(6),
        chrono::NaiveDate::from_ymd_opt(2024, 3, 1).unwrap()
    );
    let cov: serde_json::Value = row.get(9);
    assert!(cov.is_object(), "{cov}");
    // Text format (simple protocol) of the same values.
    let text = simple_rows(&client, sql).await;
    assert_eq!(text[0][4].as_deref(), Some("text"));
    assert_eq!(text[0][5].as_deref(), Some("t"));
    assert_eq!(text[0][6].as_deref(), Some("2024-03-01"));
    assert!(text[0][9].as_deref().unwrap().starts_with('{'));
    // A flat list is a PostgreSQL array.
    let list = client
        .query_one("SELECT make_array(1.5, 2.5) AS v", &[])
        .await
        .unwrap();
    assert_eq!(list.get::<_, Vec<f64>>(0), vec![1.5, 2.5]);
}

#[tokio::test]
async fn errors_keep_their_sqlstate_and_hint() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let e = client
        .simple_query("SELECT * FROM clinic")
        .await
        .unwrap_err();
    let db = db_error(&e);
    assert_eq!(db.code(), &SqlState::INSUFFICIENT_PRIVILEGE);
    assert!(db.message().contains("raw rows"), "{}", db.message());
    assert!(db.hint().unwrap().contains("aggregate"), "{:?}", db.hint());
    let e = client
        .query("SELECT median(age) FROM clinic WHERE age > $1", &[&1i64])
        .await
        .unwrap_err();
    let db = db_error(&e);
    assert_eq!(db.code(), &SqlState::INSUFFICIENT_PRIVILEGE);
    assert!(db.hint().unwrap().contains("approx_median"));
    let e = client
        .simple_query("SELECT count(*) FROM nosuch")
        .await
        .unwrap_err();
    assert_eq!(db_error(&e).code(), &SqlState::UNDEFINED_TABLE);
    let e = client.simple_query("SELEC 1").await.unwrap_err();
    assert_eq!(db_error(&e).code(), &SqlState::SYNTAX_ERROR);
    let e = client
        .simple_query("SELECT nosuch_fn(1)")
        .await
        .unwrap_err();
    assert_eq!(db_error(&e).code(), &SqlState::UNDEFINED_FUNCTION);
    // The connection goes on after errors.
    assert_eq!(
        simple_rows(&client, "SELECT 1").await,
        [[Some("1".to_string())]]
    );
}

#[tokio::test]
async fn ddl_needs_allow_ddl() {
    let dir = tempfile::tempdir().unwrap();
    let location = format!("{}/", dir.path().display());
    for (client, rows) in [("a", "1,2\n3,4\n"), ("b", "5,6\n")] {
        std::fs::write(
            dir.path().join(format!("{client}.csv")),
            format!("x,y\n{rows}"),
        )
        .unwrap();
    }
    let create = format!("CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{location}'");
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let e = client.simple_query(&create).await.unwrap_err();
    let db = db_error(&e);
    assert_eq!(db.code(), &SqlState::INSUFFICIENT_PRIVILEGE);
    assert!(db.message().contains("--allow-ddl"));
    let e = client
        .simple_query("CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'")
        .await
        .unwrap_err();
    assert_eq!(db_error(&e).code(), &SqlState::INSUFFICIENT_PRIVILEGE);

    let server = demo_server(ServerOptions {
        allow_ddl: true,
        ..ServerOptions::default()
    })
    .await;
    let first = connect(&server).await;
    first.simple_query(&create).await.unwrap();
    // The catalog is the server's: another connection sees the table.
    let second = connect(&server).await;
    assert_eq!(
        simple_rows(&second, "SELECT sum(x) AS sx, count(*) AS n FROM t").await,
        [[Some("9".to_string()), Some("3".to_string())]]
    );
}

#[tokio::test]
async fn catalog_queries_of_psql_and_drivers() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let version = simple_rows(&client, "SELECT version()").await;
    assert!(
        version[0][0]
            .as_deref()
            .unwrap()
            .starts_with("PostgreSQL 16.")
    );
    for sql in [
        "BEGIN",
        "SET datestyle TO 'ISO, MDY'",
        "SET extra_float_digits = 3",
        "SET application_name = 'test'",
        "COMMIT",
        "ROLLBACK",
    ] {
        client.simple_query(sql).await.unwrap();
    }
    assert_eq!(
        simple_rows(&client, "SHOW datestyle").await,
        [[Some("ISO, MDY".to_string())]]
    );
    // psql's \dt
    let dt = simple_rows(
        &client,
        "SELECT n.nspname as \"Schema\", c.relname as \"Name\", \
         CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence' WHEN 't' THEN 'TOAST table' WHEN 'f' THEN 'foreign table' WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index' END as \"Type\", \
         pg_catalog.pg_get_userbyid(c.relowner) as \"Owner\" \
         FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam \
         WHERE c.relkind IN ('r','p','') AND n.nspname <> 'pg_catalog' AND n.nspname !~ '^pg_toast' AND n.nspname <> 'information_schema' \
         AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 1,2;",
    )
    .await;
    assert!(
        dt.iter().any(|r| r[1].as_deref() == Some("clinic")),
        "{dt:?}"
    );
    // psql's \d clinic: find the table, then its columns.
    let found = simple_rows(
        &client,
        "SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c \
         LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relname OPERATOR(pg_catalog.~) '^(clinic)$' COLLATE pg_catalog.default \
         AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 2, 3;",
    )
    .await;
    assert_eq!(found.len(), 1, "{found:?}");
    let oid = found[0][0].clone().unwrap();
    let columns = simple_rows(
        &client,
        &format!(
            "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_catalog.pg_attribute a \
             WHERE a.attrelid = '{oid}' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum;"
        ),
    )
    .await;
    let names: Vec<&str> = columns.iter().map(|r| r[0].as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "region", "age", "sex", "bmi", "systolic", "smoker", "event", "visits",
            // The virtual column of client names, usable like any other.
            "_client"
        ]
    );
    assert_eq!(columns[1][1].as_deref(), Some("bigint"));
    // R's dbListTables (RPostgres) and information_schema.
    let tables = simple_rows(
        &client,
        "SELECT cl.relname AS name FROM pg_class AS cl JOIN pg_namespace AS n ON cl.relnamespace = n.oid \
         WHERE (n.nspname = ANY (current_schemas(true))) AND (n.nspname <> 'pg_catalog') \
         AND (cl.relkind IN ('r', 'p', 'f', 'v', 'm')) ORDER BY name",
    )
    .await;
    assert!(
        tables.iter().any(|r| r[0].as_deref() == Some("clinic")),
        "{tables:?}"
    );
    let tables = simple_rows(
        &client,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .await;
    assert_eq!(tables, [[Some("clinic".to_string())]]);
}

/// psycopg's `TypeInfo.fetch` (SQLAlchemy's psycopg dialect asks it for
/// `hstore` when it connects) looks a type up with `to_regtype`.
#[tokio::test]
async fn to_regtype_answers_psycopg_type_info() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    assert_eq!(
        simple_rows(&client, "SELECT to_regtype('int4'), to_regtype('hstore')").await,
        [[Some("23".to_string()), None]]
    );
    let type_info = "SELECT typname AS name, oid, typarray AS array_oid, oid::regtype::text AS regtype, \
                     typdelim AS delimiter FROM pg_type t WHERE t.oid = to_regtype($1) ORDER BY t.oid";
    let rows = client.query(type_info, &[&"hstore"]).await.unwrap();
    assert!(rows.is_empty());
    let rows = client.query(type_info, &[&"text"]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>("name"), "text");
}

#[tokio::test]
async fn notices_are_notices_not_rows() {
    let server = demo_server(ServerOptions::default()).await;
    let (client, mut notices) = connect_with_notices(&config(&server, "analyst"))
        .await
        .unwrap();
    let rows = simple_rows(
        &client,
        "SELECT term, estimate FROM glm('clinic', 'event ~ age + smoker', 'binomial')",
    )
    .await;
    let terms: Vec<&str> = rows.iter().map(|r| r[0].as_deref().unwrap()).collect();
    assert_eq!(terms, ["(Intercept)", "age", "smoker"]);
    let notice = notices.recv().await.unwrap();
    assert!(notice.contains("deviance"), "{notice}");
}

// A long statement must not starve the other tasks of the test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_statement() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    let token = client.cancel_token();
    let query = tokio::spawn(async move {
        let result = client.simple_query(LONG_QUERY).await;
        (client, result)
    });
    // A cancel request that arrives before the statement starts cancels
    // nothing: send them until the statement ends.
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            token.cancel_query(NoTls).await.unwrap();
            if query.is_finished() {
                break query.await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the statement was not cancelled");
    let (client, result) = result;
    assert_eq!(
        db_error(&result.unwrap_err()).code(),
        &SqlState::QUERY_CANCELED
    );
    // The last cancel request may still be on its way (the client does not
    // wait for the server to act on it) and, as in PostgreSQL, cancel the
    // next statement; after that the connection answers.
    let mut answered = None;
    for _ in 0..20 {
        match client.simple_query("SELECT 1").await {
            Ok(messages) => {
                answered = Some(messages);
                break;
            }
            Err(e) => {
                assert_eq!(db_error(&e).code(), &SqlState::QUERY_CANCELED);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert!(
        answered.is_some_and(|m| m
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("1")))),
        "the connection did not answer after the cancelled statement"
    );
}

// A long statement must not starve the other tasks of the test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_and_sessions_of_their_own() {
    let server = demo_server(ServerOptions::default()).await;
    let a = connect(&server).await;
    let b = connect(&server).await;
    a.simple_query("SET statement_timeout = 200").await.unwrap();
    a.simple_query("SET datafusion.execution.batch_size = 1000")
        .await
        .unwrap();
    let (timed_out, counted) = tokio::join!(
        a.simple_query(LONG_QUERY),
        b.query_one("SELECT count(*) FROM clinic", &[])
    );
    assert_eq!(
        db_error(&timed_out.unwrap_err()).code(),
        &SqlState::QUERY_CANCELED
    );
    assert!(counted.unwrap().get::<_, i64>(0) > 0);
    assert_eq!(
        simple_rows(&a, "SHOW statement_timeout").await,
        [[Some("200ms".to_string())]]
    );
    assert_eq!(
        simple_rows(&b, "SHOW statement_timeout").await,
        [[Some("0".to_string())]]
    );
    let batch_size = "SELECT value FROM information_schema.df_settings WHERE name = 'datafusion.execution.batch_size'";
    assert_eq!(
        simple_rows(&a, batch_size).await,
        [[Some("1000".to_string())]]
    );
    assert_eq!(
        simple_rows(&b, batch_size).await,
        [[Some("8192".to_string())]]
    );
}

// A long statement must not starve the other tasks of the test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_query_leaves_the_server_answering() {
    let server = demo_server(ServerOptions::default()).await;
    let config = config(&server, "analyst");
    let (client, connection) = config.connect(NoTls).await.unwrap();
    let connection = tokio::spawn(connection);
    // The server ends the abandoned statement at its timeout.
    client
        .simple_query("SET statement_timeout = 2000")
        .await
        .unwrap();
    let mut query = tokio::spawn(async move { client.simple_query(LONG_QUERY).await });
    // Still running after a while: the statement is at the server.
    if let Ok(ended) = tokio::time::timeout(Duration::from_millis(300), &mut query).await {
        panic!("the long statement ended at once: {ended:?}");
    }
    connection.abort();
    query.abort();
    let other = connect(&server).await;
    assert_eq!(
        simple_rows(&other, "SELECT count(*) > 0 FROM clinic").await,
        [[Some("t".to_string())]]
    );
    // Garbage instead of a start-up message ends only that connection.
    use tokio::io::AsyncWriteExt;
    let mut raw = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    raw.write_all(b"\x00\x00\x00\x08garbage!").await.unwrap();
    drop(raw);
    let again = connect(&server).await;
    assert_eq!(
        simple_rows(&again, "SELECT 2").await,
        [[Some("2".to_string())]]
    );
}

#[tokio::test]
async fn scram_login() {
    let dir = tempfile::tempdir().unwrap();
    let users_file = dir.path().join("users.toml");
    auth::set_password(&users_file, "alice", "correct horse").unwrap();
    let text = std::fs::read_to_string(&users_file).unwrap();
    assert!(text.contains("alice = \"SCRAM-SHA-256$4096:"), "{text}");
    assert!(!text.contains("correct horse"));
    let users = auth::Users::load(&users_file).unwrap();
    let server = demo_server(ServerOptions {
        users: Some(Arc::new(users)),
        ..ServerOptions::default()
    })
    .await;
    let mut good = config(&server, "alice");
    good.password("correct horse");
    let (client, _) = connect_with_notices(&good).await.unwrap();
    assert_eq!(
        simple_rows(&client, "SELECT 1").await,
        [[Some("1".to_string())]]
    );
    let mut wrong = config(&server, "alice");
    wrong.password("wrong");
    let e = connect_with_notices(&wrong).await.err().unwrap();
    assert_eq!(db_error(&e).code(), &SqlState::INVALID_PASSWORD);
    let mut unknown = config(&server, "mallory");
    unknown.password("correct horse");
    let e = connect_with_notices(&unknown).await.err().unwrap();
    assert_eq!(db_error(&e).code(), &SqlState::INVALID_PASSWORD);
    assert!(
        connect_with_notices(&config(&server, "alice"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn without_users_only_loopback() {
    let ctx = FedContext::new();
    let result = start(
        ctx,
        ServerOptions {
            listen: "0.0.0.0:0".into(),
            ..ServerOptions::default()
        },
    )
    .await;
    let e = result.err().expect("a server without users on 0.0.0.0");
    assert!(e.to_string().contains("loopback"), "{e}");
}

/// A users file with these users and passwords (the password is the name).
fn users_of(dir: &std::path::Path, names: &[&str]) -> Arc<auth::Users> {
    let file = dir.join("users.toml");
    for name in names {
        auth::set_password(&file, name, name).unwrap();
    }
    Arc::new(auth::Users::load(&file).unwrap())
}

/// A server over `t` (clients a and b, dp_budget 1) whose ledgers are
/// kept in `ledgers`, with the users of `users`.
async fn dp_server(
    data: &std::path::Path,
    ledgers: &std::path::Path,
    users: Arc<auth::Users>,
) -> Server {
    let ctx = FedContext::new();
    ctx.keep_dp_ledgers_in(ledgers).unwrap();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}/' OPTIONS ('dp_budget' '1')",
        data.display()
    ))
    .await
    .unwrap();
    start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            users: Some(users),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Through the endpoint an in-process table's privacy budget is kept per
/// authenticated user: one user's spending leaves another's budget whole,
/// a user who reconnects finds what they spent, and so does a user of the
/// restarted server (the ledgers are files).
#[tokio::test]
async fn privacy_budgets_are_kept_per_connection_user() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.csv"), "x\n1\n2\n3\n").unwrap();
    std::fs::write(dir.path().join("b.csv"), "x\n4\n5\n").unwrap();
    let ledgers = tempfile::TempDir::new().unwrap();
    let users = tempfile::TempDir::new().unwrap();
    let users = users_of(users.path(), &["alice", "bob"]);
    let server = dp_server(dir.path(), ledgers.path(), Arc::clone(&users)).await;
    let user = |server: &Server, name: &str| {
        let mut config = config(server, name);
        config.password(name);
        config
    };
    let (alice, _) = connect_with_notices(&user(&server, "alice")).await.unwrap();
    for _ in 0..2 {
        simple_rows(&alice, "SELECT dp_count(*, 0.4) FROM t").await;
    }
    let e = alice
        .simple_query("SELECT dp_count(*, 0.4) FROM t")
        .await
        .unwrap_err();
    let text = format!("{e:?}");
    assert!(text.contains("dp_budget"), "{text}");
    // Bob's budget is his own.
    let (bob, _) = connect_with_notices(&user(&server, "bob")).await.unwrap();
    simple_rows(&bob, "SELECT dp_count(*, 0.9) FROM t").await;
    // Alice again, on a new connection, through the extended protocol.
    let (alice, _) = connect_with_notices(&user(&server, "alice")).await.unwrap();
    let e = alice
        .query("SELECT dp_count(*, 0.3) FROM t", &[])
        .await
        .unwrap_err();
    let text = format!("{e:?}");
    assert!(text.contains("dp_budget"), "{text}");
    alice
        .query("SELECT dp_count(*, 0.2) FROM t", &[])
        .await
        .unwrap();

    // A restarted server reads what each user spent.
    drop((alice, bob, server));
    let mut files: Vec<String> = std::fs::read_dir(ledgers.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["t.a.toml", "t.b.toml"]);
    let server = dp_server(dir.path(), ledgers.path(), users).await;
    let (alice, _) = connect_with_notices(&user(&server, "alice")).await.unwrap();
    let e = alice
        .simple_query("SELECT dp_count(*, 0.1) FROM t")
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("dp_budget"), "{e:?}");
    let (bob, _) = connect_with_notices(&user(&server, "bob")).await.unwrap();
    let e = bob
        .simple_query("SELECT dp_count(*, 0.2) FROM t")
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("dp_budget"), "{e:?}");
    simple_rows(&bob, "SELECT dp_count(*, 0.1) FROM t").await;
}

/// Without --users a connection may call itself anyone, and every name
/// would bring a fresh budget: a table with a DP budget (or require_dp)
/// is not served at all.
#[tokio::test]
async fn dp_tables_are_not_served_without_users() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.csv"), "x\n1\n2\n3\n").unwrap();
    for option in ["'dp_budget' '1'", "'require_dp' 'true'"] {
        let ctx = FedContext::new();
        ctx.sql(&format!(
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}/' OPTIONS ({option})",
            dir.path().display()
        ))
        .await
        .unwrap();
        let e = start(
            ctx,
            ServerOptions {
                listen: "127.0.0.1:0".into(),
                ..ServerOptions::default()
            },
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("{option}: served without --users"));
        let message = e.to_string();
        assert!(
            message.contains("`t`") && message.contains("--users"),
            "{message}"
        );
    }
    // The demo table declares DP domains but no budget: it is served.
    demo_server(ServerOptions::default()).await;
}

/// The refusal of a statement by the gate of a server without --allow-ddl.
fn assert_refused(e: &tokio_postgres::Error, sql: &str, what: &str) {
    let db = db_error(e);
    assert_eq!(
        db.code(),
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "{sql}: {db:?}"
    );
    assert!(
        db.message().contains(&format!("`{what}`")) && db.message().contains("--allow-ddl"),
        "{sql}: {}",
        db.message()
    );
}

/// The review's bypasses of the DDL gate, each refused by a server without
/// --allow-ddl through the simple and the extended protocol, with nothing
/// written, read, dropped or contacted.
#[tokio::test]
async fn without_allow_ddl_no_statement_writes_defines_or_names_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "s3cret-token\n").unwrap();
    std::fs::write(dir.path().join("shared.csv"), "k,v\n1,2\n").unwrap();
    // Where a federated table's worker would be: the attacker's listener.
    let attacker = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    attacker.set_nonblocking(true).unwrap();
    let attacker_port = attacker.local_addr().unwrap().port();

    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    ctx.sql(&format!(
        "CREATE EXTERNAL TABLE shared STORED AS CSV LOCATION '{root}/shared.csv' OPTIONS ('format.has_header' 'true')"
    ))
    .await
    .unwrap();
    let server = start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let client = connect(&server).await;
    let attacks = [
        (
            format!("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{root}/sub/../explain.csv'"),
            "COPY",
        ),
        (
            format!("EXPLAIN COPY shared TO '{root}/explain2.csv'"),
            "COPY",
        ),
        (
            format!("/*!COPY*/ (SELECT 1 AS x) TO '{root}/hint.csv'"),
            "COPY",
        ),
        (
            format!("COPY (SELECT count(*) AS n FROM clinic) TO '{root}/sub/../../escaped.csv'"),
            "COPY",
        ),
        ("COPY shared TO '../fedsql-gate-escaped.csv'".into(), "COPY"),
        ("DROP TABLE clinic".into(), "DROP TABLE"),
        ("/*!DROP TABLE*/ shared".into(), "DROP TABLE"),
        ("INSERT INTO shared VALUES (3, 4)".into(), "INSERT"),
        (
            "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'".into(),
            "CREATE EXTERNAL TABLE",
        ),
        (
            "CREATE VIEW leak AS SELECT * FROM shared".into(),
            "CREATE VIEW",
        ),
        (
            format!(
                "CREATE FEDERATED TABLE stolen CLIENTS ('a' = 'grpc://127.0.0.1:{attacker_port}/t') \
                 OPTIONS ('token_file' '{root}/secret.txt')"
            ),
            "CREATE FEDERATED TABLE",
        ),
        (
            format!("CREATE FEDERATED TABLE mine STORED AS CSV LOCATION '{root}/'"),
            "CREATE FEDERATED TABLE",
        ),
        (
            format!("EXPLAIN ANALYZE FEDERATED CREATE FEDERATED TABLE mine LOCATION '{root}/'"),
            "CREATE FEDERATED TABLE",
        ),
        (
            "SET datafusion.runtime.temp_directory = '/tmp/elsewhere'".into(),
            "SET datafusion.runtime.temp_directory",
        ),
    ];
    for (sql, what) in &attacks {
        let e = client.simple_query(sql).await.unwrap_err();
        assert_refused(&e, sql, what);
        // The extended protocol refuses it at Parse (a SET, which runs
        // when executed, at Execute).
        let e = match client.prepare(sql).await {
            Err(e) => e,
            Ok(statement) if sql.starts_with("SET") => {
                client.execute(&statement, &[]).await.unwrap_err()
            }
            Ok(_) => panic!("{sql}: prepared"),
        };
        assert_refused(&e, sql, what);
    }
    // A dialect whose parser reads comment hints changes nothing: the gate
    // reads what that parser reads.
    client
        .simple_query("SET datafusion.sql_parser.dialect = 'MySQL'")
        .await
        .unwrap();
    let sql = format!("/*!COPY*/ (SELECT 1 AS x) TO '{root}/mysql.csv'");
    assert_refused(&client.simple_query(&sql).await.unwrap_err(), &sql, "COPY");
    client
        .simple_query("SET datafusion.sql_parser.dialect = 'generic'")
        .await
        .unwrap();
    // A quote the PostgreSQL tokenizer reads as unbalanced (the old gate
    // let through what it could not tokenize) is read by the generic
    // dialect, which DataFusion cannot plan: an error, nothing runs.
    // A whole statement in a comment hint does not read to its end.
    for sql in [
        format!("COPY (SELECT q'[it's]' AS x) TO '{root}/quote.csv'"),
        format!("/*!COPY (SELECT 1 AS x) TO '{root}/hint2.csv' */"),
    ] {
        client.simple_query(&sql).await.unwrap_err();
        client.prepare(&sql).await.unwrap_err();
    }
    // Unbalanced in every reading: a syntax error, never a pass.
    for sql in ["SELECT q'[abc' FROM clinic", "COPY (SELECT 1) TO 'x.csv"] {
        let e = client.simple_query(sql).await.unwrap_err();
        assert_eq!(db_error(&e).code(), &SqlState::SYNTAX_ERROR, "{sql}: {e:?}");
    }

    // Nothing was written beside the given files, nothing above them.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["secret.txt", "shared.csv", "sub"]);
    assert_eq!(
        std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
        0
    );
    assert!(!dir.path().parent().unwrap().join("escaped.csv").exists());
    assert!(!std::path::Path::new("../fedsql-gate-escaped.csv").exists());
    // Nobody called the attacker's address.
    assert_eq!(
        attacker.accept().err().map(|e| e.kind()),
        Some(std::io::ErrorKind::WouldBlock)
    );
    // Nothing was dropped or defined: another connection sees the same tables.
    let other = connect(&server).await;
    assert_eq!(
        simple_rows(&other, "SELECT count(*) FROM shared").await,
        [[Some("1".to_string())]]
    );
    let counts = simple_rows(&other, "SELECT count(*) AS n FROM clinic").await;
    assert_eq!(counts.len(), 1);
    for table in ["p", "leak", "stolen", "mine"] {
        let e = other
            .simple_query(&format!("SELECT count(*) FROM {table}"))
            .await
            .unwrap_err();
        assert_eq!(db_error(&e).code(), &SqlState::UNDEFINED_TABLE, "{table}");
    }
}

/// What analysts and their tools send still runs on a server without
/// --allow-ddl: queries, EXPLAIN, SHOW, settings, transactions.
#[tokio::test]
async fn without_allow_ddl_questions_and_settings_still_run() {
    let server = demo_server(ServerOptions::default()).await;
    let client = connect(&server).await;
    for sql in [
        "BEGIN",
        "SET datestyle TO 'ISO, MDY'",
        "SET extra_float_digits = 3",
        "SET statement_timeout = '30s'",
        "SET datafusion.execution.batch_size = 4096",
        "SET fedsql.dp_epsilon = 0.5",
        "SELECT count(*) AS n FROM clinic",
        "EXPLAIN SELECT count(*) FROM clinic",
        "EXPLAIN FEDERATED SELECT avg(age) FROM clinic",
        "SHOW TABLES",
        "SHOW CLIENTS clinic",
        "SHOW datafusion.execution.batch_size",
        "COMMIT",
    ] {
        client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    assert_eq!(
        simple_rows(&client, "SHOW datestyle").await,
        [[Some("ISO, MDY".to_string())]]
    );
    let n = client
        .query_one("SELECT count(*) AS n FROM clinic WHERE age > $1", &[&40i64])
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert!(n > 0);
}

/// With --allow-ddl, connections copy, create and drop as before.
#[tokio::test]
async fn with_allow_ddl_copy_create_and_drop_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let server = demo_server(ServerOptions {
        allow_ddl: true,
        ..ServerOptions::default()
    })
    .await;
    let client = connect(&server).await;
    client
        .simple_query(&format!(
            "COPY (SELECT count(*) AS n FROM clinic) TO '{root}/n.csv' STORED AS CSV OPTIONS ('format.has_header' 'true')"
        ))
        .await
        .unwrap();
    let written = std::fs::read_to_string(dir.path().join("n.csv")).unwrap();
    assert!(written.starts_with("n\n"), "{written}");
    client
        .simple_query(&format!(
            "CREATE EXTERNAL TABLE n STORED AS CSV LOCATION '{root}/n.csv' OPTIONS ('format.has_header' 'true')"
        ))
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&client, "SELECT count(*) FROM n").await,
        [[Some("1".to_string())]]
    );
    client.simple_query("DROP TABLE n").await.unwrap();
    let e = client
        .simple_query("SELECT count(*) FROM n")
        .await
        .unwrap_err();
    assert_eq!(db_error(&e).code(), &SqlState::UNDEFINED_TABLE);
}

/// The server's side of a SCRAM exchange up to its server-first message,
/// spoken by hand (tokio-postgres hides the salt): the salt and iteration
/// count the server offers `user`.
fn scram_salt(addr: std::net::SocketAddr, user: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut body = 196608i32.to_be_bytes().to_vec();
    for part in ["user", user, "database", "fedsql"] {
        body.extend(part.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    startup.extend(body);
    socket.write_all(&startup).unwrap();
    let read_message = |socket: &mut std::net::TcpStream| -> (u8, Vec<u8>) {
        let mut head = [0u8; 5];
        socket.read_exact(&mut head).unwrap();
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        socket.read_exact(&mut body).unwrap();
        (head[0], body)
    };
    let (kind, body) = read_message(&mut socket);
    assert_eq!((kind, &body[..4]), (b'R', &10i32.to_be_bytes()[..]), "SASL");
    let first = b"n,,n=,r=abcdefghijklmnop";
    let mut body = b"SCRAM-SHA-256\0".to_vec();
    body.extend((first.len() as i32).to_be_bytes());
    body.extend(first);
    let mut message = vec![b'p'];
    message.extend(((body.len() + 4) as i32).to_be_bytes());
    message.extend(body);
    socket.write_all(&message).unwrap();
    let (kind, body) = read_message(&mut socket);
    assert_eq!(
        (kind, &body[..4]),
        (b'R', &11i32.to_be_bytes()[..]),
        "SASL continue"
    );
    let server_first = String::from_utf8(body[4..].to_vec()).unwrap();
    let attr = |name: &str| {
        server_first
            .split(',')
            .find_map(|a| a.strip_prefix(name))
            .unwrap()
            .to_string()
    };
    (attr("s="), attr("i="))
}

/// An unknown user is offered the same salt on every attempt, shaped like
/// a known user's, so that the exchange does not tell who exists.
#[tokio::test]
async fn scram_offers_unknown_users_a_stable_salt() {
    let dir = tempfile::tempdir().unwrap();
    let server = demo_server(ServerOptions {
        users: Some(users_of(dir.path(), &["alice"])),
        ..ServerOptions::default()
    })
    .await;
    let addr = server.addr();
    let salts = tokio::task::spawn_blocking(move || {
        [
            scram_salt(addr, "mallory"),
            scram_salt(addr, "mallory"),
            scram_salt(addr, "alice"),
            scram_salt(addr, "alice"),
            scram_salt(addr, "trudy"),
        ]
    })
    .await
    .unwrap();
    let [mallory, again, alice, alice_again, trudy] = salts;
    assert_eq!(mallory, again);
    assert_eq!(alice, alice_again);
    assert_ne!(mallory.0, alice.0);
    assert_ne!(mallory.0, trudy.0);
    assert_eq!(mallory.1, alice.1);
    assert_eq!(mallory.0.len(), alice.0.len());
}

/// `SHOW PRIVACY BUDGET t` through a connection: (client, spent) per client.
async fn spent_through(client: &Client) -> Vec<(String, f64)> {
    simple_rows(client, "SHOW PRIVACY BUDGET t")
        .await
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap(),
                r[2].as_ref().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// Through `serve --users`, each pg user queries the workers with their
/// own token (`[users.NAME] token_file`), so each worker debits each
/// user's own budget: alice spends hers to nothing and bob still gets
/// answers; the coordinator's table token is not debited at all; and a
/// user without a token of their own is refused the table, not let
/// through on the table's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_spends_their_own_budget_at_the_workers() {
    let dir = tempfile::TempDir::new().unwrap();
    let files = vec![dir.path().join("a.csv"), dir.path().join("b.csv")];
    std::fs::write(&files[0], "x\n1\n2\n3\n4\n5\n6\n").unwrap();
    std::fs::write(&files[1], "x\n7\n8\n9\n10\n11\n").unwrap();
    let workers = crate::remote::Workers::start_with(&files, "t", |mut config| {
        config.policy = Some(fedsql::site::release::policy::DisclosurePolicy::default());
        config.dp.set("dp_budget", "1").unwrap();
        config.named_tokens = vec![
            ("alice".into(), "alice-token".into()),
            ("bob".into(), "bob-token".into()),
        ];
        config
    })
    .await;
    let ctx = FedContext::new();
    // Created with the table's token (the coordinator's).
    ctx.sql(&workers.create("t")).await.unwrap();

    let users_dir = tempfile::TempDir::new().unwrap();
    std::fs::write(users_dir.path().join("alice.token"), "alice-token\n").unwrap();
    std::fs::write(users_dir.path().join("bob.token"), "bob-token\n").unwrap();
    let verifier = |name: &str| auth::Verifier::new(name).unwrap().encode();
    let users_file = users_dir.path().join("users.toml");
    std::fs::write(
        &users_file,
        format!(
            "[users]\ncarol = \"{}\"\n\n[users.alice]\nverifier = \"{}\"\ntoken_file = \"alice.token\"\n\n[users.bob]\nverifier = \"{}\"\ntoken_file = \"{}\"\n",
            verifier("carol"),
            verifier("alice"),
            verifier("bob"),
            users_dir.path().join("bob.token").display()
        ),
    )
    .unwrap();
    let users = Arc::new(auth::Users::load(&users_file).unwrap());
    let server = start(
        ctx.clone(),
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            users: Some(users),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let login = |name: &str| {
        let mut config = config(&server, name);
        config.password(name);
        config
    };
    let (alice, _) = connect_with_notices(&login("alice")).await.unwrap();
    for _ in 0..2 {
        simple_rows(&alice, "SELECT dp_count(*, 0.5) FROM t").await;
    }
    let e = alice
        .simple_query("SELECT dp_count(*, 0.1) FROM t")
        .await
        .unwrap_err();
    let text = format!("{e:?}");
    assert!(text.contains("budget"), "{text}");
    assert_eq!(
        spent_through(&alice).await,
        [("h0".to_string(), 1.0), ("h1".into(), 1.0)]
    );

    // Bob's budget at the workers is his own.
    let (bob, _) = connect_with_notices(&login("bob")).await.unwrap();
    assert_eq!(
        spent_through(&bob).await,
        [("h0".to_string(), 0.0), ("h1".into(), 0.0)]
    );
    let rows = simple_rows(&bob, "SELECT dp_count(*, 0.25) FROM t").await;
    assert_eq!(rows.len(), 1);
    bob.query("SELECT dp_count(*, 0.5) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(
        spent_through(&bob).await,
        [("h0".to_string(), 0.75), ("h1".into(), 0.75)]
    );
    // Alice's is still spent.
    let (alice, _) = connect_with_notices(&login("alice")).await.unwrap();
    assert!(
        alice
            .query("SELECT dp_count(*, 0.1) FROM t", &[])
            .await
            .is_err()
    );

    // Carol has no token of her own: refused, naming the users-file key;
    // the table's token is not used for her.
    let (carol, _) = connect_with_notices(&login("carol")).await.unwrap();
    for sql in ["SELECT dp_count(*, 0.1) FROM t", "SHOW PRIVACY BUDGET t"] {
        let e = carol.simple_query(sql).await.unwrap_err();
        let text = db_error(&e).message().to_string();
        assert!(
            text.contains("carol") && text.contains("[users.carol]") && text.contains("token_file"),
            "{text}"
        );
    }
    // The coordinator's own token (the table's) spent nothing.
    let own = ctx
        .sql("SHOW PRIVACY BUDGET t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let spent = own[0]
        .column(2)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Float64Array>()
        .unwrap();
    assert!(spent.iter().all(|s| s == Some(0.0)), "{spent:?}");
}
