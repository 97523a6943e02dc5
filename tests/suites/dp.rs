//! Differential privacy at the data owner (issue 14): noise added by each
//! site to its own state, budgets kept by the site, declared public keys.
//!
//! The statistical tests draw their noise from seeded generators (a test
//! hook no worker or SQL statement can reach) so that they are
//! reproducible; everything else runs with the operating system's
//! generator, as production does.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::frontend::demo::demo_schema;
use fedsql::protocol::site::Site;
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::{DpPolicy, DpSite};
use fedsql::site::release::dp_budget::Ledger;

use crate::support::{demo_rows, split_sizes};

/// The demo rows split over `clients` in-process sites, each with `policy`
/// and (when `seed` is given) a seeded noise generator of its own.
fn dp_federation(clients: usize, policy: &DpPolicy, seed: Option<u64>) -> FedContext {
    dp_federation_with_sites(clients, policy, seed).0
}

/// The same, and the sites themselves (for the requests a hostile
/// coordinator would make).
pub(crate) fn dp_federation_with_sites(
    clients: usize,
    policy: &DpPolicy,
    seed: Option<u64>,
) -> (FedContext, Vec<Arc<LocalClient>>) {
    let (header, rows) = demo_rows();
    let schema = demo_schema();
    let mut start = 0;
    let mut sites = Vec::new();
    let mut runners: Vec<Arc<dyn Site>> = Vec::new();
    let ctx = FedContext::new();
    for (i, size) in split_sizes(rows.len(), clients).into_iter().enumerate() {
        let csv = format!("{header}\n{}\n", rows[start..start + size].join("\n"));
        start += size;
        let batches: Vec<RecordBatch> =
            datafusion::arrow::csv::ReaderBuilder::new(Arc::clone(&schema))
                .with_header(true)
                .build(std::io::Cursor::new(csv.into_bytes()))
                .unwrap()
                .map(|b| b.unwrap())
                .collect();
        let site = match seed {
            Some(seed) => DpSite::seeded_for_tests(
                policy.clone(),
                Arc::new(Ledger::in_memory()),
                seed * 1000 + i as u64,
            ),
            None => DpSite::new(policy.clone(), Arc::new(Ledger::in_memory())),
        };
        let client = Arc::new(
            LocalClient::from_batches(
                &format!("c{i}"),
                "memory",
                Arc::clone(&schema),
                batches,
                ctx.site_engine(),
            )
            .unwrap()
            .with_dp(Arc::new(site)),
        );
        runners.push(Arc::clone(&client) as Arc<dyn Site>);
        sites.push(client);
    }
    ctx.register_federated(FederatedTable::new("clinic", schema, runners))
        .unwrap();
    (ctx, sites)
}

/// The `i`-th column of the demo rows, as integers.
pub(crate) fn demo_column(i: usize) -> Vec<Option<i64>> {
    demo_rows()
        .1
        .iter()
        .map(|r| r.split(',').nth(i).unwrap().trim().parse().ok())
        .collect()
}

/// The variance of the discrete Laplace distribution of scale t.
pub(crate) fn discrete_laplace_variance(t: f64) -> f64 {
    let p = (-1.0 / t).exp();
    2.0 * p / ((1.0 - p) * (1.0 - p))
}

pub(crate) async fn one_row(ctx: &FedContext, sql: &str) -> RecordBatch {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn int(batch: &RecordBatch, column: usize, row: usize) -> i64 {
    batch.column(column).as_primitive::<Int64Type>().value(row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dp_count_and_sum_are_unbiased_with_the_stated_variance_for_1_3_and_7_clients() {
    const REPETITIONS: usize = 4000;
    let visits = demo_column(7);
    let true_count = visits.len() as f64;
    // dp_sum(visits, 0, 10): the values clamped to [0, 10], computed here.
    let true_sum = visits
        .iter()
        .flatten()
        .map(|v| (*v).clamp(0, 10))
        .sum::<i64>() as f64;
    for clients in [1, 3, 7] {
        let ctx = dp_federation(clients, &DpPolicy::default(), Some(clients as u64));
        ctx.sql("SET fedsql.dp_epsilon = 0.5").await.unwrap();
        let (mut counts, mut sums) = (Vec::new(), Vec::new());
        for _ in 0..REPETITIONS {
            let b = one_row(
                &ctx,
                "SELECT dp_count(*) AS n, dp_sum(visits, 0, 10) AS s FROM clinic",
            )
            .await;
            counts.push(int(&b, 0, 0) as f64 - true_count);
            sums.push(int(&b, 1, 0) as f64 - true_sum);
        }
        // Stated: each client adds discrete Laplace noise of scale Δ/ε:
        // 1/0.5 for the count, 10/0.5 for the sum.
        for (what, errors, scale) in [("count", &counts, 2.0), ("sum", &sums, 20.0)] {
            let stated = clients as f64 * discrete_laplace_variance(scale);
            let n = errors.len() as f64;
            let mean = errors.iter().sum::<f64>() / n;
            let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (n - 1.0);
            let se = (stated / n).sqrt();
            assert!(
                mean.abs() <= 3.0 * se,
                "{clients} clients, {what}: mean error {mean} beyond 3 SE ({se})"
            );
            assert!(
                (var / stated - 1.0).abs() <= 0.10,
                "{clients} clients, {what}: variance {var} vs stated {stated}"
            );
        }
    }
}

#[tokio::test]
async fn the_notice_states_the_noise_and_explain_shows_the_mechanism() {
    // ε = 1 + 0.25 in one query: past the default cap of 1.
    let mut policy = DpPolicy::default();
    policy.set("dp_max_epsilon", "2").unwrap();
    let ctx = dp_federation(3, &policy, None);
    ctx.take_notices();
    let b = one_row(
        &ctx,
        "SELECT dp_count(*), dp_sum(visits, 0, 10, 0.25) AS s FROM clinic",
    )
    .await;
    assert_eq!(b.schema().field(0).name(), "dp_count(*)");
    let notices = ctx.take_notices();
    // 3 clients, scale 1/ε = 1: sd = sqrt(3 · 2p/(1−p)²), p = e^−1.
    let sd = (3.0 * discrete_laplace_variance(1.0)).sqrt();
    let count = notices
        .iter()
        .find(|n| n.starts_with("dp_count(*)"))
        .expect("a notice for dp_count(*)");
    assert!(
        count.contains(&format!("{:.4}", sd)[..5]),
        "{count} (sd {sd})"
    );
    assert!(count.contains("95% interval"), "{count}");
    let sum = notices
        .iter()
        .find(|n| n.starts_with("dp_sum"))
        .expect("a notice for dp_sum");
    assert!(sum.contains("ε = 0.25"), "{sum}");
    let explain = ctx
        .sql("EXPLAIN FEDERATED SELECT dp_avg(systolic, 80, 200) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = explain[0].column(0).as_string::<i32>().value(0).to_string();
    assert!(text.contains("discrete Laplace"), "{text}");
    assert!(
        text.contains("ε = 0.500000"),
        "dp_avg splits ε = 1 in halves:\n{text}"
    );
    assert!(text.contains("scale"), "{text}");
}

#[tokio::test]
async fn the_session_epsilon_is_written_into_the_plan() {
    let ctx = dp_federation(1, &DpPolicy::default(), None);
    ctx.sql("SET fedsql.dp_epsilon = 0.125").await.unwrap();
    ctx.take_notices();
    one_row(&ctx, "SELECT dp_count(age) FROM clinic").await;
    let notices = ctx.take_notices();
    assert!(notices[0].contains("ε = 0.125"), "{notices:?}");
}

#[tokio::test]
async fn bad_bounds_and_non_constant_arguments_are_refused() {
    let ctx = dp_federation(3, &DpPolicy::default(), None);
    for (sql, says) in [
        (
            "SELECT dp_sum(visits, 10, 0) FROM clinic",
            "not below upper",
        ),
        (
            "SELECT dp_sum(visits, 0, age) FROM clinic",
            "not a constant",
        ),
        (
            "SELECT dp_avg(bmi, 15, 45, -1) FROM clinic",
            "epsilon must be positive",
        ),
        (
            "SELECT dp_histogram(bmi, 15, 45, 0) FROM clinic",
            "bins must be at least 1",
        ),
    ] {
        let err = match ctx.sql(sql).await {
            Ok(df) => df.collect().await.unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{sql}: {err}");
    }
}

fn region_policy() -> DpPolicy {
    let mut p = DpPolicy::default();
    p.set("dp_domain.region", "east,north,south,west,central")
        .unwrap();
    p
}

#[tokio::test]
async fn a_declared_key_absent_everywhere_still_gets_noisy_states_from_every_client() {
    // No client holds `central`: its count is the sum of 7 clients' noise.
    let ctx = dp_federation(7, &region_policy(), Some(99));
    let sql = "SELECT region, dp_count(*) AS n FROM clinic GROUP BY region ORDER BY region";
    let (batches, reports) = ctx
        .sql(sql)
        .await
        .unwrap()
        .collect_with_report()
        .await
        .unwrap();
    for (client, rows, _, _) in &reports[0].clients {
        assert_eq!(*rows, 5, "client {client} releases every declared key");
    }
    let regions: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_string::<i32>()
                .iter()
                .map(|s| s.unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(regions, ["central", "east", "north", "south", "west"]);
    let mut central = Vec::new();
    for _ in 0..400 {
        let b = one_row(&ctx, sql).await;
        central.push(int(&b, 1, 0) as f64);
    }
    let n = central.len() as f64;
    let mean = central.iter().sum::<f64>() / n;
    let var = central.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let stated = 7.0 * discrete_laplace_variance(1.0);
    assert!(mean.abs() <= 3.0 * (stated / n).sqrt(), "mean {mean}");
    assert!(
        (var / stated - 1.0).abs() < 0.25,
        "variance {var} vs {stated}"
    );
    // Each region's noisy count is near its true count.
    let b = one_row(&ctx, sql).await;
    let regions = demo_rows().1;
    let east = regions.iter().filter(|r| r.starts_with("east,")).count() as i64;
    assert!(
        (int(&b, 1, 1) - east).abs() < 30,
        "east: {} vs {east}",
        int(&b, 1, 1)
    );
}

#[tokio::test]
async fn grouping_under_dp_needs_declared_columns_and_dp_aggregates_only() {
    let ctx = dp_federation(3, &region_policy(), None);
    for (sql, says) in [
        (
            "SELECT sex, dp_count(*) FROM clinic GROUP BY sex",
            "`sex`, whose values are not declared public",
        ),
        (
            "SELECT region, dp_count(*), count(*) FROM clinic GROUP BY region",
            "may not mix in exact aggregates",
        ),
        (
            "SELECT age > 50, dp_count(*) FROM clinic GROUP BY age > 50",
            "expression",
        ),
    ] {
        let err = ctx
            .sql(sql)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{sql}: {err}");
        if !says.contains("exact") {
            assert!(
                err.contains("dp_domain"),
                "the hint says how to declare: {err}"
            );
        }
    }
}

#[tokio::test]
async fn a_dp_aggregate_over_distinct_values_is_refused() {
    let ctx = dp_federation(3, &DpPolicy::default(), None);
    let err = match ctx
        .sql("SELECT dp_count(DISTINCT region) FROM clinic")
        .await
    {
        Ok(df) => df.collect().await.unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.to_ascii_uppercase().contains("DISTINCT"), "{err}");
}

#[tokio::test]
async fn require_dp_answers_only_dp_aggregates() {
    let mut policy = DpPolicy::default();
    policy.set("require_dp", "true").unwrap();
    let ctx = dp_federation(3, &policy, None);
    let err = ctx
        .sql("SELECT count(*) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("require_dp"), "{err}");
    one_row(&ctx, "SELECT dp_count(*) FROM clinic").await;
}

async fn budget(ctx: &FedContext) -> Vec<(String, f64, f64)> {
    budget_of(ctx, "clinic").await
}

/// Each client's line of `SHOW PRIVACY BUDGET table`: (client, spent, remaining).
async fn budget_of(ctx: &FedContext, table: &str) -> Vec<(String, f64, f64)> {
    let b = one_row(ctx, &format!("SHOW PRIVACY BUDGET {table}")).await;
    (0..b.num_rows())
        .map(|r| {
            (
                b.column(0).as_string::<i32>().value(r).to_string(),
                b.column(2).as_primitive::<Float64Type>().value(r),
                b.column(3).as_primitive::<Float64Type>().value(r),
            )
        })
        .collect()
}

#[tokio::test]
async fn queries_debit_exactly_and_overspending_is_refused_at_every_client() {
    let dir = tempfile::TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("a.csv"),
        "x,region\n1,east\n2,west\n3,east\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("b.csv"), "x,region\n4,east\n5,west\n").unwrap();
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE clinic STORED AS CSV LOCATION '{}' OPTIONS ('dp_budget' '1', 'min_group_rows' '5')",
        dir.path().display()
    ))
    .await
    .unwrap();
    // 0.1 + (0.2 + 0.1) + 0.3 = 0.7: sums of tenths, debited exactly.
    one_row(&ctx, "SELECT dp_count(*, 0.1) FROM clinic").await;
    one_row(
        &ctx,
        "SELECT dp_sum(x, 0, 10, 0.2), dp_count(x, 0.1) FROM clinic",
    )
    .await;
    ctx.sql("SET fedsql.dp_epsilon = 0.3").await.unwrap();
    one_row(&ctx, "SELECT dp_avg(x, 0, 10) FROM clinic").await;
    for (client, spent, remaining) in budget(&ctx).await {
        assert_eq!(spent, 0.7, "client {client}");
        assert!(
            (remaining - 0.3).abs() < 1e-12,
            "client {client}: {remaining}"
        );
    }
    // 0.5 > 0.3 left: refused, naming what is left; nothing is debited.
    let err = ctx
        .sql("SELECT dp_count(*, 0.5) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("only ε = 0.3 of 1 remains"), "{err}");
    for (client, spent, _) in budget(&ctx).await {
        assert_eq!(
            spent, 0.7,
            "client {client} released nothing and spent nothing"
        );
    }
    // Exact queries under the policy still meet its thresholds; DP ones
    // over the same 2- and 3-row sites are exempt (the noise protects them).
    let err = ctx
        .sql("SELECT count(*) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("min_group_rows"), "{err}");
    one_row(&ctx, "SELECT dp_count(*, 0.3) FROM clinic").await;
    assert!(
        budget(&ctx)
            .await
            .iter()
            .all(|(_, spent, remaining)| *spent == 1.0 && *remaining == 0.0)
    );
}

#[test]
fn a_file_ledger_loses_no_debit_under_50_concurrent_queries_and_survives_reopening() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("ledger.toml");
    let ledger = Arc::new(Ledger::open(&path).unwrap());
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let analyst = if i % 2 == 0 { "ana" } else { "bob" };
                ledger
                    .debit(analyst, "clinic", 0.1, Some(100.0))
                    .unwrap()
                    .unwrap();
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(ledger.spent("ana", "clinic"), 2.5);
    drop(ledger);
    let reopened = Ledger::open(&path).unwrap();
    assert_eq!(reopened.spent("ana", "clinic"), 2.5);
    assert_eq!(reopened.spent("bob", "clinic"), 2.5);
}

#[tokio::test]
async fn dp_histogram_has_the_histogram_layout() {
    let ctx = dp_federation(3, &DpPolicy::default(), None);
    let b = one_row(
        &ctx,
        "SELECT dp_histogram(bmi, 15, 45, 6) AS h, histogram(bmi, 15, 45, 6) AS e FROM clinic",
    )
    .await;
    assert_eq!(
        b.schema().field(0).data_type(),
        b.schema().field(1).data_type()
    );
    let noisy = b.column(0).as_list::<i32>().value(0);
    let exact = b.column(1).as_list::<i32>().value(0);
    assert_eq!(noisy.len(), 6);
    let (noisy, exact) = (
        noisy.as_primitive::<Int64Type>(),
        exact.as_primitive::<Int64Type>(),
    );
    // Clamped into the end bins: the noisy total is near all non-NULL rows.
    let total: i64 = noisy.values().iter().sum();
    let rows = demo_rows()
        .1
        .iter()
        .filter(|r| r.split(',').nth(3).unwrap().parse::<f64>().is_ok())
        .count() as i64;
    assert!((total - rows).abs() < 60, "{total} vs {rows}");
    assert!(exact.values().iter().sum::<i64>() <= rows);
    assert!(noisy.null_count() == 0);
}

/// Workers over the demo split in 3, each with a DP budget of 1, a ledger
/// file in `ledgers`, `region` declared public, and two named analysts
/// besides the single token.
async fn dp_workers(
    files: &[std::path::PathBuf],
    ledgers: &std::path::Path,
) -> crate::remote::Workers {
    let ledgers = ledgers.to_path_buf();
    crate::remote::Workers::start_with(files, "clinic", move |mut config| {
        let stem = config.tables[0]
            .1
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .to_string();
        config.policy = Some(fedsql::site::release::policy::DisclosurePolicy::default());
        config.dp.set("dp_budget", "1").unwrap();
        config
            .dp
            .set("dp_domain.region", "east,north,south,west")
            .unwrap();
        config.dp_ledger = Some(ledgers.join(format!("{stem}.ledger.toml")));
        config.named_tokens = vec![("bob".into(), "bob-token".into())];
        config
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_debit_50_concurrent_queries_keep_their_ledger_over_a_restart_and_refuse_overspending()
 {
    let sizes = split_sizes(demo_rows().1.len(), 3);
    let f = crate::support::federation(&sizes, crate::support::Format::Csv).await;
    let ledgers = tempfile::TempDir::new().unwrap();
    let workers = dp_workers(&f.client_files, ledgers.path()).await;
    let ctx = FedContext::new();
    ctx.sql(&workers.create("clinic")).await.unwrap();
    // 50 concurrent DP queries of ε = 0.01 each: 0.5 at every worker.
    let queries = (0..50).map(|_| {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            ctx.sql("SELECT dp_count(*, 0.01) FROM clinic")
                .await?
                .collect()
                .await
        })
    });
    for done in futures::future::join_all(queries).await {
        done.unwrap().unwrap();
    }
    let spent = budget(&ctx).await;
    assert_eq!(spent.len(), 3);
    for (client, spent, remaining) in &spent {
        assert_eq!(*spent, 0.5, "client {client}");
        assert_eq!(*remaining, 0.5, "client {client}");
    }
    // Grouped by the declared column, under the default disclosure policy.
    let b = one_row(&ctx, "SELECT region, dp_avg(systolic, 80, 200, 0.1) AS m FROM clinic GROUP BY region ORDER BY region").await;
    assert_eq!(b.num_rows(), 4);
    let m = b.column(1).as_primitive::<Float64Type>();
    assert!(
        m.iter()
            .all(|v| v.is_some_and(|v| (80.0..=200.0).contains(&v))),
        "{m:?}"
    );

    // Another analyst (a named token) has a ledger of its own.
    let bob_token = ledgers.path().join("bob.token");
    std::fs::write(&bob_token, "bob-token\n").unwrap();
    let bob = FedContext::new();
    let create = workers.create("clinic");
    let (head, _) = create.split_once("OPTIONS").unwrap();
    bob.sql(&format!(
        "{head} OPTIONS ('token_file' '{}')",
        bob_token.display()
    ))
    .await
    .unwrap();
    assert!(budget(&bob).await.iter().all(|(_, spent, _)| *spent == 0.0));

    // Restart every worker on the same ledger files: nothing is forgotten.
    let files = f.client_files.clone();
    for w in workers.workers {
        w.shutdown().await;
    }
    let workers = dp_workers(&files, ledgers.path()).await;
    let ctx = FedContext::new();
    ctx.sql(&workers.create("clinic")).await.unwrap();
    for (client, spent, _) in budget(&ctx).await {
        assert!(
            (spent - 0.6).abs() < 1e-12,
            "client {client} after a restart: {spent}"
        );
    }
    let err = ctx
        .sql("SELECT dp_count(*, 0.5) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("only ε = 0.4 of 1 remains"), "{err}");
    for (client, spent, _) in budget(&ctx).await {
        assert!(
            (spent - 0.6).abs() < 1e-12,
            "client {client} refused and spent nothing: {spent}"
        );
    }
    // An undeclared grouping is refused by the workers themselves.
    let err = ctx
        .sql("SELECT sex, dp_count(*, 0.1) FROM clinic GROUP BY sex")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not declared public"), "{err}");
}

/// `_client` is public (the analyst named the clients): DP aggregates may
/// group by it, and each client releases a noisy state for its own name,
/// rows or not. A column merely named `_client` is data, and refused.
#[tokio::test]
async fn dp_aggregates_may_group_by_client() {
    let ctx = dp_federation(7, &DpPolicy::default(), Some(19));
    let (_, rows) = demo_rows();
    let sizes = split_sizes(rows.len(), 7);
    assert!(sizes.contains(&0), "an empty client: {sizes:?}");
    let batches = ctx
        .sql("SELECT _client, dp_count(*, 1.0) AS n FROM clinic GROUP BY _client ORDER BY _client")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let batch = datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(batch.num_rows(), 7, "every client, the empty one too");
    let names = batch
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::StringArray>()
        .unwrap();
    for (i, size) in sizes.iter().enumerate() {
        assert_eq!(names.value(i), format!("c{i}"));
        let noisy = int(&batch, 1, i);
        assert!(
            (noisy - *size as i64).abs() <= 25,
            "c{i}: {noisy} vs {size}"
        );
    }
    let err = ctx
        .sql("SELECT _client, dp_count(*) FROM (SELECT region AS _client FROM clinic) GROUP BY _client")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not declared public"), "{err}");
}

/// Two client files of 12 and 8 people: `id`, `systolic` and a `note`
/// that is a number for everyone but persons 7 and 17.
fn people_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let row = |id: usize| {
        let note = if id % 10 == 7 {
            "text".to_string()
        } else {
            id.to_string()
        };
        format!("{id},{},{note}\n", 100 + id)
    };
    let mut files = Vec::new();
    for (name, ids) in [("a.csv", 1..13), ("b.csv", 13..21)] {
        let path = dir.join(name);
        let mut text = "id,systolic,note\n".to_string();
        ids.for_each(|id| text.push_str(&row(id)));
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    files
}

/// The people as an in-process table `t` with these OPTIONS.
async fn people(dir: &std::path::Path, options: &str) -> FedContext {
    people_files(dir);
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t (id BIGINT, systolic BIGINT, note VARCHAR) STORED AS CSV LOCATION '{}' OPTIONS ({options})",
        dir.display()
    ))
    .await
    .unwrap();
    ctx
}

async fn refusal(ctx: &FedContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Ok(df) => match df.collect().await {
            Ok(_) => panic!("{sql}: answered"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

async fn spent(ctx: &FedContext, table: &str) -> Vec<f64> {
    let lines = budget_of(ctx, table).await;
    lines.into_iter().map(|(_, spent, _)| spent).collect()
}

#[tokio::test]
async fn a_query_past_the_sites_epsilon_cap_is_refused_before_it_runs() {
    let dir = tempfile::TempDir::new().unwrap();
    let ctx = people(dir.path(), "'dp_budget' '100', 'min_group_rows' '5'").await;
    // The default cap is 1 per query, summed over the query's DP calls.
    for (sql, asked) in [
        ("SELECT dp_count(*, 1.5) FROM t", "1.5"),
        ("SELECT dp_count(*), dp_sum(systolic, 0, 200) FROM t", "2"),
        (
            "SELECT dp_sum(systolic, 0, 1000, 1e9) FROM t WHERE id = 3",
            "1000000000",
        ),
        ("SELECT dp_count(*, 4e12) FROM t", "4000000000000"),
    ] {
        let err = refusal(&ctx, sql).await;
        assert!(err.contains("its dp_max_epsilon=1 policy"), "{sql}: {err}");
        assert!(err.contains(&format!("ε = {asked} here")), "{sql}: {err}");
    }
    assert_eq!(
        spent(&ctx, "t").await,
        [0.0, 0.0],
        "refused before any debit"
    );
    // Within the cap: answered, and debited. 0.2 + 0.7 + 0.1 = 1 exactly.
    one_row(
        &ctx,
        "SELECT dp_count(*, 0.2), dp_sum(systolic, 0, 200, 0.7), dp_count(id, 0.1) FROM t",
    )
    .await;
    assert_eq!(spent(&ctx, "t").await, [1.0, 1.0]);

    // A table's own cap, lower or higher.
    let low = tempfile::TempDir::new().unwrap();
    let ctx = people(low.path(), "'dp_max_epsilon' '0.5'").await;
    let err = refusal(&ctx, "SELECT dp_count(*, 0.6) FROM t").await;
    assert!(err.contains("its dp_max_epsilon=0.5 policy"), "{err}");
    one_row(&ctx, "SELECT dp_count(*, 0.5) FROM t").await;
    let high = tempfile::TempDir::new().unwrap();
    let ctx = people(high.path(), "'dp_max_epsilon' '3'").await;
    one_row(&ctx, "SELECT dp_count(*), dp_sum(systolic, 0, 200) FROM t").await;
    // Even the largest cap keeps the ledger far from saturating.
    let most = tempfile::TempDir::new().unwrap();
    let ctx = people(most.path(), "'dp_max_epsilon' '8589934592'").await;
    let err = refusal(&ctx, "SELECT dp_count(*, 4e12) FROM t").await;
    assert!(err.contains("dp_max_epsilon"), "{err}");
    // Caps and budgets that are not a positive finite ε are refused.
    for bad in [
        "'dp_max_epsilon' '0'",
        "'dp_max_epsilon' '-1'",
        "'dp_max_epsilon' 'inf'",
        "'dp_max_epsilon' 'NaN'",
        "'dp_max_epsilon' '1e300'",
        "'dp_budget' '1e300'",
    ] {
        let dir = tempfile::TempDir::new().unwrap();
        people_files(dir.path());
        let err = FedContext::new()
            .sql(&format!(
                "CREATE FEDERATED TABLE t STORED AS CSV LOCATION '{}' OPTIONS ({bad})",
                dir.path().display()
            ))
            .await
            .err()
            .unwrap_or_else(|| panic!("{bad}: accepted"))
            .to_string();
        assert!(err.contains("expected"), "{bad}: {err}");
    }
}

#[tokio::test]
async fn dp_state_is_exempt_from_k_only_under_a_finite_budget() {
    let one_person = "SELECT dp_sum(systolic, 0, 200, 0.5) FROM t WHERE id = 3";
    // The default budget is unlimited: k applies to DP state too.
    let dir = tempfile::TempDir::new().unwrap();
    let ctx = people(dir.path(), "'min_group_rows' '5'").await;
    let err = refusal(&ctx, one_person).await;
    assert!(err.contains("min_group_rows"), "{err}");
    one_row(
        &ctx,
        "SELECT dp_sum(systolic, 0, 200, 0.5) FROM t WHERE id > 2",
    )
    .await;
    // Under a finite budget, DP-only state is exempt (the noise and the
    // budget protect it)...
    let dir = tempfile::TempDir::new().unwrap();
    let ctx = people(dir.path(), "'min_group_rows' '5', 'dp_budget' '10'").await;
    one_row(&ctx, one_person).await;
    // ... but not a query that also asks for an exact aggregate, wherever
    // it stands: the site's own row count is told by identity.
    for sql in [
        "SELECT dp_sum(systolic, 0, 200, 0.5), count(*) FROM t WHERE id = 3",
        "SELECT count(*), dp_sum(systolic, 0, 200, 0.5) FROM t WHERE id = 3",
        "SELECT dp_count(id, 1.0), count(*) FROM t WHERE id = 3",
        "SELECT dp_count(id, 0.5), sum(systolic) FROM t WHERE id = 3",
    ] {
        let err = refusal(&ctx, sql).await;
        assert!(err.contains("min_group_rows"), "{sql}: {err}");
    }
    // Over enough rows, the mix answers.
    one_row(
        &ctx,
        "SELECT count(*), dp_sum(systolic, 0, 200, 0.5) FROM t WHERE id > 2",
    )
    .await;
}

#[tokio::test]
async fn a_dp_query_pays_before_it_runs_and_a_failed_run_spends_too() {
    // One client (the file of person 7): its `note` read as a number fails
    // at run time on person 7's text. (A cast would not fail: DP options
    // bring the disclosure policy, under which casts are NULL-on-error.)
    let dir = tempfile::TempDir::new().unwrap();
    people_files(dir.path());
    std::fs::remove_file(dir.path().join("b.csv")).unwrap();
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t (id BIGINT, systolic BIGINT, note BIGINT) STORED AS CSV LOCATION '{}' OPTIONS ('dp_budget' '1')",
        dir.path().display()
    ))
    .await
    .unwrap();
    let failing = "SELECT dp_sum(note, 0, 100, 0.25) FROM t";
    let err = refusal(&ctx, failing).await;
    assert!(!err.contains("dp_budget"), "a run-time failure: {err}");
    assert_eq!(spent(&ctx, "t").await, [0.25], "the failed run paid");
    // Until the budget is spent, and then the same question is refused
    // before it runs, failing or not: no answer, not even a failure, for
    // free.
    for _ in 0..3 {
        let err = refusal(&ctx, failing).await;
        assert!(!err.contains("dp_budget"), "{err}");
    }
    assert_eq!(spent(&ctx, "t").await, [1.0]);
    for sql in [
        failing,
        "SELECT dp_sum(note, 0, 100, 0.25) FROM t WHERE id <> 7",
    ] {
        let err = refusal(&ctx, sql).await;
        assert!(err.contains("only ε = 0 of 1 remains"), "{sql}: {err}");
    }
}

#[tokio::test]
async fn bounds_that_would_change_a_dp_sums_type_are_refused_before_any_debit() {
    let dir = tempfile::TempDir::new().unwrap();
    let ctx = people(dir.path(), "'dp_budget' '1'").await;
    let err = refusal(&ctx, "SELECT dp_sum(systolic, 0, 2000000, 0.1) FROM t").await;
    assert!(err.contains("2^20"), "{err}");
    assert_eq!(spent(&ctx, "t").await, [0.0, 0.0]);
    // As a DOUBLE, wide bounds are fine.
    one_row(
        &ctx,
        "SELECT dp_sum(CAST(systolic AS DOUBLE), 0, 2000000, 0.1) FROM t",
    )
    .await;
    let b = one_row(&ctx, "SELECT dp_sum(systolic, 0, 1048576, 0.1) FROM t").await;
    assert_eq!(
        b.schema().field(0).data_type(),
        &datafusion::arrow::datatypes::DataType::Int64
    );
}

/// Workers over the people files under their default disclosure policy,
/// with `configure` changing the DP settings.
async fn people_workers(
    files: &[std::path::PathBuf],
    configure: impl Fn(&mut fedsql::site::worker::WorkerConfig) + Send + Sync + 'static,
) -> (crate::remote::Workers, FedContext) {
    let workers = crate::remote::Workers::start_with(files, "t", move |mut config| {
        config.policy = Some(fedsql::site::release::policy::DisclosurePolicy::default());
        configure(&mut config);
        config
    })
    .await;
    let ctx = FedContext::new();
    ctx.sql(&workers.create("t")).await.unwrap();
    (workers, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_refuse_epsilon_past_their_cap_and_hold_unbudgeted_dp_to_k() {
    let dir = tempfile::TempDir::new().unwrap();
    let files = people_files(dir.path());
    // Default settings: cap 1, unlimited budget, k = 5.
    let (_workers, ctx) = people_workers(&files, |_| {}).await;
    for sql in [
        "SELECT dp_sum(systolic, 0, 1000, 1e9) FROM t WHERE id = 3",
        "SELECT dp_count(*, 4e12) FROM t",
        "SELECT dp_count(*, 0.6), dp_count(id, 0.6) FROM t",
    ] {
        let err = refusal(&ctx, sql).await;
        assert!(err.contains("its dp_max_epsilon=1 policy"), "{sql}: {err}");
    }
    for sql in [
        "SELECT dp_sum(systolic, 0, 1000, 0.5) FROM t WHERE id = 3",
        "SELECT dp_sum(systolic, 0, 1000, 0.5), count(*) FROM t WHERE id = 3",
        "SELECT count(*), dp_count(id, 0.5) FROM t WHERE id = 3",
    ] {
        let err = refusal(&ctx, sql).await;
        assert!(err.contains("min_group_rows"), "{sql}: {err}");
    }
    let b = one_row(&ctx, "SELECT dp_count(*, 0.5) FROM t").await;
    assert!((int(&b, 0, 0) - 20).abs() < 40, "{}", int(&b, 0, 0));

    // A lower cap of the worker's own; a finite budget exempts DP state.
    let ledgers = tempfile::TempDir::new().unwrap();
    let at = ledgers.path().to_path_buf();
    let (_workers, ctx) = people_workers(&files, move |config| {
        config.dp.set("dp_max_epsilon", "0.5").unwrap();
        config.dp.set("dp_budget", "5").unwrap();
        let stem = config.tables[0].1.file_stem().unwrap().to_owned();
        config.dp_ledger = Some(at.join(stem).with_extension("ledger"));
    })
    .await;
    let err = refusal(&ctx, "SELECT dp_count(*, 0.6) FROM t").await;
    assert!(err.contains("its dp_max_epsilon=0.5 policy"), "{err}");
    one_row(
        &ctx,
        "SELECT dp_sum(systolic, 0, 1000, 0.5) FROM t WHERE id = 3",
    )
    .await;
    let err = refusal(
        &ctx,
        "SELECT dp_sum(systolic, 0, 1000, 0.25), count(*) FROM t WHERE id = 3",
    )
    .await;
    assert!(err.contains("min_group_rows"), "{err}");
    // 0.5 for the answer, 0.25 for the refused mix: it ran (and was
    // refused by k) at h0, which holds person 3; h1 may have been stopped
    // before it paid when h0's refusal came back.
    let lines = budget_of(&ctx, "t").await;
    assert_eq!(lines[0].0, "h0");
    assert_eq!(lines[0].1, 0.75, "{lines:?}");
    assert!([0.5, 0.75].contains(&lines[1].1), "{lines:?}");
}

#[tokio::test]
async fn a_worker_without_a_disclosure_policy_refuses_to_start_with_dp_settings() {
    let dir = tempfile::TempDir::new().unwrap();
    let files = people_files(dir.path());
    for setting in ["dp_budget", "require_dp"] {
        let mut config = fedsql::site::worker::WorkerConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            vec![("t".into(), files[0].clone())],
            "token",
        );
        config.policy = None;
        config
            .dp
            .set(setting, if setting == "dp_budget" { "1" } else { "true" })
            .unwrap();
        let err = fedsql::site::worker::start(config)
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("policy = none"), "{setting}: {err}");
    }
}

/// A declared value is the group its column's type reads it as: `01` of
/// an integer column is the group 1 (the site holds its rows, not a
/// noise-only row beside them), values that read alike are one group
/// (counted once), and a value the type cannot hold is refused.
#[tokio::test]
async fn declared_values_are_read_as_the_columns_type() {
    let dir = tempfile::TempDir::new().unwrap();
    let ctx = people(
        dir.path(),
        "'dp_budget' '10000', 'dp_max_epsilon' '1000', 'dp_domain.id' '01, 2, 002, 14'",
    )
    .await;
    // At ε = 1000 the discrete Laplace noise is 0 but with probability
    // about 2e^-1000.
    let b = one_row(
        &ctx,
        "SELECT id, dp_count(*, 1000) AS n FROM t GROUP BY id ORDER BY id",
    )
    .await;
    let ids: Vec<i64> = (0..b.num_rows()).map(|r| int(&b, 0, r)).collect();
    let counts: Vec<i64> = (0..b.num_rows()).map(|r| int(&b, 1, r)).collect();
    assert_eq!(ids, [1, 2, 14]);
    assert_eq!(counts, [1, 1, 1], "each id's one row, once");

    let ctx = people(
        tempfile::TempDir::new().unwrap().path(),
        "'dp_budget' '10000', 'dp_domain.id' '1, x'",
    )
    .await;
    let err = refusal(&ctx, "SELECT id, dp_count(*) FROM t GROUP BY id").await;
    assert!(
        err.contains("a declared dp_domain value of `id` is not a Int64") && err.contains("'x'"),
        "{err}"
    );
}
