//! A red-team review of the site's promise: no answer depends on one
//! person's record beyond what thresholds / DP allow, and the site fails
//! closed. Each test asserts the *safe* outcome, so a failing test is a
//! finding. Most attacks are differential: a condition `{}` on one person
//! (id = 3 at site `a`) is made true (`x > 100`) or false (`x > 1000`); a
//! query whose legitimate answer is the same either way must answer (or
//! refuse) the same either way.

use std::path::{Path, PathBuf};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::{Action, Ticket};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;
use fedsql::FedContext;
use fedsql::protocol::codec::plan_to_bytes;
use fedsql::protocol::flight::{ACTION_EXPLAIN, EncodeRequest, TicketCommand, ticket_command};
use fedsql::site::release::policy::DisclosurePolicy;
use futures::TryStreamExt;
use prost::Message;
use tempfile::TempDir;

use crate::remote::{TOKEN, Workers, flight, run, with_token};
use crate::support::rows_of;

/// Three sites: `a` with 30 rows, `b` with 10, `c` with none; `id` is
/// unique, `x` a measurement (person 3 has x = 161.5).
pub(crate) fn write_sites(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut id = 0;
    for (site, rows) in [("a", 30), ("b", 10), ("c", 0)] {
        let mut csv = String::from("id,g,x\n");
        for r in 0..rows {
            id += 1;
            let g = if r % 2 == 0 { "p" } else { "q" };
            csv.push_str(&format!("{id},{g},{}.5\n", (id * 7) % 23 + 140));
        }
        let path = dir.join(format!("{site}.csv"));
        std::fs::write(&path, csv).unwrap();
        files.push(path);
    }
    files
}

pub(crate) async fn in_process_with(files: &[PathBuf], options: &str) -> FedContext {
    let ctx = FedContext::new();
    let clients: Vec<String> = files
        .iter()
        .map(|f| {
            let name = f.file_stem().unwrap().to_string_lossy();
            format!("'{name}' = '{}'", f.display())
        })
        .collect();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t (id BIGINT, g VARCHAR, x DOUBLE) CLIENTS ({}) OPTIONS ({options})",
            clients.join(", ")
        ),
    )
    .await
    .unwrap();
    ctx
}

/// The table in process under a worker's default policy (k = 5).
pub(crate) async fn in_process(files: &[PathBuf]) -> FedContext {
    in_process_with(files, "'min_group_rows' '5'").await
}

/// The table at workers with their default policy.
pub(crate) async fn at_workers(files: &[PathBuf]) -> (Workers, FedContext) {
    let workers = Workers::start_with(files, "t", |mut c| {
        c.policy = Some(DisclosurePolicy::default());
        c
    })
    .await;
    let ctx = FedContext::new();
    run(&ctx, &workers.create("t")).await.unwrap();
    (workers, ctx)
}

pub(crate) async fn answer(ctx: &FedContext, sql: &str) -> Result<String, String> {
    run(ctx, sql)
        .await
        .map(|b| format!("{:?}", rows_of(&b)))
        .map_err(|e| e.to_string())
}

pub(crate) const YES: &str = "id = 3 AND x > 100";
pub(crate) const NO: &str = "id = 3 AND x > 1000";

/// Runs each probe with the condition true and false; returns the probes
/// whose outcome differs (a finding each).
pub(crate) async fn differential(ctx: &FedContext, where_: &str, probes: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for probe in probes {
        let yes = answer(ctx, &probe.replace("{}", YES)).await;
        let no = answer(ctx, &probe.replace("{}", NO)).await;
        eprintln!("[{where_}] {probe}\n    yes: {yes:?}\n    no:  {no:?}");
        if yes != no {
            found.push(format!(
                "[{where_}] {probe}\n    yes: {yes:?}\n    no:  {no:?}"
            ));
        }
    }
    found
}

/// Sketch and cluster states that keep sums: `approx_percentile_cont`,
/// `approx_median` and `kmeans_step` add their inputs, so the `ELSE 0`
/// isolation is refused through them exactly as through `sum` (a refusal
/// is the one bit the threat model states; no value leaves).
#[tokio::test]
async fn else_zero_through_counting_aggregates() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (_workers, remote) = at_workers(&files).await;
    let probes = [
        "SELECT approx_percentile_cont(CASE WHEN {} THEN 1000.0 ELSE 0.0 END, 0.99) FROM t",
        "SELECT approx_median(CASE WHEN {} THEN 1000.0 ELSE 0.0 END) FROM t",
        "SELECT kmeans_step('centers=0;100000', CASE WHEN {} THEN 1000.0 ELSE 0.0 END) FROM t",
        "SELECT approx_percentile_cont(CASE WHEN {} THEN x ELSE 0.0 END, 1.0) FROM t",
        // Control: the same isolation through sum.
        "SELECT sum(CASE WHEN {} THEN 1000.0 ELSE 0.0 END) FROM t",
    ];
    let mut found = Vec::new();
    for (where_, ctx) in [("in process", &local), ("worker", &remote)] {
        for probe in probes {
            let yes = answer(ctx, &probe.replace("{}", YES)).await;
            let refused = yes
                .as_ref()
                .is_err_and(|e| e.contains("refused") && e.contains("min_group_rows"));
            if !refused {
                found.push(format!("[{where_}] {probe}\n    yes: {yes:?}"));
            }
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// An exact count(*) after a DP aggregate must not escape the thresholds:
/// the exemption is decided by which aggregates were asked for, so the
/// one person's row is refused by k (the refusal bit the threat model
/// states), never counted out.
#[tokio::test]
async fn exact_count_after_a_dp_aggregate() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (_workers, remote) = at_workers(&files).await;
    let probes = [
        "SELECT dp_count(*) > -1000000 AS d, count(*) AS n FROM t WHERE {}",
        "SELECT dp_sum(x, 0, 1000) > -1e12 AS d, count(1) AS n FROM t WHERE {}",
    ];
    let mut found = Vec::new();
    for (where_, ctx) in [("in process", &local), ("worker", &remote)] {
        for probe in probes {
            let yes = answer(ctx, &probe.replace("{}", YES)).await;
            if !yes.as_ref().is_err_and(|e| e.contains("min_group_rows")) {
                found.push(format!("[{where_}] {probe}\n    yes: {yes:?}"));
            }
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// An outer join that keeps the shared side makes rows that are no one's:
/// four padding rows and one person make a group of "5".
#[tokio::test]
async fn phantom_rows_from_an_outer_join_pass_k() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (_workers, remote) = at_workers(&files).await;
    let probes = [
        "SELECT sum(coalesce(t.x, 1.0)) AS s FROM (VALUES (3), (1001), (1002), (1003), (1004)) s(k) LEFT JOIN t ON t.id = s.k AND {}",
        "SELECT count(t.id) AS n, count(*) AS all FROM (VALUES (3), (1001), (1002), (1003), (1004)) s(k) LEFT JOIN t ON t.id = s.k AND {}",
        "SELECT sum(coalesce(t.x, 1.0)) AS s FROM t RIGHT JOIN (VALUES (3), (1001), (1002), (1003), (1004)) s(k) ON t.id = s.k AND {}",
        "SELECT sum(coalesce(t.x, 1.0)) AS s FROM t FULL JOIN (VALUES (3), (1001), (1002), (1003), (1004)) s(k) ON t.id = s.k WHERE s.k IS NOT NULL AND ({} OR t.id IS NULL)",
    ];
    let mut found = differential(&local, "in process", &probes).await;
    found.extend(differential(&remote, "worker", &probes).await);
    // Person 3's exact x (161.5): 4 padding ones + x, at one site.
    for (where_, ctx) in [("in process", &local), ("worker", &remote)] {
        let got = answer(
            ctx,
            "SELECT sum(coalesce(t.x, 1.0)) - 12 AS x3 FROM (VALUES (3), (1001), (1002), (1003), (1004)) s(k) LEFT JOIN t ON t.id = s.k",
        )
        .await;
        eprintln!("[{where_}] x3 through phantom rows: {got:?}");
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// Evaluation failures the never-fail rewrite may miss: whether the query
/// fails must not depend on one row. Each probe's legitimate answer is
/// the same either way (`OR x > 0` keeps every row).
#[tokio::test]
async fn error_oracles_variants() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (_workers, remote) = at_workers(&files).await;
    let probes = [
        // Integer arithmetic past its range (not rewritten: + - *).
        "SELECT count(*) FROM t WHERE (CASE WHEN {} THEN 9223372036854775807 ELSE 1 END) + id > 0 OR x > 0",
        "SELECT count(*) FROM t WHERE (CASE WHEN {} THEN 9223372036854775807 ELSE 1 END) * 2 > 0 OR x > 0",
        "SELECT count(*) FROM t WHERE -((CASE WHEN {} THEN -9223372036854775807 ELSE 1 END) - 2) > 0 OR x > 0",
        // Decimal arithmetic past its precision.
        "SELECT count(*) FROM t WHERE CAST(x AS DECIMAL(38,0)) * (CASE WHEN {} THEN CAST('90000000000000000000000000000000000000' AS DECIMAL(38,0)) ELSE CAST(1 AS DECIMAL(38,0)) END) > 0 OR x > 0",
        "SELECT count(*) FROM t WHERE (CASE WHEN {} THEN CAST('99999999999999999999999999999999999999' AS DECIMAL(38,0)) ELSE CAST(1 AS DECIMAL(38,0)) END) + CAST(id AS DECIMAL(38,0)) > 0 OR x > 0",
        "SELECT count(*) FROM t WHERE CAST(x AS DECIMAL(10,2)) * (CASE WHEN {} THEN CAST('99999999.99' AS DECIMAL(10,2)) ELSE CAST(1 AS DECIMAL(10,2)) END) > 0 OR x > 0",
        // Shifts and bit operators.
        "SELECT count(*) FROM t WHERE (id << (CASE WHEN {} THEN 200 ELSE 1 END)) > -1 OR x > 0",
        // Timestamps.
        "SELECT count(*) FROM t WHERE to_timestamp_seconds(CASE WHEN {} THEN 9223372036854775807 ELSE 0 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE to_timestamp(CASE WHEN {} THEN 1e300 ELSE 0 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE date_bin(INTERVAL '1 day', to_timestamp_seconds(CASE WHEN {} THEN 9223372036854775 ELSE 0 END)) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE (INTERVAL '1 day' * (CASE WHEN {} THEN 2147483647 ELSE 1 END)) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE date_part('year', to_timestamp_seconds(CASE WHEN {} THEN 9223372036854775 ELSE 0 END)) > 0 OR x > 0",
        "SELECT count(*) FROM t WHERE to_char(to_timestamp_seconds(0), CASE WHEN {} THEN '%Q%' ELSE '%Y' END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE to_date(CASE WHEN {} THEN '2020-13-45' ELSE '2020-01-01' END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE make_time(CASE WHEN {} THEN 99 ELSE 1 END, 0, 0) IS NOT NULL OR x > 0",
        // Strings.
        "SELECT count(*) FROM t WHERE split_part(g, ',', CASE WHEN {} THEN 0 ELSE 1 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE substr(g, 1, CASE WHEN {} THEN -1 ELSE 1 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE concat(g, CASE WHEN {} THEN arrow_typeof(x) ELSE 'a' END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE levenshtein(g, CASE WHEN {} THEN 'xxxxxxxx' ELSE 'p' END) > -1 OR x > 0",
        "SELECT count(*) FROM t WHERE to_hex(CASE WHEN {} THEN -1 ELSE 1 END) IS NOT NULL OR x > 0",
        // Arrays.
        "SELECT count(*) FROM t WHERE array_element(make_array(1, 2), CASE WHEN {} THEN -9223372036854775807 ELSE 1 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE array_length(make_array(1, 2), CASE WHEN {} THEN 0 ELSE 1 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE cardinality(make_array(make_array(1), make_array(CASE WHEN {} THEN 2 ELSE 1 END))) > 0 OR x > 0",
        // Maths.
        "SELECT count(*) FROM t WHERE power(CASE WHEN {} THEN 0 ELSE 2 END, -1) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE round(x, CASE WHEN {} THEN 2147483647 ELSE 1 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE gcd(CASE WHEN {} THEN -9223372036854775807 - 1 ELSE 1 END, 0) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE abs(CASE WHEN {} THEN -9223372036854775807 - 1 ELSE 1 END) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE CAST(CASE WHEN {} THEN 1e300 ELSE 1 END AS BIGINT) IS NOT NULL OR x > 0",
        "SELECT count(*) FROM t WHERE log(CASE WHEN {} THEN 0 ELSE 2 END, 8) IS NOT NULL OR x > 0",
        // Aggregates over crafted values (their answer would be the same).
        "SELECT count(*), sum(CASE WHEN id = 4 OR ({}) THEN CAST('90000000000000000000000000000000000000' AS DECIMAL(38,0)) ELSE CAST(1 AS DECIMAL(38,0)) END) IS NULL AS z FROM t",
        "SELECT count(*), avg(CASE WHEN id = 4 OR ({}) THEN CAST('90000000000000000000000000000000000000' AS DECIMAL(38,0)) ELSE CAST(1 AS DECIMAL(38,0)) END) IS NULL AS z FROM t",
        "SELECT count(*), bit_xor(CASE WHEN {} THEN 1 ELSE 0 END) IS NULL FROM t",
    ];
    let mut found = differential(&local, "in process", &probes).await;
    found.extend(differential(&remote, "worker", &probes).await);
    // A histogram's count of missing values is a cell like its bins: one
    // NaN is refused (the threat model's one bit), never released.
    // So is one value apart from all the others' one value (an adding
    // aggregate's input): refused, never failing on the value.
    let nan = "SELECT count(*), histogram(CASE WHEN {} THEN 'NaN'::double ELSE 100.0 END, 0, 200, 2) AS h FROM t";
    let apart = [
        nan,
        "SELECT count(*), sum(CASE WHEN {} THEN 9223372036854775807 ELSE 1 END) * 0 AS z FROM t",
        "SELECT count(*), approx_percentile_cont(CASE WHEN {} THEN 'NaN'::double ELSE 100.0 END, 0.5) AS m FROM t",
        "SELECT count(*), var(CASE WHEN {} THEN 'NaN'::double ELSE 100.0 END) IS NULL AS v FROM t",
    ];
    for (where_, ctx) in [("in process", &local), ("worker", &remote)] {
        for nan in apart {
            let yes = answer(ctx, &nan.replace("{}", YES)).await;
            if !yes.as_ref().is_err_and(|e| e.contains("min_group_rows")) {
                found.push(format!("[{where_}] {nan}\n    yes: {yes:?}"));
            }
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// A table with DP settings only (no disclosure-policy key): does it keep
/// the site's join and error-oracle protections?
#[tokio::test]
async fn dp_only_table_keeps_the_site_protections() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(&files, "'require_dp' 'true', 'dp_budget' '1000'").await;
    let mut found = Vec::new();
    // Amplification: 2000 copies of one person answer a yes/no question
    // under noise of scale 1/ε.
    let values: Vec<String> = (1..=2000).map(|i| format!("({i})")).collect();
    let sql = format!(
        "SELECT dp_count(*, 0.5) AS n FROM t CROSS JOIN (VALUES {}) v(i) WHERE {{}}",
        values.join(", ")
    );
    let yes = answer(&local, &sql.replace("{}", YES)).await;
    let no = answer(&local, &sql.replace("{}", NO)).await;
    eprintln!("dp amplification: yes {yes:?} no {no:?}");
    if yes.is_ok() {
        found.push(format!(
            "CROSS JOIN amplification answered under require_dp: yes {yes:?}, no {no:?}"
        ));
    }
    // Error oracle: a cast that fails only on person 3's row.
    let probe = "SELECT dp_count(*, 0.5) > -100000 AS n FROM t WHERE CAST(CASE WHEN {} THEN 'zz' ELSE '1' END AS INT) > 0 OR x > 0";
    let yes = answer(&local, &probe.replace("{}", YES)).await;
    let no = answer(&local, &probe.replace("{}", NO)).await;
    eprintln!("dp error oracle: yes {yes:?} no {no:?}");
    if yes != no {
        found.push(format!(
            "error oracle under require_dp: yes {yes:?}, no {no:?}"
        ));
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// What a worker's errors and EXPLAIN show: never its file path.
#[tokio::test]
async fn a_worker_never_shows_its_path() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let (workers, remote) = at_workers(&files).await;
    let path = dir.path().to_string_lossy().to_string();
    let mut found = Vec::new();
    for sql in [
        "EXPLAIN FEDERATED SELECT count(*), avg(x) FROM t",
        "EXPLAIN FEDERATED SELECT g, count(*) FROM t GROUP BY g",
    ] {
        let text = answer(&remote, sql).await;
        if format!("{text:?}").contains(&path) {
            found.push(format!("{sql}: shows the worker's path"));
        }
    }
    // As a hostile coordinator: the explain action, straight.
    let ctx = &remote;
    let plan = ctx
        .session()
        .state()
        .create_logical_plan("SELECT count(*), avg(x) FROM t")
        .await
        .unwrap();
    let plan = fedsql::coordinator::client_column::bind_plan(plan, "h0").unwrap();
    let bytes = plan_to_bytes(&aggregate_of(&plan), "t").await.unwrap();
    let body = EncodeRequest {
        plan: bytes,
        fit_scope: None,
    }
    .encode_to_vec();
    let addr = workers.workers[0].addr();
    let reply = flight(addr)
        .await
        .do_action(with_token(
            Action {
                r#type: ACTION_EXPLAIN.into(),
                body: body.into(),
            },
            TOKEN,
        ))
        .await;
    if let Ok(reply) = reply {
        let results: Vec<arrow_flight::Result> =
            reply.into_inner().try_collect().await.unwrap_or_default();
        for r in results {
            let text = String::from_utf8_lossy(&r.body).to_string();
            eprintln!("explain action: {text}");
            if text.contains(&path) {
                found.push("the explain action shows the worker's path".into());
            }
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// The first aggregate node of a plan (its root aggregate).
pub(crate) fn aggregate_of(plan: &LogicalPlan) -> LogicalPlan {
    let mut found = None;
    plan.apply(|node| {
        if matches!(node, LogicalPlan::Aggregate(_)) {
            found = Some(node.clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    found.unwrap()
}

/// Sends an encoder of `sql` straight to worker 0 (hostile coordinator).
#[allow(dead_code)]
async fn send(workers: &Workers, ctx: &FedContext, sql: &str) -> Result<Vec<RecordBatch>, String> {
    let plan = ctx
        .session()
        .state()
        .create_logical_plan(sql)
        .await
        .map_err(|e| e.to_string())?;
    let plan =
        fedsql::coordinator::client_column::bind_plan(plan, "h0").map_err(|e| e.to_string())?;
    let bytes = plan_to_bytes(&aggregate_of(&plan), "t")
        .await
        .map_err(|e| e.to_string())?;
    let ticket = TicketCommand {
        command: Some(ticket_command::Command::Encode(EncodeRequest {
            plan: bytes,
            fit_scope: None,
        })),
    }
    .encode_to_vec();
    let addr = workers.workers[0].addr();
    let stream = flight(addr)
        .await
        .do_get(with_token(
            Ticket {
                ticket: ticket.into(),
            },
            TOKEN,
        ))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect::<Vec<RecordBatch>>()
        .await
        .map_err(|e| e.to_string())
}

/// A hostile coordinator sends the outer join the coordinator refuses:
/// the shared side's unmatched rows pad one person's group to k.
#[tokio::test]
async fn hostile_outer_join_pads_a_group_to_k() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let (workers, remote) = at_workers(&files).await;
    let mut found = Vec::new();
    for sql in [
        // Person 3's x (161.5) + 4 padding ones = 165.5, at site a.
        "SELECT sum(coalesce(t.x, 1.0)) AS s FROM (VALUES (3), (1001), (1002), (1003), (1004)) s(k) LEFT JOIN t ON t.id = s.k",
        "SELECT sum(coalesce(t.x, 1.0)) AS s FROM t RIGHT JOIN (VALUES (3), (1001), (1002), (1003), (1004)) s(k) ON t.id = s.k",
    ] {
        let got = send(&workers, &remote, sql).await;
        eprintln!("{sql}: {got:?}");
        if let Ok(batches) = got {
            found.push(format!("{sql}: released {:?}", rows_of(&batches)));
        }
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// Under require_dp with a budget, a query that fails at the site must
/// be debited like one that answers: once the budget is spent, both are
/// the same budget refusal (which site's refusal arrives first is timing,
/// not data, so the site's name is left out of the comparison).
#[tokio::test]
async fn a_failing_dp_query_is_a_free_oracle() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(
        &files,
        "'min_group_rows' '5', 'require_dp' 'true', 'dp_budget' '1'",
    )
    .await;
    // Spend the whole budget.
    let spent = answer(&local, "SELECT dp_count(*, 1.0) FROM t").await;
    eprintln!("spend: {spent:?}");
    let probe = "SELECT dp_count(*, 0.5) FROM t WHERE CAST(x AS DECIMAL(38,0)) * (CASE WHEN {} THEN CAST('90000000000000000000000000000000000000' AS DECIMAL(38,0)) ELSE CAST(1 AS DECIMAL(38,0)) END) > 0 OR x > 0";
    let unnamed = |a: Result<String, String>| {
        a.map_err(|e| {
            e.split_once(" refused: ")
                .map_or(e.clone(), |(_, r)| r.to_string())
        })
    };
    let yes = unnamed(answer(&local, &probe.replace("{}", YES)).await);
    let no = unnamed(answer(&local, &probe.replace("{}", NO)).await);
    assert_eq!(yes, no);
    assert!(yes.is_err_and(|e| e.contains("only ε = 0 of 1 remains")));
}

/// `IS NOT DISTINCT FROM` makes an equi-join whose NULL keys match: the
/// uniqueness check leaves NULL keys out, so five NULL rows on the shared
/// side make one person (whose key is NULL) five rows.
#[tokio::test]
async fn null_equal_join_amplifies_one_person() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process(&files).await;
    let (workers, remote) = at_workers(&files).await;
    let probes = [
        "SELECT count(*) AS n, sum(t.x) AS s FROM t JOIN (VALUES (CAST(NULL AS BIGINT)), (NULL), (NULL), (NULL), (NULL)) s(k) ON (CASE WHEN {} THEN NULL ELSE -1 END) IS NOT DISTINCT FROM s.k",
    ];
    let mut found = differential(&local, "in process", &probes).await;
    found.extend(differential(&remote, "worker", &probes).await);
    // As a hostile coordinator, too.
    let sql = probes[0].replace("{}", YES);
    let got = send(&workers, &remote, &sql).await;
    eprintln!("hostile: {got:?}");
    if let Ok(b) = got {
        found.push(format!("hostile coordinator: released {:?}", rows_of(&b)));
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// The same NULL-equal join under require_dp: 1000 copies of one person
/// answer a yes/no question far above the noise of dp_count.
#[tokio::test]
async fn null_equal_join_amplifies_dp() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let local = in_process_with(
        &files,
        "'min_group_rows' '5', 'require_dp' 'true', 'dp_budget' '10'",
    )
    .await;
    let nulls: Vec<&str> = std::iter::repeat_n("(NULL)", 999).collect();
    let sql = format!(
        "SELECT dp_count(*, 0.5) AS n FROM t JOIN (VALUES (CAST(NULL AS BIGINT)), {}) s(k) ON (CASE WHEN {{}} THEN NULL ELSE -1 END) IS NOT DISTINCT FROM s.k",
        nulls.join(", ")
    );
    let yes = answer(&local, &sql.replace("{}", YES)).await;
    let no = answer(&local, &sql.replace("{}", NO)).await;
    eprintln!("dp null-equal amplification: yes {yes:?} no {no:?}");
    assert!(
        yes.is_err(),
        "answered under require_dp: yes {yes:?}, no {no:?}"
    );
}
