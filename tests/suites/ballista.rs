//! A worker backed by a Ballista cluster (`--engine ballista://…`, the
//! `ballista` feature): a scheduler and two executors started in this
//! process as `fedsql ballista scheduler|executor` starts them, one
//! worker on the cluster and one reading the same files itself. The two
//! answer the aggregate suite, a GROUP BY under the default policy and a
//! refusal alike (integers and strings exactly, floats to 1e-12
//! relative); a cluster that is down fails the request with an error
//! naming it.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedsql::FedContext;
use fedsql::site::ballista::{
    RunningExecutor, RunningScheduler, start_executor, start_scheduler, start_scheduler_with,
};
use fedsql::site::cluster::ClusterAddress;
use fedsql::site::worker::{self, RunningWorker, WorkerConfig};
use tempfile::TempDir;

use crate::remote::{TOKEN, Workers, remote_context, run};
use crate::support::{Format, assert_same_result, demo_rows, federation, split_sizes};

/// Rows of the aggregate suite's table `t` (x1..x10, y_gaussian,
/// y_logistic, y_poisson), made from a fixed seed, in `files` CSV files
/// of `rows` rows each under `dir`; and the first row's x1.
fn write_suite_table(dir: &Path, files: usize, rows: usize) -> (PathBuf, f64) {
    let folder = dir.join("t");
    std::fs::create_dir_all(&folder).unwrap();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut first_x1 = None;
    for file in 0..files {
        let mut text =
            String::from("x1,x2,x3,x4,x5,x6,x7,x8,x9,x10,y_gaussian,y_logistic,y_poisson\n");
        for _ in 0..rows {
            let x: Vec<f64> = (0..10)
                .map(|j| match j {
                    8 => f64::from(u8::from(uniform() < 0.3)),
                    _ => (uniform() - 0.5) * 4.0,
                })
                .collect();
            first_x1.get_or_insert(x[0]);
            let y = 1.0 + 0.5 * x[0] - 0.25 * x[1] + uniform();
            let logistic = i64::from(uniform() < 1.0 / (1.0 + (-x[0]).exp()));
            let poisson = (uniform() * 4.0 * (1.0 + x[2].abs())).floor() as i64;
            for v in &x {
                write!(text, "{v},").unwrap();
            }
            writeln!(text, "{y},{logistic},{poisson}").unwrap();
        }
        std::fs::write(folder.join(format!("part{file}.csv")), text).unwrap();
    }
    (folder, first_x1.unwrap())
}

/// The aggregate suite's queries, in order.
fn suite_queries() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/bench/aggregate_suite.sql");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// A scheduler and two executors of one slot each.
struct Cluster {
    scheduler: RunningScheduler,
    executors: Vec<RunningExecutor>,
    work_dirs: Vec<TempDir>,
}

impl Cluster {
    async fn start() -> Self {
        Self::start_with(start_scheduler("127.0.0.1:0").await.unwrap()).await
    }

    async fn start_with(scheduler: RunningScheduler) -> Self {
        let at = scheduler.addr().to_string();
        let mut executors = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..2 {
            let dir = TempDir::new().unwrap();
            executors.push(
                start_executor(&at, Some("127.0.0.1:0"), Some(1), Some(dir.path().into()))
                    .await
                    .unwrap(),
            );
            dirs.push(dir);
        }
        Self {
            scheduler,
            executors,
            work_dirs: dirs,
        }
    }

    fn engine(&self) -> ClusterAddress {
        ClusterAddress::parse(&format!("ballista://{}", self.scheduler.addr())).unwrap()
    }
}

/// A worker serving `folder` as `t`; on `engine` when given, and under
/// the default policy when `policy`.
async fn worker_of(folder: &Path, engine: Option<ClusterAddress>, policy: bool) -> RunningWorker {
    worker_with(folder, engine, policy, |c| c).await
}

/// As [`worker_of`], with its configuration changed by `configure`.
async fn worker_with(
    folder: &Path,
    engine: Option<ClusterAddress>,
    policy: bool,
    configure: impl FnOnce(WorkerConfig) -> WorkerConfig,
) -> RunningWorker {
    let mut config = WorkerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        vec![("t".to_string(), folder.to_path_buf())],
        TOKEN,
    );
    if !policy {
        config.policy = None;
    }
    config.engine = engine;
    worker::start(configure(config)).await.unwrap()
}

/// A coordinator whose federated table `t` has the one client `h0`.
async fn coordinator(worker: &RunningWorker, dir: &Path) -> FedContext {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('h0' = 'grpc://{}') OPTIONS ('token_file' '{}', 'timeout' '120s')",
            worker.addr(),
            token_file.display()
        ),
    )
    .await
    .unwrap();
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_on_a_ballista_cluster_answers_as_it_does_alone() {
    let dir = TempDir::new().unwrap();
    let (folder, first_x1) = write_suite_table(dir.path(), 2, 1500);
    let cluster = Cluster::start().await;

    // The aggregate suite, without a policy: every query, the same answer.
    let alone = worker_of(&folder, None, false).await;
    let on_cluster = worker_of(&folder, Some(cluster.engine()), false).await;
    let local = coordinator(&alone, dir.path()).await;
    let remote = coordinator(&on_cluster, dir.path()).await;
    let queries = suite_queries();
    assert_eq!(queries.len(), 10);
    for sql in &queries {
        let a = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = run(&local, sql).await.unwrap();
        assert_same_result(sql, &a, &b, true, 1e-12);
    }

    // Both executors ran tasks of the suite (their shuffle files are kept
    // until the jobs' data is cleaned up).
    for (i, dir) in cluster.work_dirs.iter().enumerate() {
        let jobs = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(jobs > 0, "executor {i} ran no task");
    }

    // Under the default policy: a GROUP BY of large groups is answered
    // alike, and a query that singles out one row is refused alike.
    let alone = worker_of(&folder, None, true).await;
    let on_cluster = worker_of(&folder, Some(cluster.engine()), true).await;
    let local = coordinator(&alone, dir.path()).await;
    let remote = coordinator(&on_cluster, dir.path()).await;
    let grouped = "SELECT y_logistic AS k, count(*) AS n, avg(x1) AS avg_x1, sum(y_gaussian) AS sum_y, var_samp(x3) AS var_x3 FROM t GROUP BY y_logistic ORDER BY k";
    let a = run(&remote, grouped)
        .await
        .unwrap_or_else(|e| panic!("{grouped}: {e}"));
    let b = run(&local, grouped).await.unwrap();
    assert_eq!(a.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
    assert_same_result(grouped, &a, &b, true, 1e-12);
    // One row, picked by its value: fewer than k rows.
    let rare = format!("SELECT count(*) AS n, sum(y_gaussian) AS s FROM t WHERE x1 = {first_x1}");
    let a = run(&remote, &rare)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    let b = run(&local, &rare)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(a.contains("min_group_rows policy"), "{a}");
    assert_eq!(a, b);
    drop(cluster.executors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_whose_cluster_is_down_names_it() {
    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 1, 50);
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let engine = ClusterAddress::parse(&format!("ballista://127.0.0.1:{port}")).unwrap();
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&logs);
    let mut config = WorkerConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        vec![("t".to_string(), folder.clone())],
        TOKEN,
    );
    config.policy = None;
    config.engine = Some(engine);
    config.log = Some(Arc::new(move |line: &str| {
        sink.lock().unwrap().push(line.to_string())
    }));
    let worker = worker::start(config).await.unwrap();
    let ctx = coordinator(&worker, dir.path()).await;
    // The coordinator gets the worker's sanitized error; its log has the cause.
    let e = run(&ctx, "SELECT count(*) AS n FROM t")
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("client 'h0'") && e.contains("worker's log"),
        "{e}"
    );
    let cause = format!("the Ballista cluster at ballista://127.0.0.1:{port} is unreachable");
    let logs = logs.lock().unwrap().clone();
    assert!(logs.iter().any(|l| l.contains(&cause)), "{logs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_that_is_gone_is_named_in_the_worker_s_log_only() {
    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 2, 100);
    let cluster = Cluster::start().await;
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&logs);
    let worker = worker_with(&folder, Some(cluster.engine()), true, |mut config| {
        config.log = Some(Arc::new(move |line: &str| {
            sink.lock().unwrap().push(line.to_string())
        }));
        config
    })
    .await;
    let ctx = coordinator(&worker, dir.path()).await;
    // The worker opens the table's files once (their schemas, a CSV
    // file's missing-value tokens); later the executors alone read them.
    run(&ctx, "SELECT count(*) AS n FROM t").await.unwrap();
    let gone = folder.join("part1.csv");
    std::fs::remove_file(&gone).unwrap();
    let e = run(&ctx, "SELECT count(*) AS n FROM t")
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    // Under the policy, the coordinator gets the fixed refusal.
    assert!(e.contains("a site could not evaluate the query"), "{e}");
    assert!(!e.contains("part1"), "{e}");
    let logs = logs.lock().unwrap().clone();
    assert!(logs.iter().any(|l| l.contains("part1.csv")), "{logs:?}");
}

/// A request that ends before its Ballista job (here the worker's
/// `request_timeout`; a coordinator that gives up ends it the same way)
/// cancels the job at the scheduler: the worker logs the job it
/// cancelled, and the scheduler reports that job as failed (cancelled),
/// not running on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_that_ends_first_cancels_its_ballista_job() {
    use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
    use ballista_core::serde::protobuf::{GetJobStatusParams, job_status};

    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 4, 20_000);
    let cluster = Cluster::start().await;
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&logs);
    let worker = worker_with(&folder, Some(cluster.engine()), false, |mut config| {
        // Long enough for the job to be submitted, short of its end (each
        // job takes some 0.5 s of Ballista's task polling).
        config.limits.timeout = Some(Duration::from_millis(300));
        config.log = Some(Arc::new(move |line: &str| {
            sink.lock().unwrap().push(line.to_string())
        }));
        config
    })
    .await;
    let ctx = coordinator(&worker, dir.path()).await;
    let e = run(
        &ctx,
        "SELECT x1 > 0 AS k, count(*) AS n, sum(x2) AS s, avg(x3) AS a FROM t GROUP BY x1 > 0",
    )
    .await
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(e.contains("request_timeout"), "{e}");
    // The cancellation is sent when the request's work is dropped.
    let mut job = None;
    for _ in 0..100 {
        job = logs.lock().unwrap().iter().find_map(|l| {
            l.split_once("cancelled Ballista job ")
                .map(|(_, rest)| rest.split_whitespace().next().unwrap().to_string())
        });
        if job.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let job = job.unwrap_or_else(|| panic!("no job cancelled: {:?}", logs.lock().unwrap()));
    let mut scheduler =
        SchedulerGrpcClient::connect(format!("http://{}", cluster.scheduler.addr()))
            .await
            .unwrap();
    // The scheduler fails the job as cancelled (its event loop takes a
    // moment), rather than running it to its end.
    let mut status = None;
    for _ in 0..100 {
        status = scheduler
            .get_job_status(GetJobStatusParams {
                job_id: job.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .and_then(|s| s.status);
        let pending = matches!(
            status,
            None | Some(job_status::Status::Running(_) | job_status::Status::Queued(_))
        );
        if !pending {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match status {
        Some(job_status::Status::Failed(failure)) => {
            assert!(
                failure.error.to_lowercase().contains("cancel"),
                "{failure:?}"
            )
        }
        other => panic!("job {job} after its cancellation: {other:?}"),
    }
    // The worker and the cluster answer the next request.
    drop(worker);
    let worker = worker_of(&folder, Some(cluster.engine()), false).await;
    let ctx = coordinator(&worker, dir.path()).await;
    run(&ctx, "SELECT count(*) AS n FROM t").await.unwrap();
}

/// The states a job returns count against the worker's `memory_limit`:
/// a GROUP BY of one group per row is refused naming the limit, and a
/// query whose states fit is answered by the same worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn states_past_the_worker_s_memory_limit_are_refused_naming_it() {
    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 2, 5_000);
    let cluster = Cluster::start().await;
    let worker = worker_with(&folder, Some(cluster.engine()), false, |mut config| {
        config.limits.memory = Some(64 * 1024);
        config
    })
    .await;
    let ctx = coordinator(&worker, dir.path()).await;
    let e = run(&ctx, "SELECT x1, count(*) AS n FROM t GROUP BY x1")
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("(its memory_limit)"), "{e}");
    run(&ctx, "SELECT count(*) AS n, sum(x2) AS s FROM t")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn glm_rounds_and_dp_queries_run_on_the_cluster_and_an_executor_may_die() {
    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 2, 1000);
    let cluster = Cluster::start().await;

    // Every IRLS round of a glm is a job over the files; the fit is the
    // one the worker makes alone (each round's sums to 1e-12 relative,
    // the coefficients to 1e-10 after the rounds).
    let alone = worker_of(&folder, None, true).await;
    let on_cluster = worker_of(&folder, Some(cluster.engine()), true).await;
    let local = coordinator(&alone, dir.path()).await;
    let remote = coordinator(&on_cluster, dir.path()).await;
    for sql in [
        "SELECT * FROM glm('t', 'y_logistic ~ x1 + x2 + x3', 'binomial')",
        "SELECT * FROM glm('t', 'y_poisson ~ x1 + x3 + x9', 'poisson')",
    ] {
        let a = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = run(&local, sql).await.unwrap();
        assert_same_result(sql, &a, &b, true, 1e-10);
    }

    // DP: the ε is debited by the worker's ledger before the job runs,
    // and the noise is added by the worker to the cluster's state.
    let dp = |config: WorkerConfig| {
        let mut config = config;
        config.dp.set("dp_budget", "1").unwrap();
        config
    };
    let on_cluster = worker_with(&folder, Some(cluster.engine()), true, dp).await;
    let remote = coordinator(&on_cluster, dir.path()).await;
    let n = run(&remote, "SELECT dp_count(*, 0.5) AS n FROM t")
        .await
        .unwrap();
    let n = datafusion::arrow::compute::cast(
        n[0].column(0),
        &datafusion::arrow::datatypes::DataType::Float64,
    )
    .unwrap();
    let n = n
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Float64Array>()
        .unwrap()
        .value(0);
    // Laplace noise of scale 2: beyond 100 with probability e^-50.
    assert!((n - 2000.0).abs() < 100.0, "dp_count {n}");
    let e = run(&remote, "SELECT dp_count(*, 0.6) AS n FROM t")
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("only ε = 0.5 of 1 remains"), "{e}");

    // One executor dies: the other takes every task (executors pull their
    // tasks), and the answer is the same.
    let sql = "SELECT count(*) AS n, sum(x1) AS s, avg(y_gaussian) AS m FROM t";
    let before = run(&remote, sql).await.unwrap();
    cluster.executors[0].kill();
    let after = run(&remote, sql).await.unwrap();
    assert_same_result(sql, &after, &before, true, 1e-12);
}

/// A `fedsql` child process, killed when dropped.
struct Process {
    child: Child,
    /// The address its first line names.
    addr: String,
}

impl Process {
    /// Runs `fedsql args...` and reads the address after `prefix` on its
    /// first line of output.
    fn spawn(args: &[&str], prefix: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fedsql"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix(prefix)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line of {args:?}: {line:?}"))
            .to_string();
        Self { child, addr }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fedsql_ballista_commands_make_the_cluster_of_a_worker() {
    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 2, 500);
    let scheduler = Process::spawn(
        &["ballista", "scheduler", "--listen", "127.0.0.1:0"],
        "fedsql ballista scheduler listening on ",
    );
    let work: Vec<TempDir> = (0..2).map(|_| TempDir::new().unwrap()).collect();
    let _executors: Vec<Process> = work
        .iter()
        .map(|w| {
            Process::spawn(
                &[
                    "ballista",
                    "executor",
                    "--scheduler",
                    &scheduler.addr,
                    "--listen",
                    "127.0.0.1:0",
                    "--slots",
                    "1",
                    "--work-dir",
                    &w.path().to_string_lossy(),
                ],
                "fedsql ballista executor serving on ",
            )
        })
        .collect();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let engine = format!("ballista://{}", scheduler.addr);
    let table = format!("t={}", folder.display());
    let worker = Process::spawn(
        &[
            "worker",
            "--engine",
            &engine,
            "--policy",
            "none",
            "--audit-log",
            "none",
            "--listen",
            "127.0.0.1:0",
            "--table",
            &table,
            "--token-file",
            &token.to_string_lossy(),
        ],
        "fedsql worker listening on ",
    );
    let remote = FedContext::new();
    run(
        &remote,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('h0' = 'grpc://{}') OPTIONS ('token_file' '{}', 'timeout' '120s')",
            worker.addr,
            token.display()
        ),
    )
    .await
    .unwrap();
    let alone = worker_of(&folder, None, false).await;
    let local = coordinator(&alone, dir.path()).await;
    for sql in &suite_queries()[..6] {
        let a = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = run(&local, sql).await.unwrap();
        assert_same_result(sql, &a, &b, true, 1e-12);
    }
}

/// Secure sums over three workers on one cluster: each worker masks the
/// state its cluster returned, and the unmasked sums are those of the
/// same clients in process (exactly: the states are integers).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secure_sums_mask_the_states_of_a_cluster() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let cluster = Cluster::start().await;
    let engine = cluster.engine();
    let workers = Workers::start_with(&f.client_files, "clinic", move |mut config| {
        config.engine = Some(engine.clone());
        config
    })
    .await;
    let remote = remote_context(&workers).await;
    for sql in [
        "SELECT secure_sum(age, 0, 120) AS s, secure_count(1) AS n FROM clinic",
        "SELECT region, secure_sum(age, 0, 120) AS s, count(*) AS n FROM clinic GROUP BY region ORDER BY region",
    ] {
        let a = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = run(&f.fed, sql).await.unwrap();
        assert_same_result(sql, &a, &b, true, 0.0);
    }
    let logs = workers.logs();
    let masked = logs
        .iter()
        .filter(|l| l.contains("released") && l.contains("masked state"))
        .count();
    assert_eq!(masked, 6, "two queries, three workers: {logs:#?}");
}

/// An executor killed while the queries run: each answer is the right
/// one (Ballista ran the lost tasks again on the other executor once the
/// scheduler counted the first as lost) or an error naming the cluster;
/// never a number made from part of the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_killed_mid_query_gives_the_right_answer_or_a_named_error() {
    let dir = TempDir::new().unwrap();
    let (folder, _) = write_suite_table(dir.path(), 2, 3000);
    let scheduler = start_scheduler_with("127.0.0.1:0", Some(Duration::from_secs(2)))
        .await
        .unwrap();
    let cluster = Cluster::start_with(scheduler).await;
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&logs);
    let on_cluster = worker_with(&folder, Some(cluster.engine()), false, |mut config| {
        config.log = Some(Arc::new(move |line: &str| {
            sink.lock().unwrap().push(line.to_string())
        }));
        config
    })
    .await;
    let alone = worker_of(&folder, None, false).await;
    let remote = coordinator(&on_cluster, dir.path()).await;
    let local = coordinator(&alone, dir.path()).await;
    let sql = "SELECT y_logistic AS k, count(*) AS n, sum(x1) AS s, var_samp(x2) AS v FROM t GROUP BY y_logistic ORDER BY k";
    let expected = run(&local, sql).await.unwrap();
    // A kill at a moment drawn from the first 300 ms of a stream of queries.
    let delay = Duration::from_micros(rand::random_range(0..300_000));
    let (answered, failed) = {
        let kill = tokio::time::sleep(delay);
        tokio::pin!(kill);
        let mut killed = false;
        let (mut answered, mut failed) = (0, 0);
        while answered + failed < 6 || !killed {
            let query = run(&remote, sql);
            tokio::pin!(query);
            let result = loop {
                tokio::select! {
                    () = &mut kill, if !killed => {
                        cluster.executors[0].kill();
                        killed = true;
                    }
                    result = &mut query => break result,
                }
            };
            match result {
                Ok(batches) => {
                    assert_same_result(sql, &batches, &expected, true, 1e-12);
                    answered += 1;
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains("client 'h0'"), "{e}");
                    failed += 1;
                }
            }
        }
        (answered, failed)
    };
    eprintln!("killed after {delay:?}: {answered} answered, {failed} failed");
    // A failed request names the cluster in the worker's log.
    if failed > 0 {
        let logs = logs.lock().unwrap().clone();
        assert!(
            logs.iter().any(|l| l.contains("the Ballista cluster at")),
            "{logs:?}"
        );
    }
    // The last queries ran with one executor: answered.
    assert!(answered > 0, "{failed} failed");
}
