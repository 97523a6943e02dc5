//! Disclosure policy: each rule has a query that passes and a near twin
//! that is refused, in-process (the table's OPTIONS) and over workers (their
//! defaults and a TOML policy). What passes equals the answer without a
//! policy; what is refused names the site and the rule, never the data.

use std::path::{Path, PathBuf};

use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use fedsql::site::release::policy::DisclosurePolicy;
use fedsql::site::worker::{WorkerArgs, WorkerConfig};
use tempfile::TempDir;

use crate::remote::{Workers, run};
use crate::support::assert_same_result;

/// Three sites: `a` with 20 rows, `b` with 15 (two of them in the rare
/// group), `c` with none. Column `id` is unique, as a near-identifier is.
fn write_sites(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut id = 0;
    for (site, rows, rare) in [("a", 20, 0), ("b", 15, 2), ("c", 0, 0)] {
        let mut csv = String::from("id,g,x,y\n");
        for r in 0..rows {
            id += 1;
            let g = if r < rare {
                "rare"
            } else if r % 2 == 0 {
                "p"
            } else {
                "q"
            };
            csv.push_str(&format!("{id},{g},{}.5,{}\n", (id * 7) % 23, id % 3));
        }
        let path = dir.join(format!("{site}.csv"));
        std::fs::write(&path, csv).unwrap();
        files.push(path);
    }
    files
}

/// `CREATE FEDERATED TABLE t` over the sites, with `options` (may be empty).
async fn table(files: &[PathBuf], options: &str) -> FedContext {
    let ctx = FedContext::new();
    let clients: Vec<String> = files
        .iter()
        .map(|f| {
            let name = f.file_stem().unwrap().to_string_lossy();
            format!("'{name}' = '{}'", f.display())
        })
        .collect();
    let options = if options.is_empty() {
        String::new()
    } else {
        format!(" OPTIONS ({options})")
    };
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t (id BIGINT, g VARCHAR, x DOUBLE, y BIGINT) CLIENTS ({}){options}",
            clients.join(", ")
        ),
    )
    .await
    .unwrap();
    ctx
}

/// One worker per site with a worker's default policy, and a coordinator
/// over them (keep the workers alive while the coordinator is used).
async fn default_policy_workers(files: &[PathBuf]) -> (Workers, FedContext) {
    let workers = Workers::start_with(files, "t", |mut c: WorkerConfig| {
        c.policy = Some(DisclosurePolicy::default());
        c
    })
    .await;
    let remote = FedContext::new();
    run(&remote, &workers.create("t")).await.unwrap();
    (workers, remote)
}

async fn refusal(ctx: &FedContext, sql: &str) -> String {
    match run(ctx, sql).await {
        Ok(batches) => panic!("{sql}: answered {batches:?}"),
        Err(e) => e.to_string(),
    }
}

async fn answer(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    run(ctx, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

const PASSES: &[&str] = &[
    "SELECT count(*) AS n, avg(x) AS m, sum(y) AS s FROM t",
    "SELECT g, count(*) AS n, var_samp(x) AS v FROM t WHERE g <> 'rare' GROUP BY g ORDER BY g",
    "SELECT y, count(*) AS n FROM t GROUP BY y ORDER BY y",
    "SELECT count(*) AS n FROM t WHERE id > 100",
];

/// Near twins of what passes, each isolating one to four rows at a site.
const REFUSED: &[&str] = &[
    "SELECT g, count(*) AS n FROM t GROUP BY g",
    "SELECT avg(x) FROM t WHERE id = 17",
    "SELECT id, g, x, y, count(*) FROM t GROUP BY id, g, x, y",
    "SELECT g, y, count(*) FROM t GROUP BY CUBE (g, y)",
];

#[tokio::test]
async fn min_group_rows_in_process() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    for sql in PASSES {
        assert_same_result(
            sql,
            &answer(&guarded, sql).await,
            &answer(&open, sql).await,
            true,
            1e-12,
        );
    }
    for sql in REFUSED {
        // Without a policy the same query is answered.
        answer(&open, sql).await;
        let e = refusal(&guarded, sql).await;
        assert!(
            e.contains("client 'b' refused") || e.contains("client 'a' refused"),
            "{sql}: {e}"
        );
        assert!(
            e.contains("fewer than 5 of its rows (its min_group_rows policy)"),
            "{sql}: {e}"
        );
        assert!(
            e.contains("hint: use coarser groups or a wider filter"),
            "{sql}: {e}"
        );
        // Neither the group nor the row count is disclosed.
        assert!(!e.contains("rare") && !e.contains("17"), "{sql}: {e}");
    }
}

#[tokio::test]
async fn extremes_and_identifying_sketches_in_process() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let refuse = table(&files, "'min_group_rows' '5', 'extremes' 'refuse'").await;
    let allow = table(&files, "'min_group_rows' '5', 'extremes' 'allow'").await;
    for sql in [
        "SELECT max(x) FROM t",
        "SELECT min(id) FROM t",
        "SELECT bit_or(y) FROM t",
        "SELECT first_value(x ORDER BY id) FROM t",
    ] {
        let e = refusal(&refuse, sql).await;
        assert!(e.contains("extremes=refuse"), "{sql}: {e}");
        assert!(e.contains("approx_percentile_cont"), "{sql}: {e}");
        assert_same_result(
            sql,
            &answer(&allow, sql).await,
            &answer(&open, sql).await,
            true,
            0.0,
        );
    }
    for sql in [
        "SELECT approx_distinct(id) FROM t",
        "SELECT approx_percentile_cont_with_weight(y, 0.5) WITHIN GROUP (ORDER BY x) FROM t",
    ] {
        answer(&open, sql).await;
        let e = refusal(&allow, sql).await;
        assert!(
            e.contains("identifies the values it summarizes"),
            "{sql}: {e}"
        );
    }
}

/// A t-digest leaves a site with every centroid summarizing at least k
/// values, and with its first and last centroid means as its min and max:
/// the 0th and 100th percentiles are then the mean of a site's k smallest
/// (largest) values, never one row's value.
#[tokio::test]
async fn t_digests_leave_with_k_values_per_centroid() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let guarded = table(&files, "'min_group_rows' '5'").await;
    let sql = "SELECT approx_percentile_cont(0.0) WITHIN GROUP (ORDER BY x) AS lo, \
               approx_percentile_cont(1.0) WITHIN GROUP (ORDER BY x) AS hi, \
               approx_median(x) AS mid FROM t";
    let got = crate::support::rows_of(&answer(&guarded, sql).await);
    // Independently: each site's mean of its 5 smallest and 5 largest x.
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for file in &files[..2] {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_csv("s", file.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        let ends = ctx
            .sql(
                "SELECT (SELECT avg(x) FROM (SELECT x FROM s ORDER BY x LIMIT 5)) AS lo, \
                         (SELECT avg(x) FROM (SELECT x FROM s ORDER BY x DESC LIMIT 5)) AS hi",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let ends = crate::support::rows_of(&ends);
        lo = lo.min(ends[0][0].float());
        hi = hi.max(ends[0][1].float());
    }
    assert!(
        crate::support::close(got[0][0].float(), lo, 1e-12),
        "{got:?} vs {lo}"
    );
    assert!(
        crate::support::close(got[0][1].float(), hi, 1e-12),
        "{got:?} vs {hi}"
    );
    let mid = got[0][2].float();
    assert!(mid > lo && mid < hi, "{got:?}");
}

#[tokio::test]
async fn policy_options_are_checked() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let ctx = FedContext::new();
    let e = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('a' = '{}') OPTIONS ('extremes' 'sometimes')",
            files[0].display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("use allow or refuse"), "{e}");
    let e = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('a' = '{}') OPTIONS ('min_group_row' '5')",
            files[0].display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("min_group_rows"),
        "the valid keys are listed: {e}"
    );
}

#[tokio::test]
async fn workers_enforce_their_default_policy() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    // The worker's defaults, as `fedsql worker` without --policy has them.
    let (workers, remote) = default_policy_workers(&files).await;
    for sql in PASSES {
        assert_same_result(
            sql,
            &answer(&remote, sql).await,
            &answer(&open, sql).await,
            true,
            1e-12,
        );
    }
    for sql in REFUSED {
        let e = refusal(&remote, sql).await;
        // The coordinator's name for the worker, the rule, no data.
        assert!(
            e.contains("client 'h1' refused") || e.contains("client 'h0' refused"),
            "{sql}: {e}"
        );
        assert!(e.contains("min_group_rows policy"), "{sql}: {e}");
        assert!(!e.contains("rare") && !e.contains("17"), "{sql}: {e}");
    }
    let e = refusal(&remote, "SELECT max(x) FROM t").await;
    assert!(e.contains("extremes=refuse"), "{e}");
    // The worker logs every refusal with its reason.
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("REFUSED") && l.contains("min_group_rows")),
        "{logs:?}"
    );
}

#[tokio::test]
async fn a_worker_policy_comes_from_flags_and_toml() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("token"), "tok\n").unwrap();
    let config = dir.path().join("worker.toml");
    let args = |extra: &[&str]| {
        let mut args = WorkerArgs {
            listen: Some("127.0.0.1:0".into()),
            token_file: Some(dir.path().join("token")),
            tables: vec!["t=/srv/t.csv".into()],
            config: Some(config.clone()),
            ..Default::default()
        };
        for pair in extra.chunks(2) {
            match pair[0] {
                "--policy" => args.policy = Some(pair[1].into()),
                "--min-group-rows" => args.min_group_rows = Some(pair[1].parse().unwrap()),
                "--extremes" => args.extremes = Some(pair[1].into()),
                other => panic!("{other}"),
            }
        }
        args
    };
    std::fs::write(
        &config,
        "[policy]\nmin_group_rows = 10\nextremes = \"allow\"\n",
    )
    .unwrap();
    let c = WorkerConfig::from_args(&args(&[])).await.unwrap();
    let policy = c.policy.unwrap();
    assert_eq!(policy.min_group_rows, 10);
    assert!(policy.allow_extremes);
    assert_eq!(policy.max_groups, DisclosurePolicy::default().max_groups);
    // A flag wins over the file.
    let c = WorkerConfig::from_args(&args(&["--min-group-rows", "7", "--extremes", "refuse"]))
        .await
        .unwrap();
    let policy = c.policy.unwrap();
    assert_eq!((policy.min_group_rows, policy.allow_extremes), (7, false));
    // No [policy] section: the defaults.
    std::fs::write(&config, "").unwrap();
    let c = WorkerConfig::from_args(&args(&[])).await.unwrap();
    assert_eq!(c.policy, Some(DisclosurePolicy::default()));
    // Only explicitly none.
    let c = WorkerConfig::from_args(&args(&["--policy", "none"]))
        .await
        .unwrap();
    assert_eq!(c.policy, None);
    std::fs::write(&config, "policy = \"none\"\n").unwrap();
    let c = WorkerConfig::from_args(&args(&[])).await.unwrap();
    assert_eq!(c.policy, None);
    std::fs::write(&config, "[policy]\nmin_group_row = 3\n").unwrap();
    let e = WorkerConfig::from_args(&args(&[]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown policy setting `min_group_row`"), "{e}");
}

/// Under a policy a row's values never decide whether a query fails: the
/// matching and the non-matching row give the same outcome.
#[tokio::test]
async fn evaluation_errors_are_not_an_oracle() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    let probe = |id: i64| {
        format!("SELECT sum(CASE WHEN id = {id} THEN 1 / (y - y) ELSE 0 END) AS s FROM t")
    };
    // Without a policy the error tells whether row 3 exists.
    assert!(run(&open, &probe(3)).await.is_err());
    assert!(run(&open, &probe(999)).await.is_ok());
    // With one, both are answered alike.
    let hit = answer(&guarded, &probe(3)).await;
    let miss = answer(&guarded, &probe(999)).await;
    assert_same_result("probe", &hit, &miss, true, 0.0);
    // A cast that fails on some rows gives NULL there, and keeps its name.
    let sql = "SELECT count(CAST(g AS INT)) AS n, sum(CAST(x AS BIGINT)) AS s FROM t";
    assert!(run(&open, sql).await.is_err());
    let got = answer(&guarded, sql).await;
    let want = answer(
        &open,
        "SELECT count(TRY_CAST(g AS INT)) AS n, sum(TRY_CAST(x AS BIGINT)) AS s FROM t",
    )
    .await;
    assert_same_result(sql, &got, &want, true, 0.0);
}

/// A secure sum needs company: a site refuses a session of fewer distinct
/// participants than its `min_secure_clients`.
#[tokio::test]
async fn secure_sums_need_company() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let sql = "SELECT secure_sum(y, 0, 10) AS s FROM t";
    let three = table(&files, "'min_group_rows' '5'").await;
    let open = table(&files, "").await;
    assert_same_result(
        sql,
        &answer(&three, sql).await,
        &answer(&open, sql).await,
        true,
        0.0,
    );
    let four = table(&files, "'min_group_rows' '5', 'min_secure_clients' '4'").await;
    let e = refusal(&four, sql).await;
    assert!(
        e.contains("at least 4 participants (its min_secure_clients policy)"),
        "{e}"
    );
}

/// Nothing that crosses the wire carries data: a worker whose file gains a
/// malformed row after start-up fails the query with the one fixed refusal
/// and a reference into its own log, never the row, its kind or its path.
#[tokio::test]
async fn worker_errors_carry_no_data() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let (workers, remote) = default_policy_workers(&files).await;
    answer(&remote, "SELECT count(*), sum(x) FROM t").await;
    let mut text = std::fs::read_to_string(&files[0]).unwrap();
    text.push_str("999,p,secret-value-42,1\n");
    std::fs::write(&files[0], text).unwrap();
    let e = refusal(&remote, "SELECT count(*), sum(x) FROM t").await;
    assert!(e.contains(fedsql::site::local::EVALUATION_REFUSAL), "{e}");
    assert!(e.contains("(reference "), "{e}");
    assert!(
        !e.contains("secret-value-42") && !e.contains("parse"),
        "{e}"
    );
    let folder = dir.path().display().to_string();
    assert!(!e.contains(&folder), "{e}");
    // The full message stays in the worker's log, under the reference.
    let reference = e.split("reference ").nth(1).unwrap()[..8].to_string();
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains(&format!("error {reference}"))),
        "{logs:?}"
    );
}

/// `\clients` and `SHOW CLIENTS` show each site's policy; a worker
/// announces its policy with its schema.
#[tokio::test]
async fn clients_show_their_policy() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let guarded = table(&files, "'min_group_rows' '7'").await;
    let shown = guarded.clients_batch("t").await.unwrap();
    let policies = datafusion::arrow::array::AsArray::as_string::<i32>(
        shown.column_by_name("policy").unwrap(),
    );
    assert!(policies.value(0).contains("min_group_rows=7"), "{shown:?}");
    let (_workers, remote) = default_policy_workers(&files).await;
    let shown = remote.clients_batch("t").await.unwrap();
    let policies = datafusion::arrow::array::AsArray::as_string::<i32>(
        shown.column_by_name("policy").unwrap(),
    );
    assert_eq!(policies.value(0), DisclosurePolicy::default().to_string());
    assert!(policies.value(0).contains("extremes=refuse"));
}

/// The worker defends itself before it trusts: a 100 MB request without the
/// token is refused on its headers, and the worker keeps serving.
#[tokio::test]
async fn an_unauthenticated_large_request_is_refused_on_its_headers() {
    use arrow_flight::Action;
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let workers = Workers::start_with(&files[..1], "t", |c| c).await;
    let addr = workers.workers[0].addr();
    let body = vec![7u8; 100 << 20];
    let action = Action {
        r#type: "fedsql.explain".into(),
        body: body.into(),
    };
    let started = std::time::Instant::now();
    let status = crate::remote::flight(addr)
        .await
        .max_encoding_message_size(usize::MAX)
        .do_action(crate::remote::with_token(action, "not-the-token"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("request REFUSED") && l.contains("wrong token")),
        "{logs:?}"
    );
    // The worker still answers a proper query.
    let remote = FedContext::new();
    run(&remote, &workers.create("t")).await.unwrap();
    answer(&remote, "SELECT count(*) FROM t").await;
}

/// `max_parameter_ratio`: a model round or a matrix aggregate over p
/// columns is refused at a site where p > ratio × its rows.
#[tokio::test]
async fn models_need_rows_for_their_parameters() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    // Site b has 15 rows: 3 columns pass at 0.33 (4.95), not at 0.1 (1.5).
    let loose = table(&files, "'min_group_rows' '5', 'max_parameter_ratio' '0.33'").await;
    let strict = table(&files, "'min_group_rows' '5', 'max_parameter_ratio' '0.1'").await;
    for sql in [
        "SELECT * FROM lm('t', 'x ~ y + id')",
        "SELECT covariance_matrix(x, y, id) AS c FROM t",
    ] {
        assert_same_result(
            sql,
            &answer(&loose, sql).await,
            &answer(&open, sql).await,
            true,
            1e-12,
        );
        let e = refusal(&strict, sql).await;
        assert!(
            e.contains("its max_parameter_ratio=0.1 policy"),
            "{sql}: {e}"
        );
        assert!(
            e.contains("client 'b' refused") || e.contains("client 'a' refused"),
            "{sql}: {e}"
        );
    }
    let e = refusal(&strict, "SELECT * FROM glm('t', 'y ~ x + id', 'poisson')").await;
    assert!(e.contains("max_parameter_ratio"), "{e}");
}

/// An in-process table under a policy answers any failure with one fixed
/// refusal, as a worker does; without a policy the analyst sees the row and
/// path.
#[tokio::test]
async fn in_process_errors_under_a_policy_carry_no_data() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    let mut text = std::fs::read_to_string(&files[1]).unwrap();
    text.push_str("999,p,secret-value-42,1\n");
    std::fs::write(&files[1], text).unwrap();
    let sql = "SELECT count(*), sum(x) FROM t";
    let shown = refusal(&open, sql).await;
    assert!(shown.contains("client 'b'"), "{shown}");
    let e = refusal(&guarded, sql).await;
    assert!(e.contains(fedsql::site::local::EVALUATION_REFUSAL), "{e}");
    assert!(
        !e.contains("secret-value-42") && !e.contains("parse"),
        "{e}"
    );
    assert!(!e.contains(&dir.path().display().to_string()), "{e}");
}

/// Every aggregate input has 0 or at least k values that are non-NULL
/// after its FILTER and, for aggregates that add them, non-zero: what
/// singles out one row inside a large group is refused, its twin over a
/// wide subset is answered.
const INPUTS_PASS: &[&str] = &[
    "SELECT sum(x) FILTER (WHERE id > 5) AS s FROM t",
    "SELECT sum(CASE WHEN id > 5 THEN x ELSE 0 END) AS s FROM t",
    "SELECT avg(CASE WHEN id > 5 THEN x END) AS m, count(CASE WHEN id > 5 THEN 1 END) AS n FROM t",
    "SELECT g, sum(CASE WHEN id > 3 THEN x ELSE 0 END) AS s FROM t WHERE g <> 'rare' GROUP BY g ORDER BY g",
    "SELECT sum(x) FILTER (WHERE id > 1000) AS s, count(*) FILTER (WHERE id > 5) AS n FROM t",
    "SELECT * FROM lm('SELECT x, CASE WHEN id > 5 THEN 1 ELSE 0 END AS d FROM t', 'x ~ d')",
    "SELECT g, sum(x) FILTER (WHERE id > 3) AS s, count(*) FILTER (WHERE id > 3) AS n, avg(CASE WHEN id > 3 THEN x END) AS m FROM t WHERE g <> 'rare' GROUP BY g ORDER BY g",
    "SELECT g, regr_slope(CASE WHEN id > 3 THEN x END, id) AS b FROM t WHERE g <> 'rare' GROUP BY g ORDER BY g",
    // Ordinary columns under the rule on values all but a few share: a
    // continuous one, a 0/1 one with 5 of each at a site, two values 5 and
    // 5 per group, counts by group.
    "SELECT sum(x) AS s, sum(CASE WHEN id > 5 THEN 1 ELSE 0 END) AS d, avg(y) AS m FROM t",
    "SELECT g, sum(CASE WHEN id > 10 THEN 1 ELSE 2 END) AS s, count(*) AS n, sum(x) AS x FROM t WHERE g <> 'rare' GROUP BY g ORDER BY g",
    "SELECT * FROM glm('SELECT y, x, CASE WHEN id > 5 THEN 1.0 ELSE 0.5 END AS w FROM t', 'y ~ x', 'poisson', 'weights=w')",
];

const INPUTS_REFUSED: &[&str] = &[
    "SELECT sum(x) FILTER (WHERE id = 17) AS s FROM t",
    "SELECT sum(CASE WHEN id = 17 THEN x ELSE 0 END) AS s FROM t",
    "SELECT avg(CASE WHEN id = 17 THEN x END) AS m FROM t",
    "SELECT count(CASE WHEN id = 17 THEN 1 END) AS n FROM t",
    "SELECT count(*) FILTER (WHERE id = 17) AS n FROM t",
    "SELECT g, sum(CASE WHEN id = 17 THEN x ELSE 0 END) AS s FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT g, sum(x) FILTER (WHERE id = 17) AS s FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT g, sum(CASE WHEN id = 17 THEN x ELSE -0.0 END) AS s FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT sum(CASE WHEN id = 17 THEN x ELSE -0.0 END) AS s FROM t",
    "SELECT g, count(*) FILTER (WHERE id = 17) AS n FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT g, avg(CASE WHEN id = 17 THEN x END) AS m FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT g, regr_slope(CASE WHEN id = 17 THEN x END, id) AS b FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT * FROM lm('SELECT x, CASE WHEN id = 17 THEN 1 ELSE 0 END AS d FROM t', 'x ~ d')",
    "SELECT * FROM glm('SELECT y, x, CASE WHEN id = 17 THEN 1.0 ELSE 0.0 END AS w FROM t', 'y ~ x', 'poisson', 'weights=w')",
    "SELECT normal_equations(x, CASE WHEN id = 17 THEN 1.0 ELSE 0.0 END) AS ne FROM t",
    // All rows but a few set to one value other than zero: every row
    // counts, and the sum less the known rest is the few's.
    "SELECT sum(CASE WHEN id = 17 THEN x ELSE 1 END) - count(*) + 1 AS s FROM t",
    "SELECT sum(CASE WHEN id = 17 THEN x ELSE 1e-9 END) AS s FROM t",
    "SELECT avg(CASE WHEN id = 17 THEN x ELSE 5 END) AS m FROM t",
    "SELECT sum(CASE WHEN id IN (16, 17) THEN y ELSE 2 END) AS s FROM t",
    "SELECT g, sum(CASE WHEN id = 17 THEN x ELSE 1 END) AS s FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT g, avg(CASE WHEN id = 17 THEN x ELSE -0.0 END) AS m, count(*) AS n FROM t WHERE g <> 'rare' GROUP BY g",
    "SELECT * FROM glm('SELECT y, x, CASE WHEN id = 17 THEN 1.0 ELSE 1e-12 END AS w FROM t', 'y ~ x', 'poisson', 'weights=w')",
    "SELECT * FROM lm('SELECT x, CASE WHEN id = 17 THEN 2 ELSE 1 END AS d FROM t', 'x ~ d')",
];

async fn check_inputs_rule(guarded: &FedContext, open: &FedContext, sites: [&str; 2]) {
    for sql in INPUTS_PASS {
        assert_same_result(
            sql,
            &answer(guarded, sql).await,
            &answer(open, sql).await,
            true,
            1e-12,
        );
    }
    for sql in INPUTS_REFUSED {
        answer(open, sql).await;
        let e = refusal(guarded, sql).await;
        assert!(
            sites
                .iter()
                .any(|s| e.contains(&format!("client '{s}' refused"))),
            "{sql}: {e}"
        );
        assert!(
            e.contains("fewer than 5 of its rows") && e.contains("min_group_rows policy"),
            "{sql}: {e}"
        );
        assert!(!e.contains("17"), "{sql}: {e}");
    }
    let e = refusal(guarded, "SELECT bool_or(id = 17 AND x > 10) AS b FROM t").await;
    assert!(e.contains("extremes=refuse"), "{e}");
}

#[tokio::test]
async fn aggregate_inputs_need_k_values_in_process() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    check_inputs_rule(&guarded, &open, ["a", "b"]).await;
}

#[tokio::test]
async fn aggregate_inputs_need_k_values_at_workers() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let (_workers, remote) = default_policy_workers(&files).await;
    check_inputs_rule(&remote, &open, ["h0", "h1"]).await;
}

/// No row amplification: a join may add a shared lookup's columns to each
/// row, never repeat a row.
/// Every site refuses an amplifying join, the empty one too (the rule is
/// about the plan, not the rows), so any of the three may be the one named.
async fn check_joins(guarded: &FedContext, open: &FedContext, sites: [&str; 3]) {
    for ctx in [guarded, open] {
        run(ctx, "CREATE TABLE lk (g VARCHAR, w DOUBLE) AS VALUES ('p', 1.0), ('q', 2.5), (NULL, 3.0), (NULL, 4.0)")
            .await
            .unwrap();
        run(
            ctx,
            "CREATE TABLE dup (g VARCHAR, w DOUBLE) AS VALUES ('p', 1.0), ('q', 2.5), ('p', 7.0)",
        )
        .await
        .unwrap();
    }
    for sql in [
        "SELECT sum(x * w) AS s, count(*) AS n FROM t JOIN lk ON t.g = lk.g",
        "SELECT t.g, sum(x * w) AS s FROM t LEFT JOIN lk ON t.g = lk.g WHERE t.g <> 'rare' GROUP BY t.g ORDER BY t.g",
        "SELECT count(*) AS n FROM t WHERE g IN (SELECT g FROM dup)",
    ] {
        assert_same_result(
            sql,
            &answer(guarded, sql).await,
            &answer(open, sql).await,
            true,
            1e-12,
        );
    }
    for (sql, why) in [
        (
            "SELECT count(*) AS n, sum(x) AS s FROM t CROSS JOIN (VALUES (1), (2), (3), (4), (5)) v(k)",
            "a join without equal keys repeats each of its rows",
        ),
        (
            "SELECT sum(x * w) AS s FROM t JOIN dup ON t.g = dup.g",
            "the shared side's join key is not unique",
        ),
    ] {
        answer(open, sql).await;
        let e = refusal(guarded, sql).await;
        assert!(e.contains(why), "{sql}: {e}");
        assert!(
            e.contains("no row amplification under its disclosure policy"),
            "{sql}: {e}"
        );
        assert!(
            sites
                .iter()
                .any(|s| e.contains(&format!("client '{s}' refused"))),
            "{sql}: {e}"
        );
    }
}

#[tokio::test]
async fn joins_never_repeat_a_row_in_process() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    check_joins(&guarded, &open, ["a", "b", "c"]).await;
}

#[tokio::test]
async fn joins_never_repeat_a_row_at_workers() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let (_workers, remote) = default_policy_workers(&files).await;
    check_joins(&remote, &open, ["h0", "h1", "h2"]).await;
}

/// The bundled demo carries a worker's default policy, and still teaches:
/// every example in `queries/` is answered under it, equal to the answer
/// without a policy, except the file that shows what the policy refuses.
#[tokio::test]
async fn the_demo_teaches_under_its_policy() {
    let guarded = FedContext::new();
    fedsql::frontend::demo::register_demo(&guarded).unwrap();
    let open = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&open, false).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("queries");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let mut refused = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for sql in fedsql::frontend::split::split_statements(&text).unwrap() {
            if sql.trim_start().to_ascii_uppercase().starts_with("CREATE") {
                run(&guarded, &sql).await.unwrap();
                run(&open, &sql).await.unwrap();
                continue;
            }
            if name.contains("refused") {
                let e = refusal(&guarded, &sql).await;
                assert!(e.contains("refused") && e.contains("policy"), "{name}: {e}");
                answer(&open, &sql).await;
                refused += 1;
                continue;
            }
            let tolerance = if sql.contains("approx_") { 0.05 } else { 1e-12 };
            assert_same_result(
                &format!("{name}: {sql}"),
                &answer(&guarded, &sql).await,
                &answer(&open, &sql).await,
                sql.contains("ORDER BY"),
                tolerance,
            );
        }
    }
    assert_eq!(refused, 3);
}

trait Float {
    fn float(&self) -> f64;
}

impl Float for crate::support::Cell {
    fn float(&self) -> f64 {
        match self {
            crate::support::Cell::Float(v) => *v,
            other => panic!("not a float: {other:?}"),
        }
    }
}

/// A histogram under a policy: each site folds its below- and above-range
/// counts into the end bins, and refuses a bin of 1 to k-1 values.
#[tokio::test]
async fn histograms_fold_their_tails_and_need_k_per_bin() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    let sql = "SELECT histogram(x, 5, 18, 2) AS h FROM t";
    let got = answer(&guarded, sql).await;
    let h = got[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::ListArray>()
        .unwrap();
    let counts = h.value(0);
    let counts = counts
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap();
    // Independently: the values up to 11.5 (the middle break) fall in the
    // first bin, tails folded in; the others in the second.
    let expected = crate::support::rows_of(
        &answer(
            &open,
            "SELECT CAST(count(*) FILTER (WHERE x <= 11.5) AS DOUBLE) AS a, \
                    CAST(count(*) FILTER (WHERE x > 11.5) AS DOUBLE) AS b FROM t",
        )
        .await,
    );
    assert_eq!(counts.value(0) as f64, expected[0][0].float());
    assert_eq!(counts.value(1) as f64, expected[0][1].float());
    // Without a policy the tails are in no bin.
    let plain = crate::support::rows_of(
        &answer(
            &open,
            "SELECT count(*) FILTER (WHERE x > 5 AND x <= 18) AS n FROM t",
        )
        .await,
    );
    let got_open = answer(&open, sql).await;
    let h = got_open[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::ListArray>()
        .unwrap();
    let open_counts = h.value(0);
    let open_counts = open_counts
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap();
    let open_total = (open_counts.value(0) + open_counts.value(1)) as f64;
    match &plain[0][0] {
        crate::support::Cell::Text(n) => assert_eq!(n.parse::<f64>().unwrap(), open_total),
        other => assert_eq!(other.float(), open_total),
    }
    let e = refusal(&guarded, "SELECT histogram(x, 0, 23, 23) AS h FROM t").await;
    assert!(
        e.contains("a histogram bin would count fewer than 5"),
        "{e}"
    );
    assert!(e.contains("hint: use fewer or wider bins"), "{e}");
}

/// k-means clusters and life-table cells hold 0 or at least k rows at each
/// site; what passes equals the answer without a policy.
#[tokio::test]
async fn clusters_and_life_table_cells_need_k_rows() {
    let dir = TempDir::new().unwrap();
    let files = write_sites(dir.path());
    let open = table(&files, "").await;
    let guarded = table(&files, "'min_group_rows' '5'").await;
    let survival = "SELECT x AS time, CASE WHEN y = 1 THEN 1 ELSE 0 END AS ev FROM t";
    for sql in [
        "SELECT * FROM kmeans('t', 'x', NULL, 'centers=5; 17')".to_string(),
        format!("SELECT * FROM kaplan_meier('{survival}', 'time', 'ev', 'breaks=0 24')"),
    ] {
        assert_same_result(
            &sql,
            &answer(&guarded, &sql).await,
            &answer(&open, &sql).await,
            true,
            1e-12,
        );
    }
    // Cox strata: each stratum's rows at each site (the round that learns
    // the strata, and the strata's columns in every Newton round).
    let cox = "SELECT x AS time, CASE WHEN y <> 1 THEN 1 ELSE 0 END AS ev, id, g FROM t";
    let sql = format!(
        "SELECT * FROM coxph('{cox} WHERE g <> ''rare''', 'Surv(time, ev) ~ id + strata(g)')"
    );
    assert_same_result(
        &sql,
        &answer(&guarded, &sql).await,
        &answer(&open, &sql).await,
        true,
        1e-9,
    );
    let sql = format!("SELECT * FROM coxph('{cox}', 'Surv(time, ev) ~ id + strata(g)')");
    answer(&open, &sql).await;
    let e = refusal(&guarded, &sql).await;
    assert!(e.contains("fewer than 5 of its rows"), "{e}");
    let sql = "SELECT * FROM kmeans('t', 'x', NULL, 'centers=2; 7; 11; 16; 21')";
    answer(&open, sql).await;
    let e = refusal(&guarded, sql).await;
    assert!(e.contains("a cluster would hold fewer than 5"), "{e}");
    let sql = format!(
        "SELECT * FROM kaplan_meier('{survival}', 'time', 'ev', 'breaks=0 3 6 9 12 15 18 21 24')"
    );
    answer(&open, &sql).await;
    let e = refusal(&guarded, &sql).await;
    assert!(e.contains("a life-table interval would count"), "{e}");
    // Which intervals are under k is not named (it depends on the rows).
    assert!(!e.contains(']') && !e.contains("breaks="), "{e}");
}

/// A chi-square test under the demo's policy: a table whose cells hold at
/// least k rows at every site is answered as without a policy; one with a
/// cell of 1 to k-1 rows at some site is refused there, not suppressed.
#[tokio::test]
async fn chi_square_cells_need_k_rows_at_each_site() {
    let guarded = FedContext::new();
    fedsql::frontend::demo::register_demo(&guarded).unwrap();
    let open = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&open, false).unwrap();
    for sql in [
        "SELECT * FROM chisq_test('clinic', 'smoker', 'event')",
        "SELECT * FROM crosstab('clinic', 'region', 'sex')",
    ] {
        assert_same_result(
            sql,
            &answer(&guarded, sql).await,
            &answer(&open, sql).await,
            true,
            1e-12,
        );
    }
    let sql = "SELECT * FROM chisq_test('clinic', 'region', 'visits')";
    answer(&open, sql).await;
    let e = refusal(&guarded, sql).await;
    assert!(
        e.contains("fewer than 5 of its rows (its min_group_rows policy)"),
        "{e}"
    );
}
