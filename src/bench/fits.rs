//! `--fits`: the GLM fits (binomial, poisson) and a FedSGD run (logistic,
//! adam, 8 rounds) beside the federated `sum(x1..x10)` from the same
//! files, in the same run: whole fits, one round after the first (the
//! last apart: a GLM's last round leaves X'WX out), the time to the first
//! round's report and after the last, and the peak memory a fit adds.
//!
//! Each run times the sum, then each fit, so they drift together;
//! the report gives medians and minima over the runs and the ratios of
//! the medians. Peak memory is measured twice, against the decoded model
//! columns (rows × (1 + 10) doubles: the response and x1..x10 a client
//! keeps for the fit):
//! - in this process, after the warm-up: the high-water mark during a
//!   fit (reset before it through `/proc/self/clear_refs`) less the
//!   resident size before. The allocator keeps pages freed by earlier
//!   fits and hands them out again, so this is a lower bound;
//! - in a fresh process per fit ([`one_fit_memory`], this binary run
//!   again with `--fit-memory`), where every page the fit touches is
//!   new: the fit's true peak.

use std::process::Command;
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
    /// The rounds after the first but the last.
    rounds: Vec<Duration>,
    /// The last round (a GLM's skips X'WX, which it does not use).
    last_rounds: Vec<Duration>,
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

/// The SQL of a fit of [`FITS`].
fn fit_sql(model: &str, y: &str) -> String {
    match model.strip_prefix("fedsgd ") {
        Some(sgd) => format!(
            "SELECT * FROM fedsgd_history('t', '{y} ~ {}', '{sgd}', 'optimizer=adam, rounds=8')",
            super::models::XS
        ),
        None => format!(
            "SELECT * FROM glm_stats('t', '{y} ~ {}', '{model}')",
            super::models::XS
        ),
    }
}

/// What [`one_fit_memory`] prints before the peak's bytes.
const PEAK_LINE: &str = "fit peak memory added (bytes):";

/// `--fit-memory I`: runs fit `I` of [`FITS`] once in this (fresh)
/// process and prints the high-water mark of its resident memory less
/// the resident size just before the fit, as a line [`PEAK_LINE`] N.
pub(crate) async fn one_fit_memory(ctx: &FedContext, index: usize) -> BenchResult<()> {
    let (_, model, y) = FITS
        .get(index)
        .ok_or_else(|| format!("--fit-memory takes 0..{}", FITS.len() - 1))?;
    let before = status_bytes("VmRSS");
    ctx.sql(&fit_sql(model, y)).await?.collect().await?;
    let peak = status_bytes("VmHWM");
    println!("{PEAK_LINE} {}", peak.saturating_sub(before));
    Ok(())
}

/// The peak memory fit `index` adds in a fresh process: this binary
/// run again with `--fit-memory index` over the same data.
fn fresh_process_peak(args: &Args, index: usize) -> BenchResult<u64> {
    let output = Command::new(std::env::current_exe()?)
        .arg("--dir")
        .arg(&args.dir)
        .args(["--rows", &args.rows.to_string()])
        .args(["--clients", &args.clients.to_string()])
        .args(["--fit-memory", &index.to_string()])
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "fedsql-bench --fit-memory {index} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(PEAK_LINE)?.trim().parse().ok())
        .ok_or_else(|| format!("fedsql-bench --fit-memory {index} printed no peak").into())
}

pub(crate) async fn run(ctx: &FedContext, args: &Args) -> BenchResult<()> {
    let sum_sql = super::models::SUMS_X;
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
            let mut rounds: Vec<Duration> = reports.windows(2).map(|w| w[1] - w[0]).collect();
            times.last_rounds.extend(rounds.pop());
            times.rounds.extend(rounds);
            if let (Some(first), Some(last)) = (reports.first(), reports.last()) {
                times.first.push(*first);
                times.tail.push(total.saturating_sub(*last));
            }
            times.iterations = reports.len();
        }
    }
    let mut fresh: Vec<Vec<u64>> = FITS.iter().map(|_| Vec::new()).collect();
    for run in 0..args.runs {
        for (index, peaks) in fresh.iter_mut().enumerate() {
            eprintln!(
                "fits: peak memory in a fresh process, fit {index}, run {}",
                run + 1
            );
            peaks.push(fresh_process_peak(args, index)?);
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
            "| {name}, one round after the first (not the last) | {round:.3} s | {round_min:.3} s | {:.2} |",
            round / sum_median
        );
        let (last, last_min) = (median(&times.last_rounds), minimum(&times.last_rounds));
        println!(
            "| {name}, the last round (a GLM's leaves X'WX out) | {last:.3} s | {last_min:.3} s | {:.2} |",
            last / sum_median
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
        "| fit | decoded model columns (rows × 11 doubles) | peak added, fresh process (median, max) | ratio (median, max) | peak added after a warm-up fit (median) | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (((name, _, _), times), fresh) in FITS.iter().zip(&fits).zip(&fresh) {
        let warm = median_bytes(&times.peak_growth);
        let (cold, cold_max) = (
            median_bytes(fresh),
            fresh.iter().copied().max().unwrap_or(0) as f64,
        );
        println!(
            "| {name} | {:.0} MB | {:.0} MB, {:.0} MB | {:.2}, {:.2} | {:.0} MB | {:.2} |",
            decoded / 1e6,
            cold / 1e6,
            cold_max / 1e6,
            cold / decoded,
            cold_max / decoded,
            warm / 1e6,
            warm / decoded
        );
    }
    Ok(())
}

/// The median of byte counts (the upper one of an even count).
fn median_bytes(values: &[u64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0) as f64
}
