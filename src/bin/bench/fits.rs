//! `--fits`: the GLM fits (binomial, poisson) and a FedSGD run (logistic,
//! adam, 8 rounds) beside the federated `sum(x1..x10)` from the same
//! files, in the same run: whole fits, one round after the first, the
//! time to the first round's report and after the last, and the peak
//! memory a fit adds.
//!
//! Each run times the sum, then each fit, so they drift together;
//! the report gives medians and minima over the runs and the ratios of
//! the medians. Peak memory is the process's high-water mark during a fit
//! (reset before it through `/proc/self/clear_refs`) less its resident
//! size before, against the decoded model columns (rows × (1 + 10)
//! doubles: the response and x1..x10 a client keeps for the fit).

use std::time::{Duration, Instant};

use fedsql::FedContext;

use crate::report::{median, minimum};
use crate::{Args, BenchResult};

/// The fits timed: what the report calls them, and their SQL's model
/// (a `glm` family, or `fedsgd` and its model) and response.
const FITS: [(&str, &str, &str); 3] = [
    ("`glm` binomial", "binomial", "y_logistic"),
    ("`glm` poisson", "poisson", "y_poisson"),
    (
        "`fedsgd` logistic (adam, 8 rounds)",
        "fedsgd logistic",
        "y_logistic",
    ),
];

/// The figures of one fit over the runs.
#[derive(Default)]
struct FitTimes {
    whole: Vec<Duration>,
    rounds: Vec<Duration>,
    /// From the start to the first round's report (reading the files and
    /// keeping the columns, then the first round).
    first: Vec<Duration>,
    /// From the last round's report to the end (the summary's figures).
    tail: Vec<Duration>,
    iterations: usize,
    peak_growth: Vec<u64>,
}

/// A `/proc/self/status` field in bytes (0 where there is none).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

pub async fn run(ctx: &FedContext, args: &Args) -> BenchResult<()> {
    let sum_sql = super::models::SUMS_X;
    let fit_sql = |model: &str, y: &str| match model.strip_prefix("fedsgd ") {
        Some(sgd) => format!(
            "SELECT * FROM fedsgd_history('t', '{y} ~ {}', '{sgd}', 'optimizer=adam, rounds=8')",
            super::models::XS
        ),
        None => format!(
            "SELECT * FROM glm_stats('t', '{y} ~ {}', '{model}')",
            super::models::XS
        ),
    };
    eprintln!("fits: warm-up");
    ctx.sql(sum_sql).await?.collect().await?;
    for (_, model, y) in FITS {
        super::models::iterative_fit(ctx, &fit_sql(model, y)).await?;
    }
    let mut sums = Vec::new();
    let mut fits: Vec<FitTimes> = FITS.iter().map(|_| FitTimes::default()).collect();
    for run in 0..args.runs {
        eprintln!("fits: run {}", run + 1);
        let started = Instant::now();
        ctx.sql(sum_sql).await?.collect().await?;
        sums.push(started.elapsed());
        for ((_, model, y), times) in FITS.iter().zip(&mut fits) {
            let before = status_bytes("VmRSS");
            // Reset the high-water mark (VmHWM) to the current size.
            let _ = std::fs::write("/proc/self/clear_refs", "5");
            let timeline = super::models::fit_timeline(ctx, &fit_sql(model, y)).await?;
            times
                .peak_growth
                .push(status_bytes("VmHWM").saturating_sub(before));
            let total = Duration::from_secs_f64(timeline.total);
            times.whole.push(total);
            let reports = &timeline.reports;
            times.rounds.extend(reports.windows(2).map(|w| w[1] - w[0]));
            if let (Some(first), Some(last)) = (reports.first(), reports.last()) {
                times.first.push(*first);
                times.tail.push(total.saturating_sub(*last));
            }
            times.iterations = reports.len();
        }
    }
    let decoded = args.rows as f64 * 11.0 * 8.0;
    let (sum_median, sum_min) = (median(&sums), minimum(&sums));
    println!(
        "fedsql-bench --fits: {} rows over {} Parquet clients, {} runs after one warm-up; \
         ratios of medians to the federated sum of x1..x10 from the files.",
        args.rows, args.clients, args.runs
    );
    println!();
    println!("| work | median | minimum | ratio to the sum |");
    println!("|---|---:|---:|---:|");
    println!(
        "| federated `sum(x1..x10)` from the files | {sum_median:.3} s | {sum_min:.3} s | 1.00 |"
    );
    for ((name, _, _), times) in FITS.iter().zip(&fits) {
        let (whole, whole_min) = (median(&times.whole), minimum(&times.whole));
        let (round, round_min) = (median(&times.rounds), minimum(&times.rounds));
        println!(
            "| {name}, whole fit ({} rounds) | {whole:.3} s | {whole_min:.3} s | {:.2} |",
            times.iterations,
            whole / sum_median
        );
        println!(
            "| {name}, one round after the first | {round:.3} s | {round_min:.3} s | {:.2} |",
            round / sum_median
        );
        let (first, first_min) = (median(&times.first), minimum(&times.first));
        println!(
            "| {name}: start to the first round's report | {first:.3} s | {first_min:.3} s | {:.2} |",
            first / sum_median
        );
        let (tail, tail_min) = (median(&times.tail), minimum(&times.tail));
        println!(
            "| {name}: last round's report to the end | {tail:.3} s | {tail_min:.3} s | {:.2} |",
            tail / sum_median
        );
    }
    println!();
    println!(
        "| fit | peak memory added (median) | decoded model columns (rows × 11 doubles) | ratio |"
    );
    println!("|---|---:|---:|---:|");
    for ((name, _, _), times) in FITS.iter().zip(&fits) {
        let mut peaks = times.peak_growth.clone();
        peaks.sort_unstable();
        let peak = peaks.get(peaks.len() / 2).copied().unwrap_or(0) as f64;
        println!(
            "| {name} | {:.0} MB | {:.0} MB | {:.2} |",
            peak / 1e6,
            decoded / 1e6,
            peak / decoded
        );
    }
    Ok(())
}
