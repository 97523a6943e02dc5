//! `fedsql-bench --pgwire`: what the PostgreSQL endpoint adds. The suite
//! through `fedsql serve` (in this process, on loopback, read by
//! tokio-postgres in the simple protocol, every value decoded as text)
//! against the same federation in-process; then the latency of a trivial
//! query both ways, and through a prepared statement.

use std::time::{Duration, Instant};

use fedsql::FedContext;
use fedsql::frontend::pgwire::{ServerOptions, start};
use tokio_postgres::{NoTls, SimpleQueryMessage};

use crate::baseline::run_federated;
use crate::report::median;
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult};

/// Trivial queries timed each way.
const TRIVIAL_RUNS: usize = 2000;

pub(crate) async fn run(
    args: &Args,
    local: &FedContext,
    queries: &[SuiteQuery],
) -> BenchResult<()> {
    let server = start(
        local.clone(),
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            ..ServerOptions::default()
        },
    )
    .await?;
    let (client, connection) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=bench dbname=fedsql",
            server.addr().port()
        ),
        NoTls,
    )
    .await?;
    tokio::spawn(connection);
    let over_wire = |sql: String| {
        let client = &client;
        async move {
            let started = Instant::now();
            let messages = client.simple_query(&sql).await?;
            let rows = messages
                .iter()
                .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
                .count();
            Ok::<_, tokio_postgres::Error>((started.elapsed(), rows))
        }
    };

    println!(
        "fedsql-bench --pgwire: {} rows over {} Parquet clients; the suite through `fedsql serve` \
         (loopback, tokio-postgres, simple protocol, text) vs the same federation in-process; \
         median of {} runs after one warm-up; ratio = endpoint / in-process.",
        args.rows, args.clients, args.runs
    );
    println!();
    println!("| query | endpoint (s) | in-process (s) | ratio |");
    println!("|---|---:|---:|---:|");
    let (mut wire_total, mut local_total) = (0.0, 0.0);
    if !args.no_suite {
        for query in queries {
            eprintln!("{}: warm-up", query.name);
            let (_, rows) = over_wire(query.sql.clone()).await?;
            let (_, local_rows) = run_federated(local, &query.sql).await?;
            // format_rows puts a header row first.
            if rows + 1 != local_rows.len().max(1) {
                println!(
                    "WARNING: {}: {rows} rows over the endpoint, {} in-process",
                    query.name,
                    local_rows.len().saturating_sub(1)
                );
            }
            let (mut w, mut l) = (Vec::new(), Vec::new());
            for run in 0..args.runs {
                if run % 2 == 0 {
                    w.push(over_wire(query.sql.clone()).await?.0);
                    l.push(run_federated(local, &query.sql).await?.0);
                } else {
                    l.push(run_federated(local, &query.sql).await?.0);
                    w.push(over_wire(query.sql.clone()).await?.0);
                }
            }
            let (w, l) = (median(&w), median(&l));
            wire_total += w;
            local_total += l;
            println!("| {} | {w:.3} | {l:.3} | {:.2} |", query.name, w / l);
        }
        println!(
            "| **suite total** | **{wire_total:.3}** | **{local_total:.3}** | **{:.2}** (target <= 1.1) |",
            wire_total / local_total
        );
    }

    // A trivial query: what the endpoint adds per statement.
    let trivial = "SELECT 1";
    let statement = client.prepare(trivial).await?;
    for _ in 0..100 {
        over_wire(trivial.into()).await?;
        client.query(&statement, &[]).await?;
        local.sql(trivial).await?.collect().await?;
    }
    let (mut simple, mut prepared, mut in_process) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..TRIVIAL_RUNS {
        simple.push(over_wire(trivial.into()).await?.0);
        let started = Instant::now();
        client.query(&statement, &[]).await?;
        prepared.push(started.elapsed());
        let started = Instant::now();
        local.sql(trivial).await?.collect().await?;
        in_process.push(started.elapsed());
    }
    let ms = |times: &[Duration]| median(times) * 1000.0;
    println!();
    println!("| `SELECT 1`, median of {TRIVIAL_RUNS} | latency | added by the endpoint |");
    println!("|---|---:|---:|");
    println!(
        "| in-process (`FedContext::sql` + collect) | {:.3} ms | |",
        ms(&in_process)
    );
    println!(
        "| endpoint, simple protocol | {:.3} ms | {:.3} ms (target < 1 ms) |",
        ms(&simple),
        ms(&simple) - ms(&in_process)
    );
    println!(
        "| endpoint, prepared statement (extended protocol) | {:.3} ms | {:.3} ms |",
        ms(&prepared),
        ms(&prepared) - ms(&in_process)
    );
    Ok(())
}
