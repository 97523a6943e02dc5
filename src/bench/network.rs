//! `fedsql-bench --network`: the aggregate suite and a GLM fit over
//! `--clients` workers on loopback, each behind its own [`FaultProxy`],
//! for round trips of 0, 50 and 200 ms (or `--rtt`), 1% and 5% "loss" at
//! 50 ms, and a bandwidth cap.
//!
//! For each link it reports the suite's time (sum of the queries'
//! medians), the fit's time and rounds, the connections the proxies saw
//! opened (one per worker when the coordinator reuses its channels), the
//! client request bursts the proxies counted per round and worker, and
//! the *effective* round trips per round: the fit's time over the
//! 0 ms link's, divided by the rounds and the added round trip. The
//! ideal is 1: no handshakes, no extra exchanges.

use std::time::Duration;

use fedsql::FedContext;
use fedsql::site::worker::RunningWorker;

use crate::baseline::run_federated;
use crate::data::ClientFile;
use crate::fault_proxy::{FaultProxy, Link};
use crate::report::median;
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult, models};

/// The fit timed over each link.
const FIT: &str = "SELECT * FROM glm_stats('t', 'y_logistic ~ x1 + x2 + x3', 'binomial')";

/// The links measured: a name and the link.
fn links(rtts: &[u64]) -> Vec<(String, Link)> {
    let mut links: Vec<(String, Link)> = rtts
        .iter()
        .map(|ms| {
            (
                format!("{ms} ms"),
                Link {
                    rtt: Duration::from_millis(*ms),
                    ..Link::default()
                },
            )
        })
        .collect();
    let fifty = Duration::from_millis(50);
    for loss in [0.01, 0.05] {
        links.push((
            format!("50 ms, {}% loss", loss * 100.0),
            Link {
                rtt: fifty,
                loss,
                ..Link::default()
            },
        ));
    }
    links.push((
        "50 ms, 1 MiB/s".into(),
        Link {
            rtt: fifty,
            bytes_per_second: Some(1 << 20),
            ..Link::default()
        },
    ));
    links
}

/// A context whose table `t` reaches `workers` through one proxy each.
async fn through_proxies(
    workers: &[RunningWorker],
    token_file: &std::path::Path,
    link: Link,
) -> BenchResult<(Vec<FaultProxy>, FedContext)> {
    let mut proxies = Vec::new();
    for worker in workers {
        proxies.push(FaultProxy::start(worker.addr(), link).await?);
    }
    let clients: Vec<String> = proxies
        .iter()
        .enumerate()
        .map(|(i, p)| format!("'c{i}' = 'grpc://{}'", p.addr()))
        .collect();
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t CLIENTS ({}) OPTIONS ('token_file' '{}', 'timeout' '120s')",
        clients.join(", "),
        token_file.display()
    ))
    .await?;
    Ok((proxies, ctx))
}

/// One link's figures.
struct Figures {
    suite: f64,
    fit: f64,
    rounds: usize,
    connections: u64,
    bursts_per_round: f64,
}

async fn measure(
    args: &Args,
    proxies: &[FaultProxy],
    ctx: &FedContext,
    queries: &[SuiteQuery],
) -> BenchResult<Figures> {
    let mut suite = 0.0;
    if !args.no_suite {
        for query in queries {
            run_federated(ctx, &query.sql).await?;
            let mut times = Vec::new();
            for _ in 0..args.runs {
                times.push(run_federated(ctx, &query.sql).await?.0);
            }
            suite += median(&times);
        }
    }
    models::iterative_fit(ctx, FIT).await?;
    let bursts = |p: &[FaultProxy]| p.iter().map(FaultProxy::round_trips).sum::<u64>();
    let mut fits = Vec::new();
    let mut rounds = 0;
    let mut burst_counts = Vec::new();
    for _ in 0..args.runs {
        let before = bursts(proxies);
        let (total, n, _) = models::iterative_fit(ctx, FIT).await?;
        burst_counts.push((bursts(proxies) - before) as f64);
        fits.push(Duration::from_secs_f64(total));
        rounds = n;
    }
    let connections = proxies.iter().map(FaultProxy::connections).sum();
    burst_counts.sort_by(f64::total_cmp);
    let bursts_per_round =
        burst_counts[burst_counts.len() / 2] / (rounds.max(1) * proxies.len()) as f64;
    Ok(Figures {
        suite,
        fit: median(&fits),
        rounds,
        connections,
        bursts_per_round,
    })
}

pub(crate) async fn run(
    args: &Args,
    plan: &[ClientFile],
    queries: &[SuiteQuery],
    rtts: &[u64],
) -> BenchResult<()> {
    let dir = std::env::temp_dir().join(format!("fedsql-bench-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (workers, _) = crate::remote::loopback_workers(plan, &dir).await?;
    let token_file = dir.join("token");
    println!(
        "fedsql-bench --network: {} rows over {} workers on loopback, each behind a fault proxy \
         (one-way delay of rtt/2 per chunk; \"loss\": a chunk held back 200 ms, TCP's minimum \
         retransmission timeout; a bandwidth cap per connection and direction); the suite's {} \
         queries (sum of medians of {} runs) and `{FIT}` (median of {} fits).",
        args.rows,
        plan.len(),
        queries.len(),
        args.runs,
        args.runs
    );
    println!();
    println!(
        "| link | suite (s) | per query over 0 ms (ms) | glm fit (s) | rounds | per round over 0 ms (ms) | effective round trips per round | connections | client bursts per round and worker |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut base: Option<Figures> = None;
    for (name, link) in links(rtts) {
        eprintln!("network: {name}");
        let (proxies, ctx) = through_proxies(&workers, &token_file, link).await?;
        let f = measure(args, &proxies, &ctx, queries).await?;
        let (suite_extra, round_extra) = match &base {
            Some(b) => (
                (f.suite - b.suite) / queries.len().max(1) as f64,
                (f.fit - b.fit) / f.rounds.max(1) as f64,
            ),
            None => (0.0, 0.0),
        };
        let rtt = link.rtt.as_secs_f64();
        let effective = if rtt > 0.0 && link.loss == 0.0 && link.bytes_per_second.is_none() {
            format!("{:.2}", round_extra / rtt)
        } else {
            "–".into()
        };
        println!(
            "| {name} | {:.3} | {:.1} | {:.3} | {} | {:.1} | {effective} | {} | {:.2} |",
            f.suite,
            suite_extra * 1000.0,
            f.fit,
            f.rounds,
            round_extra * 1000.0,
            f.connections,
            f.bursts_per_round
        );
        if base.is_none() {
            base = Some(f);
        }
    }
    for worker in workers {
        worker.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
