//! The worker defends itself before it trusts, and limits what it spends:
//! secure sessions signed by listed peers, per-request time and memory
//! limits, work stopped when its caller goes away, fit caches that only the
//! fit's own session can use or release, capped inline rows, per-table
//! policies, and unauthenticated requests refused before they cost memory.
//! Child-process workers are measured from /proc (CPU time, VmRSS).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightDescriptor, Ticket};
use datafusion::arrow::array::AsArray;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{CsvReadOptions, SessionContext};
use fedsql::FedContext;
use fedsql::protocol::codec::plan_to_bytes;
use fedsql::protocol::flight::{EncodeRequest, ReleaseFit, TicketCommand, ticket_command};
use fedsql::site::release::identity::SiteIdentity;
use fedsql::site::release::policy::DisclosurePolicy;
use fedsql::site::worker::{self, WorkerArgs, WorkerConfig};
use futures::TryStreamExt;
use prost::Message;
use tempfile::TempDir;
use tonic::Code;

use crate::remote::{TOKEN, Workers, flight, run, with_token};
use crate::support::{Format, demo_rows, write_clients};

/// The first value of a result as a float.
fn scalar(batches: &[RecordBatch]) -> f64 {
    let column = cast(batches[0].column(0), &DataType::Float64).unwrap();
    column.as_primitive::<Float64Type>().value(0)
}

/// `CREATE OR REPLACE FEDERATED TABLE name CLIENTS (...)` over `clients`
/// (name, location), with the tests' token.
fn create_table(
    name: &str,
    clients: &[(String, String)],
    token_file: &Path,
    extra: &str,
) -> String {
    let clients: Vec<String> = clients
        .iter()
        .map(|(n, l)| format!("'{n}' = '{l}'"))
        .collect();
    format!(
        "CREATE OR REPLACE FEDERATED TABLE {name} CLIENTS ({}) OPTIONS ('token_file' '{}'{extra})",
        clients.join(", "),
        token_file.display()
    )
}

fn token_file(dir: &Path) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, TOKEN).unwrap();
    path
}

/// The demo rows repeated `copies` times, as one CSV file.
fn big_file(dir: &Path, copies: usize) -> PathBuf {
    let (header, rows) = demo_rows();
    let mut text = format!("{header}\n");
    for _ in 0..copies {
        for row in &rows {
            text.push_str(row);
            text.push('\n');
        }
    }
    let path = dir.join("big.csv");
    std::fs::write(&path, text).unwrap();
    path
}

/// Secure sums with `[policy] peers`: a site masks only with session keys
/// signed by the peers it lists. Listed peers get the exact sum; a round
/// with a participant the coordinator supplies itself (an in-process
/// client, or a worker whose identity is not listed) is refused.
#[tokio::test]
async fn secure_sums_mask_only_with_listed_peers() {
    let (header, rows) = demo_rows();
    let n = rows.len();
    let dir = TempDir::new().unwrap();
    let sizes = [n / 4, n / 4, n / 4, n - 3 * (n / 4)];
    let files = write_clients(
        &dir.path().join("sites"),
        &header,
        &rows,
        &sizes,
        Format::Csv,
    );
    let token = token_file(dir.path());
    let identities: Vec<Arc<SiteIdentity>> = (0..4)
        .map(|i| {
            let path = dir.path().join(format!("site{i}.key"));
            Arc::new(SiteIdentity::load_or_create(&path).unwrap().0)
        })
        .collect();
    // Sites 0-2 list each other (and themselves: harmless); site 3's
    // identity is listed nowhere.
    let listed: Vec<[u8; 32]> = identities[..3].iter().map(|i| i.public_key()).collect();
    let next = AtomicUsize::new(0);
    let workers = Workers::start_with(&files, "clinic", |mut c: WorkerConfig| {
        let i = next.fetch_add(1, Ordering::SeqCst);
        c.policy = Some(DisclosurePolicy::default());
        c.identity = Some(Arc::clone(&identities[i]));
        c.peers = listed.clone();
        c
    })
    .await;
    let worker = |i: usize| {
        (
            format!("w{i}"),
            format!("grpc://{}", workers.workers[i].addr()),
        )
    };
    let ctx = FedContext::new();
    let sql = "SELECT secure_sum(age, 0, 120) AS s FROM clinic";

    run(
        &ctx,
        &create_table("clinic", &[worker(0), worker(1), worker(2)], &token, ""),
    )
    .await
    .unwrap();
    let got = scalar(&run(&ctx, sql).await.unwrap());
    let central = SessionContext::new();
    let paths: Vec<&str> = files[..3].iter().map(|f| f.to_str().unwrap()).collect();
    let df = central
        .read_csv(paths, CsvReadOptions::new())
        .await
        .unwrap();
    central.register_table("clinic", df.into_view()).unwrap();
    let want = scalar(
        &central
            .sql("SELECT sum(age) FROM clinic")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap(),
    );
    assert_eq!(got, want, "the secure sum of listed peers is the plain sum");

    // The coordinator supplies a participant of its own: an in-process
    // client (whose keys it holds), or a worker whose identity is unlisted.
    let own = ("mine".to_string(), files[3].display().to_string());
    for clients in [
        vec![worker(0), worker(1), own],
        vec![worker(0), worker(1), worker(3)],
    ] {
        run(&ctx, &create_table("clinic", &clients, &token, ""))
            .await
            .unwrap();
        let e = run(&ctx, sql).await.unwrap_err().to_string();
        assert!(
            e.contains("refused") && e.contains("not signed by one of its listed peers"),
            "{e}"
        );
    }
    // Two listed peers make only two participants: min_secure_clients = 3.
    run(
        &ctx,
        &create_table("clinic", &[worker(0), worker(1)], &token, ""),
    )
    .await
    .unwrap();
    let e = run(&ctx, sql).await.unwrap_err().to_string();
    assert!(e.contains("min_secure_clients"), "{e}");
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("REFUSED") && l.contains("peers policy")),
        "{logs:#?}"
    );
    // And the listed peers still answer.
    run(
        &ctx,
        &create_table("clinic", &[worker(0), worker(1), worker(2)], &token, ""),
    )
    .await
    .unwrap();
    assert_eq!(scalar(&run(&ctx, sql).await.unwrap()), want);
}

/// A `fedsql worker` child process, killed when dropped.
struct ChildWorker {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl ChildWorker {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fedsql"))
            .arg("worker")
            .args(["--audit-log", "none"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix("fedsql worker listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        let stderr: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            addr,
            stderr,
        }
    }

    fn saw(&self, text: &str) -> bool {
        self.stderr.lock().unwrap().iter().any(|l| l.contains(text))
    }

    fn proc_file(&self, name: &str) -> String {
        std::fs::read_to_string(format!("/proc/{}/{name}", self.child.id())).unwrap()
    }

    /// CPU time (user + system) the worker has used so far.
    fn cpu(&self) -> Duration {
        let stat = self.proc_file("stat");
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let per_second = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(100);
        Duration::from_secs_f64(ticks as f64 / per_second as f64)
    }

    /// Resident memory, in bytes.
    fn rss(&self) -> u64 {
        let status = self.proc_file("status");
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    }
}

impl Drop for ChildWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Expensive per row and cheap per batch (so that a cancelled task stops
/// at its next batch): `depth` nested MD5s of a row's region copied 20
/// times, whose cost grows with `depth` while a row stays small (catalogued
/// functions only: a site runs nothing else). On the big file it runs for
/// many seconds, well past the 2 s timeouts below.
fn slow_query(depth: usize) -> String {
    let region = vec!["region"; 20].join(", ");
    format!(
        "SELECT sum(length({}concat({region}){})) AS s FROM clinic",
        "md5(".repeat(depth),
        ")".repeat(depth)
    )
}

/// A coordinator that times out cancels the request at the worker: its
/// CPU use stops within a second, it releases nothing, and it keeps
/// serving.
#[tokio::test]
async fn a_request_whose_caller_went_away_stops_at_the_worker() {
    let dir = TempDir::new().unwrap();
    let token = token_file(dir.path());
    let big = big_file(dir.path(), 1000);
    let table = format!("clinic={}", big.display());
    let w = ChildWorker::spawn(&[
        "--policy",
        "none",
        "--listen",
        "127.0.0.1:0",
        "--table",
        &table,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    let ctx = FedContext::new();
    let clients = [("w".to_string(), format!("grpc://{}", w.addr))];
    run(
        &ctx,
        &create_table("clinic", &clients, &token, ", 'timeout' '2s'"),
    )
    .await
    .unwrap();
    let before = w.cpu();
    let started = Instant::now();
    let e = run(&ctx, &slow_query(8)).await.unwrap_err().to_string();
    let gave_up = Instant::now();
    assert!(
        e.contains("client 'w'") && e.contains("no answer within"),
        "{e}"
    );
    let busy = w.cpu() - before;
    assert!(
        busy > Duration::from_millis(200),
        "the worker was computing until the caller gave up ({busy:?} CPU in {:?})",
        gave_up - started
    );
    // The worker notices (within a second, given a core: a loaded test
    // machine may take longer to run it), and its CPU use stops within a
    // second.
    while !w.saw("CANCELLED") {
        assert!(
            gave_up.elapsed() < Duration::from_secs(5),
            "no cancellation logged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let noticed = gave_up.elapsed();
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(noticed)).await;
    let at_one_second = w.cpu();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = w.cpu() - at_one_second;
    assert!(
        idle < Duration::from_millis(150),
        "the cancelled request still uses CPU: {idle:?} in the second after"
    );
    assert!(!w.saw("released"), "the cancelled encoder never finished");
    let ran = w
        .stderr
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("running encoder"))
        .count();
    assert_eq!(ran, 1, "the call that timed out was not sent again");
    eprintln!(
        "cancellation: noticed {noticed:?} after the caller gave up; {idle:?} CPU in the following second (busy before: {busy:?})"
    );
    // The worker keeps serving (a count of all its rows, with time for it:
    // no call is sent twice, so a slow machine gets one timeout's budget).
    run(
        &ctx,
        &create_table("clinic", &clients, &token, ", 'timeout' '60s'"),
    )
    .await
    .unwrap();
    let n = scalar(&run(&ctx, "SELECT count(*) FROM clinic").await.unwrap());
    assert_eq!(n as usize, demo_rows().1.len() * 1000);
}

/// A call that timed out is not sent again: the worker, which counts the
/// encoders it runs, ran the slow one once (and stopped it when the
/// coordinator gave up), not once per attempt.
#[tokio::test]
async fn a_call_that_timed_out_is_not_sent_again() {
    let dir = TempDir::new().unwrap();
    let token = token_file(dir.path());
    let big = big_file(dir.path(), 300);
    let workers = Workers::start(std::slice::from_ref(&big), "clinic").await;
    let ctx = FedContext::new();
    let clients = [(
        "w".to_string(),
        format!("grpc://{}", workers.workers[0].addr()),
    )];
    run(
        &ctx,
        &create_table("clinic", &clients, &token, ", 'timeout' '1s'"),
    )
    .await
    .unwrap();
    let ran = || {
        workers
            .logs()
            .iter()
            .filter(|l| l.contains("running encoder"))
            .count()
    };
    let slower = slow_query(8);
    let e = run(&ctx, &slower).await.unwrap_err().to_string();
    assert!(
        e.contains("client 'w'") && e.contains("no answer within"),
        "{e}"
    );
    let cancelled = || {
        workers
            .logs()
            .iter()
            .filter(|l| l.contains("CANCELLED"))
            .count()
    };
    let gave_up = Instant::now();
    while cancelled() == 0 && gave_up.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for a second attempt to arrive, had there been one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ran(), 1, "{:#?}", workers.logs());
    assert_eq!(cancelled(), 1, "{:#?}", workers.logs());
    // The next query is one more request (with time for it).
    run(
        &ctx,
        &create_table("clinic", &clients, &token, ", 'timeout' '60s'"),
    )
    .await
    .unwrap();
    let n = scalar(&run(&ctx, "SELECT count(*) FROM clinic").await.unwrap());
    assert_eq!(n as usize, demo_rows().1.len() * 300);
    assert_eq!(ran(), 2, "{:#?}", workers.logs());
}

/// In-process workers with limits: one running past its request_timeout
/// or memory_limit is refused with the limit's name, and the next query
/// is answered.
#[tokio::test]
async fn requests_past_their_time_or_memory_limit_are_refused() {
    let dir = TempDir::new().unwrap();
    let big = big_file(dir.path(), 300);
    let workers = Workers::start_with(std::slice::from_ref(&big), "clinic", |mut c| {
        c.limits.timeout = Some(Duration::from_secs(2));
        c
    })
    .await;
    let ctx = FedContext::new();
    run(&ctx, &workers.create("clinic")).await.unwrap();
    let started = Instant::now();
    let slower = slow_query(8);
    let e = run(&ctx, &slower).await.unwrap_err().to_string();
    assert!(
        e.contains("refused") && e.contains("(its request_timeout)"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let n = scalar(&run(&ctx, "SELECT count(*) FROM clinic").await.unwrap());
    assert_eq!(n as usize, demo_rows().1.len() * 300);

    // Many groups in a small memory pool.
    let ids = dir.path().join("ids.csv");
    let mut text = String::from("id,x\n");
    for i in 0..200_000 {
        text.push_str(&format!("{i},{}\n", i % 7));
    }
    std::fs::write(&ids, text).unwrap();
    let workers = Workers::start_with(std::slice::from_ref(&ids), "ids", |mut c| {
        c.limits.memory = Some(2 << 20);
        c
    })
    .await;
    run(&ctx, &workers.create("ids")).await.unwrap();
    let e = run(&ctx, "SELECT id, sum(x) FROM ids GROUP BY id")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("refused") && e.contains("2 MiB of memory (its memory_limit)"),
        "{e}"
    );
    let s = scalar(&run(&ctx, "SELECT sum(x) FROM ids").await.unwrap());
    assert_eq!(s, (0..200_000).map(|i| (i % 7) as f64).sum::<f64>());
}

/// The first aggregate node of a plan.
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

/// A fit's kept rows belong to its session: requests naming another fit
/// neither use nor release them, and another fit starting keeps them.
#[tokio::test]
async fn a_fits_kept_rows_are_used_and_released_only_by_its_session() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "x\n1\n2\n3\n").unwrap();
    let workers = Workers::start_with(std::slice::from_ref(&file), "t", |c| c).await;
    let addr = workers.workers[0].addr();
    let ctx = FedContext::new();
    run(&ctx, &workers.create("t")).await.unwrap();
    let plan = ctx
        .session()
        .state()
        .create_logical_plan("SELECT sum(x) FROM t")
        .await
        .unwrap();
    let plan = fedsql::coordinator::client_column::bind_plan(plan, "h0").unwrap();
    let plan = plan_to_bytes(&aggregate_of(&plan), "t").await.unwrap();
    // Each session on its own connection, as a coordinator keeps one per
    // worker (a closed connection releases the fits it sent rounds of).
    let my_client = flight(addr).await;
    let their_client = flight(addr).await;
    let encode = |mut client: FlightServiceClient<tonic::transport::Channel>, scope: u64| {
        let ticket = TicketCommand {
            command: Some(ticket_command::Command::Encode(EncodeRequest {
                plan: plan.clone(),
                fit_scope: Some(scope),
            })),
        }
        .encode_to_vec();
        async move {
            let stream = client
                .do_get(with_token(
                    Ticket {
                        ticket: ticket.into(),
                    },
                    TOKEN,
                ))
                .await
                .unwrap()
                .into_inner();
            let batches: Vec<RecordBatch> =
                FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
                    .try_collect()
                    .await
                    .unwrap();
            scalar(&batches)
        }
    };
    let release = |mut client: FlightServiceClient<tonic::transport::Channel>, scope: u64| async move {
        client
            .do_action(with_token(
                Action {
                    r#type: "fedsql.release_fit".into(),
                    body: ReleaseFit { scope }.encode_to_vec().into(),
                },
                TOKEN,
            ))
            .await
            .unwrap();
    };
    let mine: u64 = 0x5eed_0000_0000_0001;
    assert_eq!(encode(my_client.clone(), mine).await, 6.0);
    std::fs::write(&file, "x\n10\n20\n").unwrap();
    // Another session: its own fit reads the file as it is now, and its
    // releases (of its own fit, or of ids it guesses) leave mine alone.
    let theirs: u64 = 0x0bad_0000_0000_0002;
    assert_eq!(encode(their_client.clone(), theirs).await, 30.0);
    for scope in [theirs, mine + 1, mine - 1, 1] {
        release(their_client.clone(), scope).await;
    }
    assert_eq!(
        encode(my_client.clone(), mine).await,
        6.0,
        "my fit still reads its kept rows"
    );
    release(my_client.clone(), mine).await;
    assert_eq!(
        encode(my_client.clone(), mine).await,
        30.0,
        "released: the file is read again"
    );
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("release of fit 1: no rows kept")),
        "{logs:#?}"
    );
    // A coordinator's fit ids are random, not a counter another session
    // could walk.
    let a = fedsql::coordinator::fit_scope::FitScope::new().id();
    let b = fedsql::coordinator::fit_scope::FitScope::new().id();
    assert!(a.abs_diff(b) > 1_000_000, "{a} {b}");
}

/// A plan carrying more inline shared rows than `max_shared_rows` is
/// refused at the worker.
#[tokio::test]
async fn inline_shared_rows_are_capped() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "k,x\n1,10\n2,20\n3,30\n").unwrap();
    let workers = Workers::start_with(std::slice::from_ref(&file), "t", |mut c| {
        c.limits.max_shared_rows = 10;
        c
    })
    .await;
    let ctx = FedContext::new();
    run(&ctx, &workers.create("t")).await.unwrap();
    let lookup = |rows: usize| {
        let values: Vec<String> = (1..=rows).map(|k| format!("({k}, {k}.5)")).collect();
        format!(
            "SELECT sum(t.x * v.w) FROM t JOIN (VALUES {}) AS v(k, w) ON t.k = v.k",
            values.join(", ")
        )
    };
    let got = scalar(&run(&ctx, &lookup(5)).await.unwrap());
    assert_eq!(got, 10.0 * 1.5 + 20.0 * 2.5 + 30.0 * 3.5);
    let e = run(&ctx, &lookup(50)).await.unwrap_err().to_string();
    assert!(
        e.contains("more than 10 rows of shared tables or VALUES"),
        "{e}"
    );
}

/// `[policy.tables.NAME]` overrides the worker's policy for one table: the
/// same rows answer a group of 7 under the default k = 5 and refuse it
/// under that table's k = 10.
#[tokio::test]
async fn one_table_has_its_own_policy() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("t.csv");
    let mut text = String::from("g,x\n");
    for i in 0..27 {
        text.push_str(&format!("{},{i}\n", if i < 7 { "small" } else { "large" }));
    }
    std::fs::write(&file, text).unwrap();
    let token = token_file(dir.path());
    let config = dir.path().join("worker.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ntoken_file = \"token\"\n[tables]\nloose = \"{0}\"\nstrict = \"{0}\"\nopen = \"{0}\"\n\
             [policy]\nextremes = \"allow\"\n[policy.tables.strict]\nmin_group_rows = 10\n[policy.tables]\nopen = \"none\"\n",
            file.display()
        ),
    )
    .unwrap();
    let args = WorkerArgs {
        config: Some(config.clone()),
        audit_log: Some("none".into()),
        ..Default::default()
    };
    let mut c = WorkerConfig::from_args(&args).await.unwrap();
    let strict = c.policy_of("strict").unwrap();
    assert_eq!((strict.min_group_rows, strict.allow_extremes), (10, true));
    assert_eq!(c.policy_of("loose").unwrap().min_group_rows, 5);
    assert_eq!(c.policy_of("open"), None);
    let logs: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&logs);
    c.log = Some(Arc::new(move |l: &str| sink.lock().unwrap().push(l.into())));
    let w = worker::start(c).await.unwrap();
    let ctx = FedContext::new();
    let sql = |t: &str| format!("SELECT g, count(*) AS n FROM {t} GROUP BY g ORDER BY g");
    for t in ["loose", "strict", "open"] {
        let url = format!("grpc://{}/{t}", w.addr());
        run(&ctx, &create_table(t, &[("w".into(), url)], &token, ""))
            .await
            .unwrap();
    }
    let counts = |batches: &[RecordBatch]| {
        let n = cast(batches[0].column(1), &DataType::Float64).unwrap();
        n.as_primitive::<Float64Type>().values().to_vec()
    };
    assert_eq!(
        counts(&run(&ctx, &sql("loose")).await.unwrap()),
        [20.0, 7.0]
    );
    assert_eq!(counts(&run(&ctx, &sql("open")).await.unwrap()), [20.0, 7.0]);
    let e = run(&ctx, &sql("strict")).await.unwrap_err().to_string();
    assert!(
        e.contains("fewer than 10 of its rows (its min_group_rows policy)"),
        "{e}"
    );
    let shown = ctx.clients_batch("strict").await.unwrap();
    let policy = shown.column_by_name("policy").unwrap().as_string::<i32>();
    assert!(policy.value(0).contains("min_group_rows=10"), "{shown:?}");

    // A section for a table the worker does not serve is an error.
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ntoken_file = \"token\"\n[tables]\nt = \"{}\"\n[policy.tables.other]\nmin_group_rows = 10\n",
            file.display()
        ),
    )
    .unwrap();
    let e = WorkerConfig::from_args(&args)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("serves no table `other`"), "{e}");
}

/// An unauthenticated 100 MB request to a worker process is refused on its
/// headers, and the worker's resident memory barely moves.
#[tokio::test]
async fn an_unauthenticated_100_mb_request_costs_the_worker_no_memory() {
    let dir = TempDir::new().unwrap();
    let token = token_file(dir.path());
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "x\n1\n").unwrap();
    let table = format!("t={}", file.display());
    let w = ChildWorker::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--table",
        &table,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    let addr: std::net::SocketAddr = w.addr.parse().unwrap();
    // Warm the worker up with a proper call first.
    flight(addr)
        .await
        .get_schema(with_token(
            FlightDescriptor::new_path(vec!["t".into()]),
            TOKEN,
        ))
        .await
        .unwrap();
    let before = w.rss();
    for _ in 0..2 {
        let action = Action {
            r#type: "fedsql.explain".into(),
            body: vec![7u8; 100 << 20].into(),
        };
        let status = flight(addr)
            .await
            .max_encoding_message_size(usize::MAX)
            .do_action(with_token(action, "not-the-token"))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = w.rss();
    let growth = after.saturating_sub(before);
    eprintln!("VmRSS before {before} bytes, after two 100 MB requests {after} bytes: +{growth}");
    assert!(
        growth < 4 << 20,
        "the worker's memory grew by {growth} bytes"
    );
    assert!(w.saw("wrong token"));
    // It still serves.
    flight(addr)
        .await
        .get_schema(with_token(
            FlightDescriptor::new_path(vec!["t".into()]),
            TOKEN,
        ))
        .await
        .unwrap();
}

/// A site's identity key is made on first use and shown for its peers'
/// lists; `[policy] peers` in the TOML reads those keys, and needs the
/// site's own identity key.
#[tokio::test]
async fn identity_keys_are_made_once_and_listed_as_peers() {
    let dir = TempDir::new().unwrap();
    let key = dir.path().join("site.key");
    let show = || {
        let out = Command::new(env!("CARGO_BIN_EXE_fedsql"))
            .args(["worker", "--identity-key"])
            .arg(&key)
            .arg("--show-identity")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let shown = show();
    assert_eq!(show(), shown, "the key is made once");
    let public = fedsql::site::release::identity::parse_peer(&shown).unwrap();
    token_file(dir.path());
    std::fs::write(dir.path().join("t.csv"), "x\n1\n").unwrap();
    let config = dir.path().join("worker.toml");
    let toml = |identity: &str| {
        format!(
            "listen = \"127.0.0.1:0\"\ntoken_file = \"token\"\n{identity}[tables]\nt = \"t.csv\"\n[policy]\npeers = [\"{shown}\"]\n"
        )
    };
    std::fs::write(&config, toml("identity_key = \"site.key\"\n")).unwrap();
    let args = WorkerArgs {
        config: Some(config.clone()),
        audit_log: Some("none".into()),
        ..Default::default()
    };
    let c = WorkerConfig::from_args(&args).await.unwrap();
    assert_eq!(c.peers, [public]);
    assert_eq!(c.identity.unwrap().public_key(), public);
    std::fs::write(&config, toml("")).unwrap();
    let e = WorkerConfig::from_args(&args)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs its own identity key"), "{e}");
}
