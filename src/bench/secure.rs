//! Secure aggregation at scale: a masked sum over 10, 100 and 1,000
//! in-process clients (and any counts `--secure` names), beside the plain
//! sum over the same clients, and the same masked sum with one client in
//! ten lost after masking (recovered from the others' shares).
//!
//! Each client holds a few rows in memory, so the figures are the cost of
//! the protocol (keys, Shamir shares, sealed envelopes, masks, the
//! consistency round, unmasking), not of reading data. Above 100 clients
//! the round uses the sparse neighbour graph (each client masks with
//! O(log n) others). For counts up to [`MAX_LOOPBACK`], the same sums run
//! again over as many `fedsql worker`s on loopback (in this process), so
//! the five exchanges cross gRPC.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::encoder::StateBatch;
use fedsql::protocol::secure::{
    MaskRequest, Revealed, SecureSession, SecureSetup, ShareEnvelope, ShareRequest, UnmaskRequest,
};
use fedsql::protocol::site::{Site, SiteRequest};
use fedsql::site::local::LocalClient;
use fedsql::{FedContext, FedError};

use crate::report::{median, minimum};
use crate::{Args, BenchResult};

/// A client that, if `lost`, drops out after masking.
#[derive(Debug)]
struct Client {
    inner: Arc<LocalClient>,
    lost: bool,
}

#[async_trait]
impl Site for Client {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn format(&self) -> String {
        self.inner.format()
    }
    fn in_process(&self) -> bool {
        true
    }
    async fn encode(&self, request: &SiteRequest<'_>) -> fedsql::Result<StateBatch> {
        self.inner.encode(request).await
    }
    async fn explain(&self, request: &SiteRequest<'_>) -> fedsql::Result<String> {
        self.inner.explain(request).await
    }
    async fn secure_setup(
        &self,
        request: &SiteRequest<'_>,
        session: &SecureSession,
    ) -> fedsql::Result<SecureSetup> {
        self.inner.secure_setup(request, session).await
    }
    async fn secure_reveal(
        &self,
        request: &SiteRequest<'_>,
        reveal: &ShareRequest,
    ) -> fedsql::Result<[u8; 32]> {
        self.inner.secure_reveal(request, reveal).await
    }
    async fn secure_share(
        &self,
        request: &SiteRequest<'_>,
        share: &ShareRequest,
    ) -> fedsql::Result<Vec<ShareEnvelope>> {
        self.inner.secure_share(request, share).await
    }
    async fn encode_masked(
        &self,
        request: &SiteRequest<'_>,
        mask: &MaskRequest,
    ) -> fedsql::Result<StateBatch> {
        let state = self.inner.encode_masked(request, mask).await?;
        if self.lost {
            return Err(FedError::Internal("lost after masking".into()));
        }
        Ok(state)
    }
    async fn secure_confirm(
        &self,
        request: &SiteRequest<'_>,
        confirm: &fedsql::protocol::secure::consistency::ConfirmRequest,
    ) -> fedsql::Result<fedsql::protocol::secure::consistency::ListSignature> {
        self.inner.secure_confirm(request, confirm).await
    }
    async fn secure_unmask(
        &self,
        request: &SiteRequest<'_>,
        unmask: &UnmaskRequest,
    ) -> fedsql::Result<Vec<Revealed>> {
        self.inner.secure_unmask(request, unmask).await
    }
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]))
}

/// A federation of `n` in-process clients of 4 rows each; every tenth
/// lost after masking if `dropouts`.
fn federation(n: usize, dropouts: bool) -> BenchResult<FedContext> {
    let engine = Arc::new(fedsql::site::engine::SiteEngine::new());
    let mut clients: Vec<Arc<dyn Site>> = Vec::with_capacity(n);
    for c in 0..n {
        let name = format!("c{c}");
        let rows = RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from(vec![c as i64 % 100, 1, 2, 3]))],
        )?;
        let inner = Arc::new(LocalClient::from_batches(
            &name,
            &format!("memory:{name}"),
            schema(),
            vec![rows],
            Arc::clone(&engine),
        )?);
        clients.push(Arc::new(Client {
            inner,
            lost: dropouts && c % 10 == 9,
        }));
    }
    let ctx = FedContext::new();
    ctx.session().register_table(
        "t",
        FederatedTable::new("t", schema(), clients).into_provider(),
    )?;
    Ok(ctx)
}

/// The most loopback workers the bench starts (each a gRPC server).
const MAX_LOOPBACK: usize = 100;

/// `n` loopback workers, each serving a CSV file of the same 4 rows as the
/// in-process client of its place, and a context whose table `t` is theirs.
async fn loopback(n: usize) -> BenchResult<(Vec<fedsql::site::worker::RunningWorker>, FedContext)> {
    let dir = std::env::temp_dir().join(format!("fedsql-bench-secure-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut plan = Vec::with_capacity(n);
    for c in 0..n {
        let path = dir.join(format!("c{c}.csv"));
        std::fs::write(&path, format!("x\n{}\n1\n2\n3\n", c as i64 % 100))?;
        plan.push(crate::data::ClientFile {
            index: c,
            path,
            rows: 4,
        });
    }
    crate::remote::loopback_workers(&plan, &dir).await
}

/// The time of one whole query (all its exchanges), notices dropped.
async fn time(ctx: &FedContext, sql: &str) -> BenchResult<Duration> {
    let started = Instant::now();
    ctx.sql(sql).await?.collect().await?;
    ctx.take_notices();
    Ok(started.elapsed())
}

const PLAIN: &str = "SELECT sum(x) FROM t";
const SECURE: &str = "SELECT secure_sum(x, 0, 100) FROM t";

/// Each query's times over `runs` runs after one warm-up, the queries
/// alternating within each run.
async fn timed_runs(
    runs: usize,
    queries: &[(&FedContext, &str)],
) -> BenchResult<Vec<Vec<Duration>>> {
    let mut figures = vec![Vec::new(); queries.len()];
    for run in 0..=runs {
        for (f, (ctx, sql)) in figures.iter_mut().zip(queries) {
            let t = time(ctx, sql).await?;
            if run > 0 {
                f.push(t);
            }
        }
    }
    Ok(figures)
}

const DP_SUM: &str = "SELECT secure_dp_sum(x, 0, 100, 1.0) FROM t";
const DP_AVG: &str = "SELECT secure_dp_avg(x, 0, 100, 1.0) FROM t";

/// DP under the masks over up to 100 in-process clients, beside
/// `secure_sum`: each client draws its noise share at setup, with Pólya
/// urns of a fixed length (about 23 times the noise scale, so that its
/// time does not tell the share): scale 100 for the integer sum, 2^16
/// grid units for each of the average's two words.
async fn dp_under_masks(args: &Args, counts: &[usize]) -> BenchResult<()> {
    let counts: Vec<usize> = counts.iter().copied().filter(|&n| n <= 100).collect();
    if counts.is_empty() {
        return Ok(());
    }
    println!();
    println!(
        "DP under the masks over the same in-process clients (no budget set); median and minimum of {} runs (ms).",
        args.runs
    );
    println!();
    println!(
        "| clients | `secure_sum` median (min) | `secure_dp_sum(x, 0, 100, 1.0)` median (min) | `secure_dp_avg(x, 0, 100, 1.0)` median (min) |"
    );
    println!("|---:|---:|---:|---:|");
    for n in counts {
        let all = federation(n, false)?;
        let figures =
            timed_runs(args.runs, &[(&all, SECURE), (&all, DP_SUM), (&all, DP_AVG)]).await?;
        println!(
            "| {n} | {} | {} | {} |",
            cell(&figures[0]),
            cell(&figures[1]),
            cell(&figures[2])
        );
    }
    Ok(())
}

/// A median and minimum in milliseconds: `12.3 (11.9)`.
fn cell(f: &[Duration]) -> String {
    format!("{:.1} ({:.1})", median(f) * 1000.0, minimum(f) * 1000.0)
}

pub(crate) async fn run(args: &Args, counts: &[usize]) -> BenchResult<()> {
    println!(
        "fedsql-bench --secure: one round over n in-process clients of 4 rows each; median and minimum of {} runs after one warm-up run (ms).",
        args.runs
    );
    println!();
    println!(
        "| clients | graph | plain `sum` median (min) | `secure_sum` median (min) | `secure_sum`, 1 in 10 lost after masking, median (min) |"
    );
    println!("|---:|---|---:|---:|---:|");
    for &n in counts {
        // The in-process clients list no peers: the default threshold;
        // above 100 clients also at the threshold of sites with peers
        // (more than two thirds), whose round is full at any size.
        let default = fedsql::protocol::secure::default_threshold(n);
        let peered = fedsql::protocol::secure::peered_threshold(n);
        let thresholds: &[usize] = if n > fedsql::protocol::secure::graph::FULL_GRAPH_MAX {
            &[default, peered]
        } else {
            &[default]
        };
        for &t in thresholds {
            let all = federation(n, false)?;
            let lossy = federation(n, true)?;
            if t != default {
                for ctx in [&all, &lossy] {
                    ctx.sql(&format!("SET fedsql.secure_threshold = {t}"))
                        .await?;
                }
            }
            let figures = timed_runs(
                args.runs,
                &[(&all, PLAIN), (&all, SECURE), (&lossy, SECURE)],
            )
            .await?;
            let graph = if fedsql::protocol::secure::graph::is_sparse(n, t) {
                format!(
                    "sparse, {} neighbours",
                    fedsql::protocol::secure::graph::degree(n, t)
                )
            } else {
                "full".to_string()
            };
            let graph = if t == default {
                graph
            } else {
                format!("{graph}; t = {t}, as with `peers`")
            };
            println!(
                "| {n} | {graph} | {} | {} | {} |",
                cell(&figures[0]),
                cell(&figures[1]),
                cell(&figures[2])
            );
        }
    }
    dp_under_masks(args, counts).await?;
    let loopback_counts: Vec<usize> = counts
        .iter()
        .copied()
        .filter(|&n| n <= MAX_LOOPBACK)
        .collect();
    if loopback_counts.is_empty() {
        return Ok(());
    }
    println!();
    println!(
        "The same over n `fedsql worker`s on loopback (one gRPC server each, in this process; CSV files of the same rows); median and minimum of {} runs (ms).",
        args.runs
    );
    println!();
    println!(
        "| workers | plain `sum` median (min) | `secure_sum` median (min) | ratio of medians |"
    );
    println!("|---:|---:|---:|---:|");
    for n in loopback_counts {
        let (workers, ctx) = loopback(n).await?;
        let figures = timed_runs(args.runs, &[(&ctx, PLAIN), (&ctx, SECURE)]).await?;
        println!(
            "| {n} | {} | {} | {:.1} |",
            cell(&figures[0]),
            cell(&figures[1]),
            median(&figures[1]) / median(&figures[0])
        );
        drop(ctx);
        drop(workers);
    }
    Ok(())
}
