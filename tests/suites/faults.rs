//! Faults at each step, with `fedsql worker` child processes on loopback:
//! a worker killed (SIGKILL) or frozen (SIGSTOP) while the coordinator
//! fetches its schema, while it encodes, and in a later round of a fit; a
//! worker restarted between a fit's rounds; a worker killed at random
//! moments of DP queries (the ledger never shows less spent than what was
//! answered). The answer is always the exact one or an error naming the
//! client, within the table's `timeout` and a margin. The ledger and audit
//! file on a full or read-only disk, and a coordinator killed mid-fit, are
//! in [`disks`](super::faults_disks).

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::encoder::StateBatch;
use fedsql::protocol::site::{Analyst, BudgetLine, Site, SiteRequest, Traffic};
use fedsql::{FedContext, FedError};
use tempfile::TempDir;

use crate::remote::TOKEN;
use crate::support::{Format, assert_same_result, demo_rows, federation, split_sizes};

/// The table's timeout in these tests, and the margin an answer or error
/// may take beyond it.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const MARGIN: Duration = Duration::from_secs(3);

/// A free loopback port (bound, then let go).
pub(crate) fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A `fedsql worker` child process at a fixed address, so that it can be
/// restarted where the coordinator looks for it; its stderr kept.
pub(crate) struct ProcessWorker {
    child: Child,
    /// Whether `child` has been killed and reaped: its pid may then belong
    /// to another process, which a signal must not reach.
    reaped: bool,
    pub(crate) addr: SocketAddr,
    args: Vec<OsString>,
    pub(crate) stderr: Arc<Mutex<Vec<String>>>,
}

impl ProcessWorker {
    /// `fedsql worker --listen 127.0.0.1:0 ARGS...`: the worker binds a
    /// port the kernel picks and names it on its first line (a port picked
    /// here and let go could be taken meanwhile, e.g. as another test's
    /// outgoing connection's local port).
    pub(crate) fn spawn(args: Vec<OsString>) -> Self {
        let stderr: Arc<Mutex<Vec<String>>> = Arc::default();
        let (child, addr) = Self::try_start("127.0.0.1:0", &args, &stderr)
            .unwrap_or_else(|| panic!("the worker did not start: {:?}", stderr.lock().unwrap()));
        Self {
            child,
            reaped: false,
            addr,
            args,
            stderr,
        }
    }

    /// Starts `fedsql worker --listen LISTEN ARGS...`, its stderr going to
    /// `stderr`; the child and the address it listens on, or `None` if it
    /// ended without listening.
    fn try_start(
        listen: &str,
        args: &[OsString],
        stderr: &Arc<Mutex<Vec<String>>>,
    ) -> Option<(Child, SocketAddr)> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fedsql"))
            .arg("worker")
            .arg("--listen")
            .arg(listen)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let sink = Arc::clone(stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let addr = line
            .strip_prefix("fedsql worker listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|addr| addr.parse().ok());
        match addr {
            Some(addr) => Some((child, addr)),
            None => {
                let _ = child.wait();
                None
            }
        }
    }

    /// Starts the worker again at `addr`, where the coordinator looks for
    /// it: the port was just freed by the killed worker, so a few tries in
    /// case something else holds it for a moment.
    fn start(addr: SocketAddr, args: &[OsString], stderr: &Arc<Mutex<Vec<String>>>) -> Child {
        for _ in 0..100 {
            if let Some((child, _)) = Self::try_start(&addr.to_string(), args, stderr) {
                return child;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the worker did not start on {addr}: {:?}",
            stderr.lock().unwrap()
        );
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-KILL`).
    pub(crate) fn signal(&self, signal: &str) {
        assert!(!self.reaped, "{signal} to a worker that was killed");
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal}: {status}");
    }

    /// Kills the process and waits for it to end (once: a reaped pid may
    /// be another process's by now).
    pub(crate) fn kill(&mut self) {
        if self.reaped {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reaped = true;
    }

    /// Kills it (if it runs) and starts it again at the same address with
    /// the same arguments (the same files, ledger and audit trail).
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.child = Self::start(self.addr, &self.args, &self.stderr);
        self.reaped = false;
    }

    /// Whether its stderr has a line containing `text`.
    pub(crate) fn saw(&self, text: &str) -> bool {
        self.stderr.lock().unwrap().iter().any(|l| l.contains(text))
    }
}

impl Drop for ProcessWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The arguments of a worker serving `file` as `clinic` without a policy
/// or audit trail, plus `extra`.
pub(crate) fn plain_args(file: &Path, token: &Path, extra: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--table".into(),
        format!("clinic={}", file.display()).into(),
        "--token-file".into(),
        token.into(),
    ];
    args.extend(extra.iter().map(OsString::from));
    args
}

/// `CREATE OR REPLACE FEDERATED TABLE clinic` over the workers, with the
/// table's timeout [`TIMEOUT`].
pub(crate) fn create_sql(addrs: &[SocketAddr], token: &Path) -> String {
    let clients: Vec<String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("'h{i}' = 'grpc://{a}'"))
        .collect();
    format!(
        "CREATE OR REPLACE FEDERATED TABLE clinic CLIENTS ({}) OPTIONS ('token_file' '{}', 'timeout' '{}s')",
        clients.join(", "),
        token.display(),
        TIMEOUT.as_secs()
    )
}

pub(crate) async fn run(ctx: &FedContext, sql: &str) -> fedsql::Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

/// Runs `sql` and checks that it ends within the timeout and margin.
pub(crate) async fn timed(ctx: &FedContext, sql: &str) -> fedsql::Result<Vec<RecordBatch>> {
    let started = Instant::now();
    let result = run(ctx, sql).await;
    let took = started.elapsed();
    assert!(took < TIMEOUT + MARGIN, "{sql}: took {took:?}");
    result
}

/// Asserts an error that names client `client`.
pub(crate) fn assert_names(result: fedsql::Result<Vec<RecordBatch>>, client: &str) -> String {
    let err = match result {
        Ok(batches) => panic!("answered although {client} failed: {batches:?}"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(
        matches!(err, FedError::Client { .. }) && text.contains(&format!("client '{client}'")),
        "{text}"
    );
    text
}

/// Three demo clients (one of them one row) served by worker processes.
struct Three {
    f: crate::support::Federation,
    workers: Vec<ProcessWorker>,
    token: PathBuf,
    _dir: TempDir,
}

impl Three {
    async fn start() -> Self {
        let sizes = split_sizes(demo_rows().1.len(), 3);
        let f = federation(&sizes, Format::Csv).await;
        let dir = TempDir::new().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, TOKEN).unwrap();
        let workers = f
            .client_files
            .iter()
            .map(|file| {
                ProcessWorker::spawn(plain_args(
                    file,
                    &token,
                    &["--policy", "none", "--audit-log", "none"],
                ))
            })
            .collect();
        Self {
            f,
            workers,
            token,
            _dir: dir,
        }
    }

    fn create(&self) -> String {
        let addrs: Vec<SocketAddr> = self.workers.iter().map(|w| w.addr).collect();
        create_sql(&addrs, &self.token)
    }

    async fn assert_exact(&self, ctx: &FedContext, sql: &str) {
        let got = timed(ctx, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let want = run_central(&self.f, sql).await;
        assert_same_result(sql, &got, &want, false, 1e-9);
    }
}

async fn run_central(f: &crate::support::Federation, sql: &str) -> Vec<RecordBatch> {
    f.central.sql(sql).await.unwrap().collect().await.unwrap()
}

const GROUPED: &str = "SELECT region, count(*) AS n, avg(bmi) AS b FROM clinic GROUP BY region";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_or_frozen_while_planning_or_encoding_is_named_within_the_timeout() {
    let mut t = Three::start().await;
    let ctx = FedContext::new();
    // Planning: the coordinator asks every worker for its schema.
    t.workers[2].signal("-STOP");
    let started = Instant::now();
    let err = ctx.sql(&t.create()).await.map(|_| Vec::new());
    assert!(started.elapsed() < TIMEOUT + MARGIN);
    let text = assert_names(err, "h2");
    assert!(text.contains("no answer within"), "{text}");
    t.workers[2].signal("-CONT");
    run(&ctx, &t.create()).await.unwrap();
    t.assert_exact(&ctx, GROUPED).await;

    // Encoding: frozen, then thawed; killed, then restarted.
    t.workers[2].signal("-STOP");
    let text = assert_names(timed(&ctx, GROUPED).await, "h2");
    assert!(text.contains("no answer within"), "{text}");
    t.workers[2].signal("-CONT");
    t.assert_exact(&ctx, GROUPED).await;
    t.workers[1].kill();
    assert_names(timed(&ctx, GROUPED).await, "h1");
    // Planning against a dead worker.
    assert_names(ctx.sql(&t.create()).await.map(|_| Vec::new()), "h1");
    // The same table answers exactly once the worker is back (the
    // coordinator connects again).
    t.workers[1].restart();
    t.assert_exact(&ctx, GROUPED).await;
}

/// A site that runs `action` just before its `at`-th encoder call (1 is
/// the first), then passes every call on.
struct Tripwire {
    inner: Arc<dyn Site>,
    calls: AtomicUsize,
    at: usize,
    action: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Tripwire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tripwire({:?} at call {})", self.inner, self.at)
    }
}

impl Tripwire {
    fn trip(&self) {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.at
            && let Some(action) = self.action.lock().unwrap().take()
        {
            action();
        }
    }
}

#[async_trait]
impl Site for Tripwire {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn format(&self) -> String {
        self.inner.format()
    }
    fn policy(&self) -> String {
        self.inner.policy()
    }
    async fn privacy_budget(
        &self,
        table: &str,
        analyst: &Analyst,
    ) -> fedsql::Result<Option<BudgetLine>> {
        self.inner.privacy_budget(table, analyst).await
    }
    async fn check_reachable(&self, analyst: &Analyst) -> Result<(), String> {
        self.inner.check_reachable(analyst).await
    }
    async fn encode(&self, request: &SiteRequest<'_>) -> fedsql::Result<StateBatch> {
        self.trip();
        self.inner.encode(request).await
    }
    async fn encode_with_traffic(
        &self,
        request: &SiteRequest<'_>,
    ) -> fedsql::Result<(StateBatch, Traffic)> {
        self.trip();
        self.inner.encode_with_traffic(request).await
    }
    async fn explain(&self, request: &SiteRequest<'_>) -> fedsql::Result<String> {
        self.inner.explain(request).await
    }
    fn release_fit(&self, scope: u64, analyst: &Analyst) {
        self.inner.release_fit(scope, analyst)
    }
}

/// Table `tripped`: `clinic`'s clients, client `h2` wrapped in a
/// [`Tripwire`] that runs `action` before its `at`-th call.
async fn tripped(ctx: &FedContext, at: usize, action: Box<dyn FnOnce() + Send>) {
    let provider = ctx.session().table_provider("clinic").await.unwrap();
    let table = FederatedTable::from_provider(provider.as_ref()).unwrap();
    let mut action = Some(action);
    let clients: Vec<Arc<dyn Site>> = table
        .clients()
        .iter()
        .map(|c| {
            if c.name() == "h2" {
                Arc::new(Tripwire {
                    inner: Arc::clone(c),
                    calls: AtomicUsize::new(0),
                    at,
                    action: Mutex::new(action.take()),
                }) as Arc<dyn Site>
            } else {
                Arc::clone(c)
            }
        })
        .collect();
    let _ = ctx.session().deregister_table("tripped");
    ctx.session()
        .register_table(
            "tripped",
            FederatedTable::new("tripped", table.schema(), clients).into_provider(),
        )
        .unwrap();
}

const FIT: &str = "SELECT * FROM glm('tripped', 'event ~ age + bmi + smoker', 'binomial')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fit_whose_worker_dies_freezes_or_restarts_in_a_later_round_ends_exact_or_named() {
    let t = Three::start().await;
    let ctx = FedContext::new();
    run(&ctx, &t.create()).await.unwrap();
    tripped(&ctx, usize::MAX, Box::new(|| {})).await;
    let exact = timed(&ctx, FIT).await.unwrap();
    let pid = |w: &ProcessWorker| w.child.id().to_string();
    let signal = |pid: String, signal: &'static str| {
        Box::new(move || {
            Command::new("kill").args([signal, &pid]).status().unwrap();
        }) as Box<dyn FnOnce() + Send>
    };
    let workers = Arc::new(Mutex::new(t.workers));
    // Frozen in round 3: no answer within the timeout, named.
    let h2 = pid(&workers.lock().unwrap()[2]);
    tripped(&ctx, 3, signal(h2.clone(), "-STOP")).await;
    let text = assert_names(timed(&ctx, FIT).await, "h2");
    assert!(text.contains("no answer within"), "{text}");
    workers.lock().unwrap()[2].signal("-CONT");
    // Killed in round 3: named.
    tripped(&ctx, 3, signal(h2, "-KILL")).await;
    assert_names(timed(&ctx, FIT).await, "h2");
    // Restarted between rounds 2 and 3 (its kept rows lost): the same fit.
    workers.lock().unwrap()[2].restart();
    let restart = {
        let workers = Arc::clone(&workers);
        Box::new(move || workers.lock().unwrap()[2].restart()) as Box<dyn FnOnce() + Send>
    };
    tripped(&ctx, 3, restart).await;
    let got = timed(&ctx, FIT)
        .await
        .unwrap_or_else(|e| panic!("a restart between rounds: {e}"));
    assert_same_result("restarted between rounds", &got, &exact, true, 1e-9);
}

/// The ε a worker's ledger file shows spent, in units of 1e-9.
pub(crate) fn ledger_units(path: &Path) -> u64 {
    let Ok(text) = std::fs::read_to_string(path) else {
        return 0;
    };
    let value: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    value
        .get("entry")
        .and_then(|e| e.as_array())
        .map(|entries| {
            entries
                .iter()
                .map(|e| e["spent_nano_epsilon"].as_integer().unwrap() as u64)
                .sum()
        })
        .unwrap_or(0)
}

/// The args of a worker under the default policy with a DP budget, a
/// ledger and an audit trail in `dir`.
pub(crate) fn dp_args(file: &Path, token: &Path, dir: &Path) -> Vec<OsString> {
    let ledger = dir.join("ledger.toml");
    let audit = dir.join("audit.jsonl");
    plain_args(
        file,
        token,
        &[
            "--dp-budget",
            "1000",
            "--dp-ledger",
            ledger.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    )
}

/// ε = 0.01 per query: 10^7 units.
pub(crate) const DP_QUERY: &str = "SELECT dp_count(*, 0.01) AS n FROM clinic";
pub(crate) const DP_UNITS: u64 = 10_000_000;

/// The acceptance test for debits: a worker SIGKILLed at 20 random
/// moments of a stream of DP queries, restarted on the same ledger each
/// time; the ledger never shows less spent than the answers received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dp_debit_survives_sigkill_at_any_point() {
    let (header, rows) = demo_rows();
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("c.csv");
    std::fs::write(&file, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut worker = ProcessWorker::spawn(dp_args(&file, &token, dir.path()));
    let ledger = dir.path().join("ledger.toml");
    let ctx = FedContext::new();
    run(&ctx, &create_sql(&[worker.addr], &token))
        .await
        .unwrap();
    let mut answered = 0u64;
    let mut failed = 0u64;
    for round in 0..20u64 {
        // A kill at a moment drawn per round (0 to 60 ms into the stream;
        // in every other round 200 ms later, so that some queries are
        // answered before a kill even on a loaded machine).
        let later = if round % 2 == 1 { 200_000 } else { 0 };
        let delay = Duration::from_micros(later + rand::random_range(0..60_000));
        let pid = worker.child.id();
        let killer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap();
        });
        let started = Instant::now();
        loop {
            match timed(&ctx, DP_QUERY).await {
                Ok(batches) => {
                    let n = batches[0].column(0).as_primitive::<Int64Type>().len();
                    assert_eq!(n, 1);
                    answered += 1;
                }
                Err(e) => {
                    assert!(
                        matches!(e, FedError::Client { .. })
                            && e.to_string().contains("client 'h0'"),
                        "round {round}: {e}"
                    );
                    failed += 1;
                    break;
                }
            }
            assert!(started.elapsed() < Duration::from_secs(10), "never killed");
        }
        killer.await.unwrap();
        let spent = ledger_units(&ledger);
        assert!(
            spent >= answered * DP_UNITS,
            "round {round}: the ledger shows {spent} units spent, {answered} answers of {DP_UNITS} were received"
        );
        worker.restart();
    }
    assert_eq!(failed, 20);
    assert!(answered > 0, "no query was answered before a kill");
    // Restarted on the same ledger, the worker debits on from there.
    let before = ledger_units(&ledger);
    run(&ctx, DP_QUERY).await.unwrap();
    assert_eq!(ledger_units(&ledger), before + DP_UNITS);
}
