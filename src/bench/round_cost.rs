//! The fixed cost of a round: a tiny aggregate over 32 rows held by two
//! clients, in-process and over two `fedsql worker`s on loopback, and the
//! rounds of a FedSGD fit over the same rows.

use std::time::{Duration, Instant};

use fedsql::FedContext;

use crate::data::{client_plan, federated_table_sql, prepare_data};
use crate::remote::loopback_workers;
use crate::report::{median, minimum};
use crate::{Args, BenchResult};

/// Rows of the small data set, over two clients.
const ROWS: u64 = 32;
/// Rounds per timed run (the time of a run over this count is one figure).
const ROUNDS: usize = 200;
/// Queries whose time is one round each.
const TINY: &str = "SELECT sum(x1), count(*) FROM t";
const FEDSGD: &str = "SELECT * FROM fedsgd_history('t', 'y_logistic ~ x1 + x2', 'logistic', 'optimizer=adam, rounds=200')";
const GLM: &str = "SELECT * FROM glm_stats('t', 'y_logistic ~ x1 + x2', 'binomial')";
/// GLM fits per timed run (each has a handful of IRLS rounds).
const GLM_FITS: usize = 40;

/// What a row of the table times.
#[derive(Clone, Copy)]
enum Work {
    Tiny,
    FedSgd,
    Glm,
}

/// Seconds per round of `ROUNDS` tiny queries.
async fn tiny_rounds(ctx: &FedContext) -> BenchResult<Duration> {
    let started = Instant::now();
    for _ in 0..ROUNDS {
        ctx.sql(TINY).await?.collect().await?;
    }
    Ok(started.elapsed() / ROUNDS as u32)
}

/// Seconds per round of a FedSGD fit (its history has a row per round).
async fn fedsgd_rounds(ctx: &FedContext) -> BenchResult<Duration> {
    let started = Instant::now();
    let history = ctx.sql(FEDSGD).await?.collect().await?;
    ctx.take_notices();
    let rounds: usize = history.iter().map(|b| b.num_rows()).sum();
    Ok(started.elapsed() / rounds.max(1) as u32)
}

/// Seconds per IRLS round of a GLM fit (the median time between two
/// rounds' progress reports, over `GLM_FITS` fits).
async fn glm_rounds(ctx: &FedContext) -> BenchResult<Duration> {
    let mut rounds = Vec::new();
    for _ in 0..GLM_FITS {
        rounds.extend(crate::models::iterative_fit(ctx, GLM).await?.2);
    }
    Ok(Duration::from_secs_f64(median(&rounds)))
}

pub(crate) async fn run(args: &Args) -> BenchResult<()> {
    let dir = args.dir.join("round-cost");
    let plan = client_plan(&dir, ROWS, 2);
    prepare_data(&dir, &plan, args.regenerate)?;
    let local = FedContext::new();
    local.sql(&federated_table_sql(&plan, "")).await?;
    let (workers, remote) = loopback_workers(&plan, &dir).await?;
    println!(
        "fedsql-bench --round-cost: the fixed cost of a round over {ROWS} rows at 2 Parquet clients; \
         one figure = a run of {ROUNDS} rounds / {ROUNDS}; median and minimum of {} runs after one warm-up run.",
        args.runs
    );
    println!();
    println!(
        "| round | in-process median (ms) | in-process min (ms) | workers median (ms) | workers min (ms) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let ms = |d: f64| d * 1000.0;
    for (name, work) in [
        (
            "`SELECT sum(x1), count(*)` (parse, plan, encode, merge, decode)",
            Work::Tiny,
        ),
        ("`fedsgd` logistic, adam (one of 200 rounds)", Work::FedSgd),
        ("`glm` binomial (an IRLS round after the first)", Work::Glm),
    ] {
        let (mut l, mut r) = (Vec::new(), Vec::new());
        for run in 0..=args.runs {
            let (a, b) = match work {
                Work::Tiny => (tiny_rounds(&local).await?, tiny_rounds(&remote).await?),
                Work::FedSgd => (fedsgd_rounds(&local).await?, fedsgd_rounds(&remote).await?),
                Work::Glm => (glm_rounds(&local).await?, glm_rounds(&remote).await?),
            };
            if run > 0 {
                l.push(a);
                r.push(b);
            }
        }
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |",
            ms(median(&l)),
            ms(minimum(&l)),
            ms(median(&r)),
            ms(minimum(&r))
        );
    }
    println!();
    println!("Targets: <= 0.3 ms in-process, <= 1 ms over loopback workers.");
    for worker in workers {
        worker.shutdown().await;
    }
    Ok(())
}
