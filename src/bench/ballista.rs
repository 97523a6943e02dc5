//! The suite and a GLM fit through one worker whose rows a Ballista
//! cluster reads (a scheduler and 1, then 2 executors, in this process),
//! against the same worker reading its files itself (issue 56). On a
//! machine of few cores the point is the overhead, not a speed-up: each
//! job is planned into stages by the scheduler, its tasks are pulled by
//! the executors (a poll loop), and its partial states cross a shuffle
//! and a Flight stream back to the worker.

use std::path::{Path, PathBuf};

use fedsql::FedContext;
use fedsql::site::ballista::{start_executor, start_scheduler};
use fedsql::site::cluster::ClusterAddress;
use fedsql::site::worker::{self, RunningWorker, WorkerConfig};

use crate::baseline::{compare_results, run_federated};
use crate::data::ClientFile;
use crate::report::median;
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult, models};

const TOKEN: &str = "fedsql-bench-token";

pub(crate) async fn run(
    args: &Args,
    plan: &[ClientFile],
    queries: &[SuiteQuery],
) -> BenchResult<()> {
    let dir = std::env::temp_dir().join(format!("fedsql-bench-ballista-{}", std::process::id()));
    // One table of every client's file: a folder of links to them.
    let folder = dir.join("t");
    std::fs::create_dir_all(&folder)?;
    for client in plan {
        let name = client
            .path
            .file_name()
            .ok_or("a client file without a name")?;
        std::os::unix::fs::symlink(std::fs::canonicalize(&client.path)?, folder.join(name))?;
    }
    let token = dir.join("token");
    std::fs::write(&token, TOKEN)?;
    let alone = one_worker(&folder, None).await?;
    let local = context(&alone, &token).await?;
    println!(
        "fedsql-bench --ballista: {} rows in {} Parquet files, served by one `fedsql worker` \
         (no policy) that reads them itself or has a Ballista cluster in this process read them \
         (executors of {} slots); median of {} runs after one warm-up; ratio = on the cluster / alone.",
        args.rows,
        plan.len(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        args.runs
    );
    for executors in [1, 2] {
        let scheduler = start_scheduler("127.0.0.1:0").await?;
        let mut running = Vec::new();
        for _ in 0..executors {
            running.push(start_executor(&scheduler.addr().to_string(), None, None, None).await?);
        }
        let engine = ClusterAddress::parse(&format!("ballista://{}", scheduler.addr()))?;
        let on_cluster = one_worker(&folder, Some(engine)).await?;
        let remote = context(&on_cluster, &token).await?;
        println!();
        println!("{executors} executor(s):");
        println!();
        println!("| query | on the cluster (s) | alone (s) | ratio |");
        println!("|---|---:|---:|---:|");
        let (mut cluster_total, mut alone_total) = (0.0, 0.0);
        if !args.no_suite {
            for query in queries {
                eprintln!("{}: warm-up", query.name);
                let (_, a) = run_federated(&remote, &query.sql).await?;
                let (_, b) = run_federated(&local, &query.sql).await?;
                if !query.is_approximate()
                    && let Err(difference) = compare_results(&a, &b)
                {
                    println!("WARNING: {}: results differ: {difference}", query.name);
                }
                let (mut c, mut l) = (Vec::new(), Vec::new());
                for _ in 0..args.runs {
                    c.push(run_federated(&remote, &query.sql).await?.0);
                    l.push(run_federated(&local, &query.sql).await?.0);
                }
                let (c, l) = (median(&c), median(&l));
                cluster_total += c;
                alone_total += l;
                println!("| {} | {c:.3} | {l:.3} | {:.2} |", query.name, c / l);
            }
            println!(
                "| **suite total** | **{cluster_total:.3}** | **{alone_total:.3}** | **{:.2}** |",
                cluster_total / alone_total
            );
        }
        if !args.no_models {
            let mut c = Vec::new();
            let mut l = Vec::new();
            models::glm_fit(&remote, "binomial", "y_logistic").await?;
            models::glm_fit(&local, "binomial", "y_logistic").await?;
            for _ in 0..args.runs {
                c.extend(models::glm_fit(&remote, "binomial", "y_logistic").await?.2);
                l.extend(models::glm_fit(&local, "binomial", "y_logistic").await?.2);
            }
            let (c, l) = (median(&c), median(&l));
            println!();
            println!(
                "GLM binomial (10 covariates), median IRLS round: {:.1} ms on the cluster, {:.1} ms alone ({:.1} ms overhead per round)",
                c * 1000.0,
                l * 1000.0,
                (c - l) * 1000.0
            );
        }
        on_cluster.shutdown().await;
        drop(running);
        drop(scheduler);
    }
    alone.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A worker serving `folder` as `t`, without a policy and with a silent
/// log; on `engine` when given.
async fn one_worker(folder: &Path, engine: Option<ClusterAddress>) -> BenchResult<RunningWorker> {
    let mut config = WorkerConfig::new(
        "127.0.0.1:0".parse()?,
        vec![("t".to_string(), PathBuf::from(folder))],
        TOKEN,
    );
    config.policy = None;
    config.engine = engine;
    config.log = Some(std::sync::Arc::new(|_: &str| {}));
    Ok(worker::start(config).await?)
}

/// A coordinator whose table `t` is the one worker.
async fn context(worker: &RunningWorker, token: &Path) -> BenchResult<FedContext> {
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE t CLIENTS ('w' = 'grpc://{}') OPTIONS ('token_file' '{}', 'timeout' '30m')",
        worker.addr(),
        token.display()
    ))
    .await?;
    Ok(ctx)
}
