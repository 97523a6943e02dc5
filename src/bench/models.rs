//! Model fits (glm, lm, fedsgd rounds) against the plain federated
//! aggregate they compare with, in the same run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fedsql::FedContext;
use fedsql::notices::Progress;

use crate::BenchResult;
use crate::report::median;

pub(super) const XS: &str = "x1 + x2 + x3 + x4 + x5 + x6 + x7 + x8 + x9 + x10";
pub(super) const SUMS_X: &str = "SELECT sum(x1), sum(x2), sum(x3), sum(x4), sum(x5), sum(x6), sum(x7), sum(x8), sum(x9), sum(x10) FROM t";

async fn time(ctx: &FedContext, sql: &str) -> BenchResult<Duration> {
    let started = Instant::now();
    ctx.sql(sql).await?.collect().await?;
    Ok(started.elapsed())
}

/// Median of `runs` timed runs after one warm-up.
async fn median_time(ctx: &FedContext, sql: &str, runs: usize) -> BenchResult<f64> {
    time(ctx, sql).await?;
    let mut times = Vec::new();
    for _ in 0..runs {
        times.push(time(ctx, sql).await?);
    }
    Ok(median(&times))
}

/// One iterative fit (`sql`): total seconds, rounds, and the times of
/// the rounds after the first (between consecutive progress reports).
pub(super) async fn iterative_fit(
    ctx: &FedContext,
    sql: &str,
) -> BenchResult<(f64, usize, Vec<Duration>)> {
    let timeline = fit_timeline(ctx, sql).await?;
    let rounds = timeline.reports.windows(2).map(|w| w[1] - w[0]).collect();
    Ok((timeline.total, timeline.reports.len(), rounds))
}

/// When an iterative fit's progress reports came (one per round, from the
/// statement's start) and when it ended.
pub(super) struct FitTimeline {
    pub total: f64,
    pub reports: Vec<Duration>,
}

/// Runs one iterative fit (`sql`), noting when each round reported.
pub(super) async fn fit_timeline(ctx: &FedContext, sql: &str) -> BenchResult<FitTimeline> {
    let reports: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let sink = Arc::clone(&reports);
    ctx.set_progress(Progress::new(move |_| {
        sink.lock().unwrap().push(Instant::now())
    }));
    let started = Instant::now();
    ctx.sql(sql).await?.collect().await?;
    let total = started.elapsed().as_secs_f64();
    ctx.take_notices();
    let reports = reports
        .lock()
        .unwrap()
        .iter()
        .map(|at| *at - started)
        .collect();
    Ok(FitTimeline { total, reports })
}

/// One GLM fit of `y` on x1..x10 (see [`iterative_fit`]).
pub(super) async fn glm_fit(
    ctx: &FedContext,
    family: &str,
    y: &str,
) -> BenchResult<(f64, usize, Vec<Duration>)> {
    iterative_fit(
        ctx,
        &format!("SELECT * FROM glm_stats('t', '{y} ~ {XS}', '{family}')"),
    )
    .await
}

/// Runs an iterative fit once to warm up, then `runs` times: the median
/// whole-fit time, the median round after the first, and the rounds.
async fn median_fit(ctx: &FedContext, sql: &str, runs: usize) -> BenchResult<(f64, f64, usize)> {
    iterative_fit(ctx, sql).await?;
    let mut totals = Vec::new();
    let mut rounds = Vec::new();
    let mut count = 0;
    for _ in 0..runs {
        let (total, n, r) = iterative_fit(ctx, sql).await?;
        totals.push(Duration::from_secs_f64(total));
        rounds.extend(r);
        count = n;
    }
    Ok((median(&totals), median(&rounds), count))
}

pub(crate) async fn run(ctx: &FedContext, runs: usize) -> BenchResult<()> {
    eprintln!("models: baselines");
    let sums_xy = format!(
        "{} , sum(y_gaussian) FROM t",
        SUMS_X.trim_end_matches(" FROM t")
    );
    let base_xy = median_time(ctx, &sums_xy, runs).await?;
    let base_x = median_time(ctx, SUMS_X, runs).await?;
    eprintln!("models: lm");
    let lm = median_time(
        ctx,
        &format!("SELECT * FROM lm('t', 'y_gaussian ~ {XS}')"),
        runs,
    )
    .await?;
    println!();
    println!(
        "| model (10 covariates, all rows, federated) | time | baseline: federated sum query | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| `lm` (one round of co-moments) | {lm:.3} s | {base_xy:.3} s (sum of x1..x10, y) | {:.2} |",
        lm / base_xy
    );
    for (family, y) in [("binomial", "y_logistic"), ("poisson", "y_poisson")] {
        eprintln!("models: glm {family}");
        let sql = format!("SELECT * FROM glm_stats('t', '{y} ~ {XS}', '{family}')");
        let (total, round, iterations) = median_fit(ctx, &sql, runs).await?;
        println!(
            "| `glm` {family}, one IRLS round after the first | {round:.3} s | {base_x:.3} s (sum of x1..x10) | {:.2} |",
            round / base_x
        );
        println!("| `glm` {family}, whole fit ({iterations} iterations) | {total:.3} s | | |");
    }
    for (model, y, optimizer) in [
        ("logistic", "y_logistic", "adam, learning_rate=0.05"),
        ("poisson", "y_poisson", "adam, learning_rate=0.05"),
        ("logistic", "y_logistic", "newton"),
    ] {
        eprintln!("models: fedsgd {model} {optimizer}");
        let sql = format!(
            "SELECT * FROM fedsgd_history('t', '{y} ~ {XS}', '{model}', 'optimizer={optimizer}, rounds=8')"
        );
        let (total, round, rounds) = median_fit(ctx, &sql, runs).await?;
        let name = optimizer.split(',').next().unwrap_or(optimizer);
        println!(
            "| `fedsgd` {model} ({name}), one round after the first | {round:.3} s | {base_x:.3} s (sum of x1..x10) | {:.2} |",
            round / base_x
        );
        println!("| `fedsgd` {model} ({name}), whole run ({rounds} rounds) | {total:.3} s | | |");
    }
    Ok(())
}
