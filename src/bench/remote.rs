//! The suite and a GLM fit over workers on loopback against the same
//! clients in-process.

use fedsql::FedContext;
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
    local: &FedContext,
    queries: &[SuiteQuery],
) -> BenchResult<()> {
    let dir = tempfile_dir()?;
    let (workers, remote) = loopback_workers(plan, &dir).await?;

    println!(
        "fedsql-bench --remote: {} rows over {} Parquet clients, each served by a `fedsql worker` \
         on loopback (Arrow Flight, plain text, in this process); median of {} runs after one warm-up; \
         ratio = over workers / in-process federated.",
        args.rows,
        plan.len(),
        args.runs
    );
    println!();
    println!("| query | workers (s) | in-process (s) | ratio |");
    println!("|---|---:|---:|---:|");
    let (mut remote_total, mut local_total) = (0.0, 0.0);
    let mut ratios = Vec::new();
    if !args.no_suite {
        for query in queries {
            eprintln!("{}: warm-up", query.name);
            let (_, over_workers) = run_federated(&remote, &query.sql).await?;
            let (_, in_process) = run_federated(local, &query.sql).await?;
            if let Err(difference) = compare_results(&over_workers, &in_process) {
                println!("WARNING: {}: results differ: {difference}", query.name);
            }
            let (mut r, mut l) = (Vec::new(), Vec::new());
            for run in 0..args.runs {
                if run % 2 == 0 {
                    r.push(run_federated(&remote, &query.sql).await?.0);
                    l.push(run_federated(local, &query.sql).await?.0);
                } else {
                    l.push(run_federated(local, &query.sql).await?.0);
                    r.push(run_federated(&remote, &query.sql).await?.0);
                }
            }
            let (r, l) = (median(&r), median(&l));
            remote_total += r;
            local_total += l;
            ratios.push(r / l);
            println!("| {} | {r:.3} | {l:.3} | {:.2} |", query.name, r / l);
        }
        println!(
            "| **suite total** | **{remote_total:.3}** | **{local_total:.3}** | **{:.2}** |",
            remote_total / local_total
        );
        ratios.sort_by(f64::total_cmp);
        println!();
        println!(
            "Median ratio {:.2} (target: suite within 1.2x of in-process).",
            ratios[ratios.len() / 2]
        );
    }
    if !args.no_models {
        println!();
        println!(
            "| GLM binomial (10 covariates), one IRLS round after the first | workers | in-process | overhead per round |"
        );
        println!("|---|---:|---:|---:|");
        let mut over_workers = Vec::new();
        let mut in_process = Vec::new();
        models::glm_fit(&remote, "binomial", "y_logistic").await?;
        models::glm_fit(local, "binomial", "y_logistic").await?;
        for _ in 0..args.runs {
            over_workers.extend(models::glm_fit(&remote, "binomial", "y_logistic").await?.2);
            in_process.extend(models::glm_fit(local, "binomial", "y_logistic").await?.2);
        }
        let (r, l) = (median(&over_workers), median(&in_process));
        println!(
            "| median of {} / {} rounds | {:.1} ms | {:.1} ms | {:.1} ms (target <= 5 ms) |",
            over_workers.len(),
            in_process.len(),
            r * 1000.0,
            l * 1000.0,
            (r - l) * 1000.0
        );
    }
    for worker in workers {
        worker.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// One `fedsql worker` per client on loopback (in this process, no
/// policy, as the in-process clients it is compared with, and a silent
/// log), and a context whose table `t` is served by them; the token file
/// goes in `dir`.
pub(crate) async fn loopback_workers(
    plan: &[ClientFile],
    dir: &std::path::Path,
) -> BenchResult<(Vec<RunningWorker>, FedContext)> {
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN)?;
    let mut workers = Vec::new();
    for client in plan {
        let mut config = WorkerConfig::new(
            "127.0.0.1:0".parse()?,
            vec![("t".to_string(), client.path.clone())],
            TOKEN,
        );
        config.policy = None;
        config.log = Some(std::sync::Arc::new(|_: &str| {}));
        workers.push(worker::start(config).await?);
    }
    let clients: Vec<String> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| format!("'c{i}' = 'grpc://{}'", w.addr()))
        .collect();
    let remote = FedContext::new();
    remote
        .sql(&format!(
            "CREATE FEDERATED TABLE t CLIENTS ({}) OPTIONS ('token_file' '{}')",
            clients.join(", "),
            token_file.display()
        ))
        .await?;
    Ok((workers, remote))
}

fn tempfile_dir() -> BenchResult<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("fedsql-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
