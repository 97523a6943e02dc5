//! The Markdown report of the suite: medians and minima per query, and
//! the ratio federated / centralized.

use std::time::Duration;

use crate::Args;
use crate::baseline::Timing;

pub(crate) fn median(times: &[Duration]) -> f64 {
    let mut secs: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    let mid = secs.len() / 2;
    if secs.len() % 2 == 1 {
        secs[mid]
    } else {
        (secs[mid - 1] + secs[mid]) / 2.0
    }
}

pub(crate) fn minimum(times: &[Duration]) -> f64 {
    times
        .iter()
        .map(Duration::as_secs_f64)
        .fold(f64::INFINITY, f64::min)
}

/// The Markdown report: one row per query, then the suite totals.
pub(crate) fn print_report(args: &Args, bytes: u64, timings: &[(String, Timing)]) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "fedsql-bench: {} rows over {} Parquet clients (SNAPPY, {:.0} MB), {} CPU threads; \
         median and minimum of {} runs after one warm-up; ratio = federated / centralized medians.",
        args.rows,
        args.clients,
        bytes as f64 / 1e6,
        threads,
        args.runs
    );
    println!(
        "Centralized: DataFusion SessionContext over all files as one table, target_partitions = 2."
    );
    println!();
    println!(
        "| query | federated median (s) | federated min (s) | centralized median (s) | centralized min (s) | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    let (mut fed_total, mut fed_min_total, mut central_total, mut central_min_total) =
        (0.0, 0.0, 0.0, 0.0);
    for (name, timing) in timings {
        let fed = median(&timing.federated);
        let central = median(&timing.centralized);
        let ratio = fed / central;
        ratios.push(ratio);
        fed_total += fed;
        central_total += central;
        fed_min_total += minimum(&timing.federated);
        central_min_total += minimum(&timing.centralized);
        println!(
            "| {name} | {fed:.3} | {:.3} | {central:.3} | {:.3} | {ratio:.2} |",
            minimum(&timing.federated),
            minimum(&timing.centralized)
        );
    }
    println!(
        "| **suite total** | **{fed_total:.3}** | {fed_min_total:.3} | **{central_total:.3}** | {central_min_total:.3} | **{:.2}** |",
        fed_total / central_total
    );
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    let median_ratio = if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    };
    println!();
    println!(
        "Median ratio over the {} queries: {median_ratio:.2}.",
        ratios.len()
    );
}
