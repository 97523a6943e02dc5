//! `fedsql-bench --load`: load held by a `fedsql serve` process and by a
//! `fedsql worker` process (both the built binary, so that their memory
//! is theirs alone).
//!
//! 1. `fedsql serve` over the generated clients (in-process sites), with
//!    `--load-clients` tokio-postgres connections that each run, for
//!    `--load-seconds`, a mix drawn at random: 70% the suite's aggregate
//!    queries, 10% a small GLM fit, 20% a query the exposure check
//!    refuses (raw rows). Every refusal must be one, and nothing else may
//!    fail.
//! 2. One `fedsql worker` serving the first client's file to
//!    `--coordinators` coordinators in this process (a context, and so a
//!    connection, each), running aggregates and the small fit.
//!
//! It samples the server's resident memory and open file descriptors
//! every `--sample-every` seconds, and reports throughput, p50 and p99
//! latency per kind, errors, refusals and peak memory (`VmHWM`). A long
//! run at lower concurrency (`--load-clients 10 --load-seconds 600
//! --coordinators 0 --sample-every 10`) is the soak: its samples show
//! whether memory or connections grow.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fedsql::FedContext;
use rand::Rng;
use tokio_postgres::NoTls;

use crate::data::{ClientFile, federated_table_sql};
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult};

const GLM: &str = "SELECT * FROM glm('t', 'y_logistic ~ x1 + x2', 'binomial')";
const REFUSED: &str = "SELECT x1 FROM t LIMIT 5";
const TOKEN: &str = "fedsql-bench-load-token";

/// What one request was, how long it took and how it ended.
struct Outcome {
    kind: &'static str,
    latency: Duration,
    /// `None`: as expected (an answer, or a refusal for a refusal);
    /// otherwise the unexpected error.
    error: Option<String>,
}

/// A process's resident memory now and at its peak (KiB), and its open
/// file descriptors.
fn sample(pid: u32) -> Option<(u64, u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((field("VmRSS:")?, field("VmHWM:")?, fds))
}

/// Samples `pid` every `every` until `stop`: (seconds, RSS KiB, HWM KiB, fds).
fn sampler(
    pid: u32,
    every: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(f64, u64, u64, usize)>> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut samples = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some((rss, hwm, fds)) = sample(pid) {
                samples.push((started.elapsed().as_secs_f64(), rss, hwm, fds));
            }
            tokio::time::sleep(every).await;
        }
        if let Some((rss, hwm, fds)) = sample(pid) {
            samples.push((started.elapsed().as_secs_f64(), rss, hwm, fds));
        }
        samples
    })
}

/// The `fedsql` binary beside this one, or `--fedsql-bin`.
fn fedsql_bin(args: &Args) -> PathBuf {
    args.fedsql_bin.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .map(|e| e.with_file_name("fedsql"))
            .unwrap_or_else(|_| PathBuf::from("fedsql"))
    })
}

fn free_port() -> BenchResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something listens on `port`.
async fn listening(port: u16) -> BenchResult<()> {
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("nothing listens on port {port}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Prints the outcomes per kind and in all, and the memory samples.
fn report(
    title: &str,
    seconds: f64,
    outcomes: &[Outcome],
    samples: &[(f64, u64, u64, usize)],
    print_samples: bool,
) {
    let mut kinds: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        kinds.entry(o.kind).or_default().push(o);
    }
    println!();
    println!("{title}");
    println!();
    println!("| requests | count | per second | p50 (ms) | p99 (ms) | unexpected errors |");
    println!("|---|---:|---:|---:|---:|---:|");
    let line = |name: &str, of: &[&Outcome]| {
        let mut latencies: Vec<Duration> = of.iter().map(|o| o.latency).collect();
        latencies.sort();
        let errors = of.iter().filter(|o| o.error.is_some()).count();
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {errors} |",
            of.len(),
            of.len() as f64 / seconds,
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
        );
    };
    for (kind, of) in &kinds {
        line(kind, of);
    }
    let all: Vec<&Outcome> = outcomes.iter().collect();
    line("**all**", &all);
    // The first few unexpected errors, as examples.
    for o in outcomes.iter().filter(|o| o.error.is_some()).take(5) {
        println!("ERROR ({}): {}", o.kind, o.error.as_deref().unwrap_or(""));
    }
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let peak = samples.iter().map(|s| s.2).max().unwrap_or(0);
        let most_fds = samples.iter().map(|s| s.3).max().unwrap_or(0);
        println!();
        println!(
            "Server memory: resident {:.1} MiB at the start, {:.1} MiB at the end, peak (VmHWM) {:.1} MiB; open file descriptors {} at the start, {} at the end, at most {most_fds}.",
            first.1 as f64 / 1024.0,
            last.1 as f64 / 1024.0,
            peak as f64 / 1024.0,
            first.3,
            last.3
        );
    }
    if print_samples {
        println!();
        println!("| time (s) | resident (MiB) | peak (MiB) | open fds |");
        println!("|---:|---:|---:|---:|");
        for (t, rss, hwm, fds) in samples {
            println!(
                "| {t:.0} | {:.1} | {:.1} | {fds} |",
                *rss as f64 / 1024.0,
                *hwm as f64 / 1024.0
            );
        }
    }
}

/// A query of the mix: its kind and SQL.
fn draw(queries: &[SuiteQuery], with_refusals: bool) -> (&'static str, String) {
    let mut rng = rand::rng();
    let roll: f64 = rng.random();
    if with_refusals && roll < 0.2 {
        ("refusal", REFUSED.to_string())
    } else if roll < 0.3 {
        ("glm", GLM.to_string())
    } else {
        let q = &queries[rng.random_range(0..queries.len())];
        ("aggregate", q.sql.clone())
    }
}

/// Phase 1: `fedsql serve` under `clients` connections.
async fn serve_load(
    args: &Args,
    plan: &[ClientFile],
    queries: &[SuiteQuery],
    dir: &Path,
) -> BenchResult<()> {
    let setup = dir.join("setup.sql");
    std::fs::write(&setup, format!("{};\n", federated_table_sql(plan, "")))?;
    let port = free_port()?;
    let child = Command::new(fedsql_bin(args))
        .args([
            "serve",
            "--no-demo",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "-f",
        ])
        .arg(&setup)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let server = Process(child);
    listening(port).await?;
    let pid = server.0.id();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let samples = sampler(pid, args.sample_every(), Arc::clone(&stop));
    let seconds = args.load_seconds;
    // Every client connects first; then all start at once.
    let connecting = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..args.load_clients {
        let (client, connection) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={port} user=bench dbname=fedsql"),
            NoTls,
        )
        .await?;
        tokio::spawn(connection);
        clients.push(client);
    }
    eprintln!(
        "{} clients connected in {:.1} s",
        clients.len(),
        connecting.elapsed().as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let mut tasks = Vec::new();
    for client in clients {
        let outcomes = Arc::clone(&outcomes);
        let queries = queries.to_vec();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let (kind, sql) = draw(&queries, true);
                let started = Instant::now();
                let result = client.simple_query(&sql).await;
                let latency = started.elapsed();
                let error = match (kind, result) {
                    ("refusal", Err(e))
                        if e.code()
                            == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) =>
                    {
                        None
                    }
                    ("refusal", Err(e)) => Some(format!("not a refusal: {e:?}")),
                    ("refusal", Ok(_)) => Some("answered raw rows".into()),
                    (_, Ok(_)) => None,
                    (_, Err(e)) => Some(format!("{e:?}")),
                };
                outcomes.lock().expect("not poisoned").push(Outcome {
                    kind,
                    latency,
                    error,
                });
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = samples.await?;
    let outcomes = std::mem::take(&mut *outcomes.lock().expect("not poisoned"));
    report(
        &format!(
            "`fedsql serve` (a process), {} tokio-postgres clients for {seconds} s, {} rows over {} in-process clients; mix: 70% suite aggregates, 10% `{GLM}`, 20% `{REFUSED}` (refused)",
            args.load_clients,
            args.rows,
            plan.len()
        ),
        elapsed,
        &outcomes,
        &samples,
        args.load_seconds >= 300,
    );
    Ok(())
}

/// Phase 2: one `fedsql worker` under `coordinators` coordinators.
async fn worker_load(
    args: &Args,
    plan: &[ClientFile],
    queries: &[SuiteQuery],
    dir: &Path,
) -> BenchResult<()> {
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN)?;
    let port = free_port()?;
    let child = Command::new(fedsql_bin(args))
        .args([
            "worker",
            "--policy",
            "none",
            "--audit-log",
            "none",
            "--listen",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--table")
        .arg(format!("t={}", plan[0].path.display()))
        .arg("--token-file")
        .arg(&token_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let worker = Process(child);
    listening(port).await?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let samples = sampler(worker.0.id(), args.sample_every(), Arc::clone(&stop));
    let seconds = args.load_seconds;
    let mut contexts = Vec::new();
    for _ in 0..args.coordinators {
        let ctx = FedContext::new();
        ctx.sql(&format!(
            "CREATE FEDERATED TABLE t CLIENTS ('w' = 'grpc://127.0.0.1:{port}') OPTIONS ('token_file' '{}', 'timeout' '120s')",
            token_file.display()
        ))
        .await?;
        contexts.push(ctx);
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let mut tasks = Vec::new();
    for ctx in contexts {
        let outcomes = Arc::clone(&outcomes);
        let queries = queries.to_vec();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let (kind, sql) = draw(&queries, false);
                let started = Instant::now();
                let result = match ctx.sql(&sql).await {
                    Ok(df) => df.collect().await.map(|_| ()),
                    Err(e) => Err(e),
                };
                outcomes.lock().expect("not poisoned").push(Outcome {
                    kind,
                    latency: started.elapsed(),
                    error: result.err().map(|e| e.to_string()),
                });
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = samples.await?;
    let outcomes = std::mem::take(&mut *outcomes.lock().expect("not poisoned"));
    report(
        &format!(
            "`fedsql worker` (a process) serving {} rows to {} coordinators (a connection each) for {seconds} s; mix: 70% suite aggregates, 30% `{GLM}`",
            plan[0].rows, args.coordinators
        ),
        elapsed,
        &outcomes,
        &samples,
        args.load_seconds >= 300,
    );
    Ok(())
}

pub(crate) async fn run(
    args: &Args,
    plan: &[ClientFile],
    queries: &[SuiteQuery],
) -> BenchResult<()> {
    let dir = std::env::temp_dir().join(format!("fedsql-bench-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "fedsql-bench --load: {} rows over {} Parquet clients; servers are `{}` processes; latency from the request's send to its last row.",
        args.rows,
        plan.len(),
        fedsql_bin(args).display()
    );
    if args.load_clients > 0 {
        serve_load(args, plan, queries, &dir).await?;
    }
    if args.coordinators > 0 {
        worker_load(args, plan, queries, &dir).await?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
