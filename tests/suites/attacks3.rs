//! A third red-team review (attack-3): whose privacy budget a call debits
//! and which token it carries. Each test asserts the *safe* outcome; a
//! hole found is kept as an `#[ignore = "HOLE: ..."]` test that fails.

use std::path::Path;
use std::sync::Arc;

use arrow_flight::Action;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Float64Type;
use fedsql::FedContext;
use fedsql::frontend::pgwire::{Server, ServerOptions, auth, start};
use fedsql::protocol::flight::ACTION_PRIVACY_BUDGET;
use futures::TryStreamExt;
use tempfile::TempDir;
use tokio_postgres::{Client, NoTls};

use crate::pgwire::simple_rows;
use crate::remote::{Workers, flight, run, with_token};

/// `SHOW PRIVACY BUDGET table` in process: (client, spent) per client.
async fn spent_in(ctx: &FedContext, table: &str) -> Vec<(String, f64)> {
    let batches = run(ctx, &format!("SHOW PRIVACY BUDGET {table}"))
        .await
        .unwrap();
    let mut lines = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            lines.push((
                b.column(0).as_string::<i32>().value(r).to_string(),
                b.column(2).as_primitive::<Float64Type>().value(r),
            ));
        }
    }
    lines
}

/// `SHOW PRIVACY BUDGET t` through a connection: spent per client.
async fn spent_through(client: &Client) -> Vec<f64> {
    simple_rows(client, "SHOW PRIVACY BUDGET t")
        .await
        .into_iter()
        .map(|r| r[2].as_ref().unwrap().parse().unwrap())
        .collect()
}

/// A logged-in connection (the password is the name).
async fn login(server: &Server, name: &str) -> Client {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(server.addr().port())
        .user(name)
        .password(name)
        .dbname("fedsql");
    let (client, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// One file per client, `n` clients of three rows each, in `dir`.
fn client_files(dir: &Path, n: usize) {
    for i in 0..n {
        std::fs::write(
            dir.join(format!("c{i:02}.csv")),
            format!("x\n{}\n{}\n{}\n", i, i + 1, i + 2),
        )
        .unwrap();
    }
}

/// In process (the REPL's session, one ledger): twelve clients (more than
/// run at once, so the round spawns runner tasks), the table named three
/// ways, and `EXPLAIN ANALYZE FEDERATED` all debit the one ledger of the
/// table at every client; once it is spent, every spelling is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_spawned_rounds_and_explain_analyze_debit_one_ledger() {
    let dir = TempDir::new().unwrap();
    client_files(dir.path(), 12);
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}/' OPTIONS ('dp_budget' '1')",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    for from in ["t", "public.t", "datafusion.public.t"] {
        run(&ctx, &format!("SELECT dp_count(*, 0.25) FROM {from}"))
            .await
            .unwrap();
    }
    let lines = spent_in(&ctx, "t").await;
    assert_eq!(lines.len(), 12);
    assert!(lines.iter().all(|(_, s)| *s == 0.75), "{lines:?}");
    run(
        &ctx,
        "EXPLAIN ANALYZE FEDERATED SELECT dp_count(*, 0.25) FROM t",
    )
    .await
    .unwrap();
    let lines = spent_in(&ctx, "t").await;
    assert!(lines.iter().all(|(_, s)| *s == 1.0), "{lines:?}");
    for from in ["t", "public.t", "datafusion.public.t", "\"t\""] {
        let e = run(&ctx, &format!("SELECT dp_count(*, 0.01) FROM {from}"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("dp_budget"), "{from}: {e}");
    }
}

/// A server (`--users` alice and bob) over an in-process table `t` of
/// three clients with dp_budget 1.
async fn in_process_dp_server(data: &Path, users: &Path) -> Server {
    client_files(data, 3);
    let file = users.join("users.toml");
    for name in ["alice", "bob"] {
        auth::set_password(&file, name, name).unwrap();
    }
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}/' OPTIONS ('dp_budget' '1')",
            data.display()
        ),
    )
    .await
    .unwrap();
    start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            users: Some(Arc::new(auth::Users::load(&file).unwrap())),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Through the extended protocol (Parse → Bind → Execute), a prepared
/// statement, with parameters or not, debits the user whose connection
/// runs it, each time it runs, and only them; so does a table function's
/// planning-time round and `EXPLAIN ANALYZE FEDERATED` through Parse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_debit_the_connection_user_each_run() {
    let (data, users) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let server = in_process_dp_server(data.path(), users.path()).await;
    let alice = login(&server, "alice").await;
    let bob = login(&server, "bob").await;
    let stmt = alice
        .prepare("SELECT dp_count(*, 0.25) FROM t")
        .await
        .unwrap();
    let with_param = alice
        .prepare("SELECT dp_count(*, 0.25) FROM t WHERE x > $1")
        .await
        .unwrap();
    // Parsing runs nothing.
    assert_eq!(spent_through(&alice).await, [0.0; 3]);
    alice.query(&stmt, &[]).await.unwrap();
    alice.query(&with_param, &[&0_i64]).await.unwrap();
    assert_eq!(spent_through(&alice).await, [0.5; 3]);
    assert_eq!(spent_through(&bob).await, [0.0; 3]);
    // EXPLAIN ANALYZE FEDERATED through Parse/Execute: alice's too.
    alice
        .query(
            "EXPLAIN ANALYZE FEDERATED SELECT dp_count(*, 0.25) FROM t",
            &[],
        )
        .await
        .unwrap();
    alice.query(&stmt, &[]).await.unwrap();
    assert_eq!(spent_through(&alice).await, [1.0; 3]);
    // Spent: the prepared statement is refused, bob's budget is whole.
    let e = alice.query(&stmt, &[]).await.unwrap_err();
    assert!(format!("{e:?}").contains("dp_budget"), "{e:?}");
    assert_eq!(spent_through(&bob).await, [0.0; 3]);
    bob.query("SELECT dp_count(*, 0.5) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(spent_through(&bob).await, [0.5; 3]);
    assert_eq!(spent_through(&alice).await, [1.0; 3]);
}

/// Workers with a DP budget and named tokens for alice and bob (and the
/// coordinator's own), over two client files.
async fn dp_workers(dir: &Path) -> Workers {
    let files = vec![dir.join("a.csv"), dir.join("b.csv")];
    std::fs::write(&files[0], "x\n1\n2\n3\n4\n5\n6\n").unwrap();
    std::fs::write(&files[1], "x\n7\n8\n9\n10\n11\n").unwrap();
    Workers::start_with(&files, "t", |mut config| {
        config.policy = Some(fedsql::site::release::policy::DisclosurePolicy::default());
        config.dp.set("dp_budget", "1").unwrap();
        config.named_tokens = vec![
            ("alice".into(), "alice-token".into()),
            ("bob".into(), "bob-token".into()),
        ];
        config
    })
    .await
}

/// A hostile coordinator holding bob's token cannot read or spend
/// alice's ledger by claiming to be alice (in metadata of its own making),
/// and a request with alice's token is alice's whatever it claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_keys_its_ledger_by_the_token_whatever_the_request_claims() {
    let dir = TempDir::new().unwrap();
    let workers = dp_workers(dir.path()).await;
    // Alice spends 0.75 through a coordinator of her own.
    let token = dir.path().join("alice.token");
    std::fs::write(&token, "alice-token\n").unwrap();
    let alice = FedContext::new();
    let clients: Vec<String> = workers
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| format!("'h{i}' = 'grpc://{}'", w.addr()))
        .collect();
    run(
        &alice,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ({}) OPTIONS ('token_file' '{}')",
            clients.join(", "),
            token.display()
        ),
    )
    .await
    .unwrap();
    run(&alice, "SELECT dp_count(*, 0.75) FROM t")
        .await
        .unwrap();
    assert_eq!(
        spent_in(&alice, "t").await,
        [("h0".to_string(), 0.75), ("h1".into(), 0.75)]
    );
    // Bob's token, claiming alice every way a request could.
    let addr = workers.workers[0].addr();
    let budget_of = |token: &'static str, claims: bool| async move {
        let mut request = with_token(
            Action {
                r#type: ACTION_PRIVACY_BUDGET.into(),
                body: b"t".to_vec().into(),
            },
            token,
        );
        if claims {
            for key in ["x-fedsql-analyst", "analyst", "user", "x-analyst"] {
                request.metadata_mut().insert(key, "alice".parse().unwrap());
            }
        }
        let results: Vec<_> = flight(addr)
            .await
            .do_action(request)
            .await
            .unwrap()
            .into_inner()
            .try_collect()
            .await
            .unwrap();
        let body: Vec<u8> = results.iter().flat_map(|r| r.body.to_vec()).collect();
        String::from_utf8(body).unwrap()
    };
    assert_eq!(budget_of("bob-token", true).await, "1 0");
    assert_eq!(budget_of("alice-token", true).await, "1 0.75");
    assert_eq!(budget_of("alice-token", false).await, "1 0.75");
    // The coordinator's own token is a third ledger.
    let own = FedContext::new();
    run(&own, &workers.create("t")).await.unwrap();
    assert_eq!(
        spent_in(&own, "t").await,
        [("h0".to_string(), 0.0), ("h1".into(), 0.0)]
    );
}

/// Under `serve --users`, a user without a token of their own (carol) is
/// refused the workers through every path — Parse of a query, Parse of
/// `EXPLAIN ANALYZE FEDERATED`, `SHOW PRIVACY BUDGET` through the extended
/// protocol, a table function and its `EXPLAIN FEDERATED` — never let through on the table's token; and a statement
/// alice prepared on her connection spends alice's budget, not the
/// table token's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_a_token_is_refused_on_every_path_to_a_worker() {
    let dir = TempDir::new().unwrap();
    let workers = dp_workers(dir.path()).await;
    let ctx = FedContext::new();
    run(&ctx, &workers.create("t")).await.unwrap();
    let users_dir = TempDir::new().unwrap();
    std::fs::write(users_dir.path().join("alice.token"), "alice-token\n").unwrap();
    let verifier = |name: &str| auth::Verifier::new(name).unwrap().encode();
    let users_file = users_dir.path().join("users.toml");
    std::fs::write(
        &users_file,
        format!(
            "[users]\ncarol = \"{}\"\n\n[users.alice]\nverifier = \"{}\"\ntoken_file = \"alice.token\"\n",
            verifier("carol"),
            verifier("alice"),
        ),
    )
    .unwrap();
    let server = start(
        ctx.clone(),
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            users: Some(Arc::new(auth::Users::load(&users_file).unwrap())),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let carol = login(&server, "carol").await;
    for sql in [
        "SELECT dp_count(*, 0.1) FROM t",
        "EXPLAIN ANALYZE FEDERATED SELECT dp_count(*, 0.1) FROM t",
        "SHOW PRIVACY BUDGET t",
        "SELECT count(*) FROM t",
        // A table function's rounds, and EXPLAIN FEDERATED, which runs them.
        "SELECT * FROM summary('t', 'x')",
        "EXPLAIN FEDERATED SELECT * FROM summary('t', 'x')",
    ] {
        let e = carol.query(sql, &[]).await.unwrap_err();
        let text = format!("{e:?}");
        assert!(
            text.contains("carol") && text.contains("token_file"),
            "{sql}: {text}"
        );
    }
    let alice = login(&server, "alice").await;
    let stmt = alice
        .prepare("SELECT dp_count(*, 0.5) FROM t")
        .await
        .unwrap();
    alice.query(&stmt, &[]).await.unwrap();
    assert_eq!(spent_through(&alice).await, [0.5, 0.5]);
    // Neither the table's token (the coordinator's) nor anyone else paid.
    let own = spent_in(&ctx, "t").await;
    assert!(own.iter().all(|(_, s)| *s == 0.0), "{own:?}");
}

/// A secure-aggregation round (masked states) that also asks for a DP
/// aggregate debits its ε at every client: masking the states is no way
/// around the ledger; the third such query is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_round_with_a_dp_call_debits_at_every_client() {
    let dir = TempDir::new().unwrap();
    // Twelve clients of six rows (above the default min_group_rows).
    for i in 0..12 {
        let rows: String = (0..6).map(|k| format!("{}\n", i + k)).collect();
        std::fs::write(
            dir.path().join(format!("c{i:02}.csv")),
            format!("x\n{rows}"),
        )
        .unwrap();
    }
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}/' OPTIONS ('dp_budget' '1')",
            dir.path().display()
        ),
    )
    .await
    .unwrap();
    let sql = "SELECT secure_sum(x, 0, 100) AS s, dp_count(*, 0.5) AS n FROM t";
    for spent in [0.5, 1.0] {
        run(&ctx, sql).await.unwrap();
        let lines = spent_in(&ctx, "t").await;
        assert!(lines.iter().all(|(_, s)| *s == spent), "{lines:?}");
    }
    let e = run(&ctx, sql).await.unwrap_err();
    assert!(e.to_string().contains("dp_budget"), "{e}");
}

/// A pg user may not be called `session`: that is the name of the ledger
/// a session without a user debits (the setup scripts of `fedsql serve -f`,
/// the embedding program's own context), so such a user would share it.
/// Neither `fedsql passwd` nor loading a users file accepts the name.
#[tokio::test]
async fn a_pg_user_may_not_be_called_session() {
    let users = TempDir::new().unwrap();
    let file = users.path().join("users.toml");
    let err = auth::set_password(&file, "session", "session").unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
    // Written by hand: the same name in the file is refused on load.
    auth::set_password(&file, "alice", "alice").unwrap();
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("alice", "session");
    std::fs::write(&file, text).unwrap();
    let err = auth::Users::load(&file).unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
}

/// A worker refuses to start with `[tokens]` that would share a ledger: a
/// token named `default` (the name of the single `--token-file` token's
/// ledger), or one token under two names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_tokens_that_would_share_a_ledger() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("a.csv");
    std::fs::write(&file, "x\n1\n2\n3\n4\n5\n6\n").unwrap();
    let config = |named: Vec<(String, String)>| {
        let mut config = fedsql::site::worker::WorkerConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            vec![("t".to_string(), file.clone())],
            crate::remote::TOKEN,
        );
        config.named_tokens = named;
        config
    };
    for (named, says) in [
        (vec![("default".into(), "other-token".into())], "reserved"),
        (
            vec![("ann".into(), crate::remote::TOKEN.into())],
            "another name",
        ),
        (
            vec![("ann".into(), "same".into()), ("bob".into(), "same".into())],
            "another name",
        ),
    ] {
        let err = match fedsql::site::worker::start(config(named)).await {
            Ok(_) => panic!("the worker started"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{err}");
    }
}
