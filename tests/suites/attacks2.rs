//! A second red-team review (attack-2). Each test asserts the *safe*
//! outcome, so a failing test is a finding. Differential probes: a
//! condition `{}` on one person (id = 3 at site `a`) is made true or false.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use fedsql::FedContext;
use fedsql::frontend::pgwire::{ServerOptions, auth, start};
use tempfile::TempDir;
use tokio_postgres::NoTls;

use crate::attacks::{NO, YES, answer, differential, in_process_with, write_sites};
use crate::remote::{Workers, run};
use fedsql::site::release::policy::DisclosurePolicy;

/// Aggregates whose own update fails on a row's *shape*: a list whose
/// length depends on one person. The never-fail rewrite covers scalar
/// functions, not an aggregate's own checks.
#[tokio::test]
async fn aggregate_errors_on_one_rows_list_length() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(&files, "'min_group_rows' '5'").await;
    let probes = [
        "SELECT count(*) AS n, secure_sum_vec(CASE WHEN {} THEN [x, x, x] ELSE [x, x] END, [0, 0], [1000, 1000]) AS v FROM t",
        "SELECT count(*) AS n, secure_sum_vec(CASE WHEN {} THEN [x] ELSE [x, x] END, [0, 0], [1000, 1000]) AS v FROM t",
    ];
    let found = differential(&local, "in process", &probes).await;
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// DP bounds whose range overflows a double.
#[tokio::test]
async fn dp_bounds_that_overflow() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(
        &files,
        "'min_group_rows' '5', 'require_dp' 'true', 'dp_budget' '1000', 'dp_max_epsilon' '10'",
    )
    .await;
    let mut found = Vec::new();
    for probe in [
        "SELECT dp_avg(CASE WHEN {} THEN 1e300 ELSE 0.0 END, -1.7e308, 1.7e308, 1.0) AS a FROM t",
        "SELECT dp_var(CASE WHEN {} THEN 1e200 ELSE 0.0 END, -1e200, 1e200, 1.0) AS v FROM t",
        "SELECT dp_sum(CASE WHEN {} THEN 1.7e308 ELSE 0.0 END, -1.7e308, 1.7e308, 1.0) AS s FROM t",
    ] {
        for _ in 0..3 {
            let yes = answer(&local, &probe.replace("{}", YES)).await;
            let no = answer(&local, &probe.replace("{}", NO)).await;
            eprintln!("{probe}\n    yes: {yes:?}\n    no:  {no:?}");
            if yes.is_ok() != no.is_ok() {
                found.push(format!("{probe}\n    yes: {yes:?}\n    no:  {no:?}"));
            }
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// `replace(s, 'p', 'pp…p')` multiplies the `p`s of a value by the length
/// of a literal; nested, the output of one short value grows exponentially
/// with the depth (32^4 ≈ 1M characters from one), though functions whose
/// output grows with an argument's value are said not to be catalogued.
/// Expression results are not charged to the request's memory pool: a
/// worker with `memory_limit` = 1 MiB answers over 20 MB of strings.
#[tokio::test]
async fn replace_multiplies_a_value_past_the_memory_limit() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(&files, "'min_group_rows' '5'").await;
    let workers = Workers::start_with(&files, "t", |mut c| {
        c.policy = Some(DisclosurePolicy::default());
        c.limits.memory = Some(1 << 20);
        c
    })
    .await;
    let remote = FedContext::new();
    run(&remote, &workers.create("t")).await.unwrap();
    let to = "p".repeat(32);
    let mut e = "g".to_string();
    for _ in 0..4 {
        e = format!("replace({e}, 'p', '{to}')");
    }
    let sql = format!("SELECT count(*) AS n, sum(length({e})) AS len FROM t");
    let mut found = Vec::new();
    for (where_, ctx) in [
        ("in process", &local),
        ("worker, memory_limit 1 MiB", &remote),
    ] {
        let started = Instant::now();
        let got = answer(ctx, &sql).await;
        eprintln!("[{where_}] {sql}\n  -> {got:?} in {:?}", started.elapsed());
        if got.is_ok() {
            found.push(format!(
                "[{where_}] one 1-character value became 1,048,576 characters: {got:?}"
            ));
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// `levenshtein` is quadratic in its arguments' lengths, and `replace`
/// makes one row's short value long: the work of one batch is not bounded
/// before it starts, and a request timeout cannot interrupt one batch.
#[tokio::test]
async fn levenshtein_over_amplified_strings_takes_quadratic_time() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(&files, "'min_group_rows' '5'").await;
    let mut took = Vec::new();
    for n in [1000usize, 2000, 4000] {
        let to = "p".repeat(n);
        let e = format!("replace(g, 'p', '{to}')");
        let sql = format!(
            "SELECT count(*) AS n, sum(levenshtein({e}, reverse(concat({e}, 'q')))) AS d FROM t"
        );
        let started = Instant::now();
        let got = answer(&local, &sql).await;
        eprintln!(
            "levenshtein of {n}-char strings x 20 rows: {got:?} in {:?}",
            started.elapsed()
        );
        took.push((n, started.elapsed(), got.is_ok()));
    }
    assert!(took.iter().all(|t| !t.2), "answered: {took:?}");
}

fn users_of(dir: &Path, names: &[&str]) -> Arc<auth::Users> {
    let file = dir.join("users.toml");
    for name in names {
        auth::set_password(&file, name, name).unwrap();
    }
    Arc::new(auth::Users::load(&file).unwrap())
}

/// Through `fedsql serve --users`, statements that fedsql runs while it
/// plans them (`EXPLAIN ANALYZE FEDERATED`, `SHOW PRIVACY BUDGET`) are
/// prepared outside the connection user's scope: whose budget do they
/// spend?
#[tokio::test]
async fn explain_analyze_federated_spends_someone_elses_budget() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.csv"), "x\n1\n2\n3\n").unwrap();
    std::fs::write(dir.path().join("b.csv"), "x\n4\n5\n").unwrap();
    let ledgers = TempDir::new().unwrap();
    let users_dir = TempDir::new().unwrap();
    let users = users_of(users_dir.path(), &["alice"]);
    let ctx = FedContext::new();
    ctx.keep_dp_ledgers_in(ledgers.path()).unwrap();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}/' OPTIONS ('dp_budget' '1')",
        dir.path().display()
    ))
    .await
    .unwrap();
    let operator = ctx.clone();
    let server = start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            users: Some(users),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let connect = |name: &'static str| {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(server.addr().port())
            .user(name)
            .password(name)
            .dbname("fedsql");
        async move {
            let (client, connection) = config.connect(NoTls).await.unwrap();
            tokio::spawn(connection);
            client
        }
    };
    let alice = connect("alice").await;
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let r = alice
            .simple_query("EXPLAIN ANALYZE FEDERATED SELECT dp_count(*, 0.9) AS n FROM t")
            .await;
        outcomes.push(r.map(|_| "ran").map_err(|e| format!("{e:?}")));
    }
    eprintln!("alice's EXPLAIN ANALYZE FEDERATED x3: {outcomes:?}");
    // Alice's own budget.
    let own = alice
        .simple_query("SELECT dp_count(*, 0.9) AS n FROM t")
        .await;
    eprintln!("alice's own query after: {:?}", own.as_ref().map(|_| ()));
    // The ledger of the session without a user (the operator's own
    // context: `-f` scripts, the embedding program); no pg user may take
    // its name.
    let theirs = match operator.sql("SELECT dp_count(*, 0.5) AS n FROM t").await {
        Ok(df) => df.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    eprintln!(
        "the operator's session after: {:?}",
        theirs.as_ref().map_err(|e| format!("{e:?}"))
    );
    let ran = outcomes.iter().filter(|o| o.is_ok()).count();
    assert!(
        ran <= 1 && own.is_err() == (ran == 1) && theirs.is_ok(),
        "EXPLAIN ANALYZE FEDERATED ran {ran} times at ε = 0.9 under dp_budget 1; alice's own query after: {:?}; the operator's session: {:?}",
        own.map(|_| ()),
        theirs
    );
}
