//! `fedsql-bench --policy`: what a disclosure policy costs. The suite over
//! the same clients with a worker's default policy at every client
//! (`min_group_rows` 5, with `--extremes allow` so that `min`/`max` are
//! timed too) against the same clients without a policy, in the same run.
//! The policy's input counts run inside each aggregate's own pass; this
//! measures what they and the checks add, as wall time and as the CPU time
//! of this process's threads (which other processes on a shared machine
//! do not inflate). Queries the policy refuses (a group of fewer than 5
//! rows at some client) are listed, not timed.

use std::time::{Duration, Instant};

use fedsql::FedContext;

use crate::baseline::{compare_results, run_federated};
use crate::data::{ClientFile, federated_table_sql};
use crate::report::median;
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult};

pub(crate) async fn run(
    args: &Args,
    plan: &[ClientFile],
    open: &FedContext,
    queries: &[SuiteQuery],
) -> BenchResult<()> {
    let guarded = FedContext::new();
    guarded
        .sql(&federated_table_sql(
            plan,
            " OPTIONS ('min_group_rows' '5', 'max_parameter_ratio' '0.33', 'extremes' 'allow')",
        ))
        .await?;
    let mut rows = Vec::new();
    let mut refused = Vec::new();
    for query in queries {
        eprintln!("{}: warm-up", query.name);
        let (_, open_rows) = run_federated(open, &query.sql).await?;
        let guarded_rows = match run_federated(&guarded, &query.sql).await {
            Ok((_, rows)) => rows,
            Err(e) => {
                refused.push(format!(
                    "{}: {}",
                    query.name,
                    e.to_string().replace('\n', " ")
                ));
                continue;
            }
        };
        if !query.is_approximate() {
            compare_results(&guarded_rows, &open_rows)
                .map_err(|d| format!("{}: the policy changed the answer: {d}", query.name))?;
        }
        let (mut without, mut with) = (Timed::default(), Timed::default());
        for run in 0..args.runs {
            if run % 2 == 0 {
                without.run(open, &query.sql).await?;
                with.run(&guarded, &query.sql).await?;
            } else {
                with.run(&guarded, &query.sql).await?;
                without.run(open, &query.sql).await?;
            }
        }
        rows.push((query.name.clone(), without, with));
    }
    println!(
        "Disclosure policy (min_group_rows 5, extremes allow) at all {} clients, {} rows, median of {} runs",
        args.clients, args.rows, args.runs
    );
    println!();
    println!(
        "| query | no policy (s) | policy (s) | ratio | CPU no policy (s) | CPU policy (s) | CPU ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut totals = [0.0; 4];
    for (name, without, with) in &rows {
        let figures = [
            median(&without.wall),
            median(&with.wall),
            median(&without.cpu),
            median(&with.cpu),
        ];
        let [wall_without, wall_with, cpu_without, cpu_with] = figures;
        println!(
            "| {name} | {wall_without:.3} | {wall_with:.3} | {:.3} | {cpu_without:.3} | {cpu_with:.3} | {:.3} |",
            wall_with / wall_without,
            cpu_with / cpu_without
        );
        for (total, figure) in totals.iter_mut().zip(figures) {
            *total += figure;
        }
    }
    let [wall_without, wall_with, cpu_without, cpu_with] = totals;
    if wall_without > 0.0 {
        println!(
            "| **suite (answered queries)** | {wall_without:.3} | {wall_with:.3} | **{:.3}** | {cpu_without:.3} | {cpu_with:.3} | **{:.3}** |",
            wall_with / wall_without,
            cpu_with / cpu_without
        );
    }
    println!();
    println!(
        "CPU = the time this process's threads spent on a processor during the query \
         (/proc/self/task/*/schedstat): unlike the wall time, it does not grow when other \
         processes share the machine."
    );
    println!();
    for line in &refused {
        println!("refused under the policy: {line}");
    }
    Ok(())
}

/// The wall and CPU times of a query's runs.
#[derive(Default)]
struct Timed {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

impl Timed {
    async fn run(&mut self, ctx: &FedContext, sql: &str) -> BenchResult<()> {
        let cpu = process_cpu();
        let started = Instant::now();
        ctx.sql(sql).await?.collect().await?;
        self.wall.push(started.elapsed());
        self.cpu.push(process_cpu().saturating_sub(cpu));
        Ok(())
    }
}

/// The time all of this process's threads have spent on a processor so
/// far (Linux; zero elsewhere).
fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}
