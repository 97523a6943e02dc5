//! `fedsql-bench`: how much the federated split costs against one engine
//! over all rows at once.
//!
//! It writes a synthetic regression data set (x1..x10, a Gaussian, a
//! Bernoulli and a Poisson response, two text keys) over several Parquet
//! clients of uneven size, then runs every query of the shared aggregate
//! suite (`queries/bench/aggregate_suite.sql`, compiled in) two ways over
//! the same files:
//!
//! * **federated**: a [`FedContext`] with `CREATE FEDERATED TABLE t CLIENTS
//!   (...)` naming the generated files, so each file is one client that runs
//!   its encoder and sends back aggregate states;
//! * **centralized**: a plain DataFusion [`SessionContext`] with
//!   `target_partitions = 2` reading the same files as one table `t`, the setup
//!   of the suite's reference figures.
//!
//! After one warm-up run of each (whose results are compared, so the figures
//! are known to be for the same answers) it alternates `--runs` timed runs and
//! prints a Markdown table of medians and minima. Wall-clock times on shared
//! machines are noisy: compare the ratio, measured in the same run, rather
//! than absolute times across runs.
//!
//! With `--remote` it instead starts one `fedsql worker` per client on
//! loopback (in this process) and times the suite and a GLM fit over the
//! workers against the same clients in-process, in the same run.
//!
//! With `--pgwire` it instead serves the federation over the PostgreSQL
//! protocol (in this process, on loopback) and times the suite through the
//! endpoint, and a trivial query's latency, against the same federation
//! in-process.
//!
//! With `--policy` it instead times the suite with a worker's default
//! disclosure policy at every client against the same clients without one.
//!
//! With `--fits` it instead times the GLM fits beside the federated sum
//! they compare with, and the memory a fit adds ([`fits`]).
//! With `--many-clients N` it instead times the suite over the same
//! number of rows held by `--clients` and by N clients, in the same run;
//! with `--round-cost`, the fixed cost of a round on 32 rows, in-process
//! and over workers; with `--secure 10,100,1000`, a masked sum over that
//! many in-process clients ([`secure`]).
//!
//! With `--network` it instead times the suite and a GLM fit over
//! workers behind a [`fault_proxy`] for several round trips, losses and
//! a bandwidth cap ([`network`]); with `--load`, `fedsql serve` and a
//! worker under many concurrent clients, with their memory ([`load`]).
//!
//! [`data`] writes the clients, [`suite`] reads the queries, [`baseline`]
//! runs them both ways and compares, [`report`] prints the table,
//! [`models`] times the model fits, [`remote`] the workers and [`pgwire`]
//! the PostgreSQL endpoint.

#[cfg(feature = "ballista")]
mod ballista;
mod baseline;
mod clients;
mod data;
mod fault_proxy;
mod fits;
mod load;
mod models;
mod network;
mod pgwire;
mod policy;
mod remote;
mod report;
mod round_cost;
mod secure;
mod suite;

use std::fs;
use std::path::PathBuf;

use clap::Parser;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use fedsql::FedContext;

use baseline::{Timing, compare_results, run_centralized, run_federated};
use data::{client_plan, federated_table_sql, prepare_data};
use report::{median, print_report};
use suite::{SuiteQuery, parse_suite};

/// The benchmark suite shared with the reference measurements.
const SUITE: &str = include_str!("../../queries/bench/aggregate_suite.sql");

/// Per-cent of the rows at each client when there are 8 clients.
const SHARES_OF_8: [u64; 8] = [25, 20, 15, 12, 10, 8, 6, 4];

/// Rows per generated record batch.
const BATCH_ROWS: usize = 65_536;

/// Distinct values of the text keys `g1` and `g2`.
const G1_VALUES: usize = 10;
const G2_VALUES: usize = 1000;

/// Relative tolerance when comparing federated and centralized floats: the
/// two sum in different orders.
const FLOAT_TOLERANCE: f64 = 1e-9;

/// Seed of client 0's generator; client i uses `SEED + i`.
const SEED: u64 = 0xFED5_0000;

/// The allocator of the `fedsql` binary (and of datafusion-cli), for
/// both the federated and the centralized runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Times the aggregate suite on federated vs centralized DataFusion.
#[derive(Parser, Debug)]
#[command(name = "fedsql-bench", version, about)]
struct Args {
    /// Rows in all, over all clients.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Number of Parquet clients (8 gives shares 25/20/15/12/10/8/6/4 %;
    /// other counts get linearly declining shares).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Folder for the clients' Parquet files.
    #[arg(long, default_value = "bench-data/")]
    dir: PathBuf,
    /// Timed runs of each query and engine (after one warm-up run).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Rewrite the data even if files with the right row counts exist.
    #[arg(long)]
    regenerate: bool,
    /// Skip the aggregate suite (time only the models).
    #[arg(long)]
    no_suite: bool,
    /// Skip the model fits (lm, glm binomial and poisson, fedsgd).
    #[arg(long)]
    no_models: bool,
    /// Instead: start one `fedsql worker` per client on loopback (in this
    /// process) and time the suite and a GLM fit over the workers against
    /// the in-process federation, in the same run.
    #[arg(long)]
    remote: bool,
    /// Instead: time the suite and a GLM fit through one `fedsql worker`
    /// serving every client's file, its rows read by a Ballista cluster
    /// (a scheduler and 1, then 2 executors, in this process), against
    /// the same worker reading its files itself, in the same run.
    #[arg(long)]
    ballista: bool,
    /// Instead: serve the federation over the PostgreSQL protocol (in this
    /// process, on loopback) and time the suite through it, and a trivial
    /// query's latency, against the federation in-process.
    #[arg(long)]
    pgwire: bool,
    /// Instead: time the suite with a worker's default disclosure policy
    /// (extremes allowed) at every client against no policy, in the same
    /// run, and list the queries the policy refuses.
    #[arg(long)]
    policy: bool,
    /// Instead: time the GLM fits (binomial, poisson) against the federated
    /// sum of x1..x10 from the files, in the same runs: whole fits, one
    /// round after the first, and the peak memory a fit adds.
    #[arg(long)]
    fits: bool,
    /// Run fit I of `--fits` once and print the peak memory it added
    /// (what `--fits` runs in a fresh process to measure a fit's peak).
    #[arg(long, hide = true, value_name = "I")]
    fit_memory: Option<usize>,
    /// Instead: time the suite over the same number of rows held by
    /// `--clients` clients and by this many, in the same run (data in
    /// `<dir>/clients-<n>`).
    #[arg(long)]
    many_clients: Option<usize>,
    /// Instead: time the fixed cost of a round over 32 rows, in-process
    /// and over two workers on loopback (data in `<dir>/round-cost`).
    #[arg(long)]
    round_cost: bool,
    /// Instead: time a masked sum over this many in-process clients (a
    /// comma-separated list, e.g. `10,100,1000`), beside the plain sum and
    /// with one client in ten lost after masking.
    #[arg(long, value_delimiter = ',')]
    secure: Option<Vec<usize>>,
    /// Time only the suite queries whose name contains this text (e.g.
    /// `q09`), for profiling one query.
    #[arg(long)]
    query: Option<String>,
    /// Instead: time the suite and a GLM fit over `--clients` workers on
    /// loopback, each behind a proxy that adds a round trip (each of
    /// `--rtt`), "loss" (a chunk held back 200 ms) or a bandwidth cap.
    #[arg(long)]
    network: bool,
    /// The round trips of `--network`, in ms (comma-separated; the first
    /// is the baseline the others are compared with).
    #[arg(long, value_delimiter = ',', default_value = "0,50,200")]
    rtt: Vec<u64>,
    /// Instead: hold load on a `fedsql serve` process (`--load-clients`
    /// PostgreSQL clients) and then on a `fedsql worker` process
    /// (`--coordinators` coordinators), for `--load-seconds` each.
    #[arg(long)]
    load: bool,
    /// PostgreSQL clients of `--load` (0: skip that phase).
    #[arg(long, default_value_t = 100)]
    load_clients: usize,
    /// Coordinators of `--load`'s worker phase (0: skip that phase).
    #[arg(long, default_value_t = 50)]
    coordinators: usize,
    /// How long each phase of `--load` runs, in seconds.
    #[arg(long, default_value_t = 60)]
    load_seconds: u64,
    /// Seconds between samples of the server's memory in `--load`.
    #[arg(long, default_value_t = 1.0)]
    sample_every: f64,
    /// The `fedsql` binary `--load` starts (default: beside this one).
    #[arg(long, value_name = "PATH")]
    fedsql_bin: Option<PathBuf>,
}

impl Args {
    /// `--sample-every` as a duration (at least 10 ms).
    fn sample_every(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.sample_every.max(0.01))
    }
}

#[tokio::main]
async fn main() -> BenchResult<()> {
    let args = Args::parse();
    if args.clients == 0 || args.rows < args.clients as u64 {
        return Err("need at least one client and at least one row per client".into());
    }
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let mut queries = parse_suite(SUITE);
    if queries.is_empty() {
        return Err("the benchmark suite has no `-- name:` queries".into());
    }
    if let Some(wanted) = &args.query {
        queries.retain(|q| q.name.contains(wanted.as_str()));
        if queries.is_empty() {
            return Err(format!("no suite query's name contains `{wanted}`").into());
        }
    }

    if let Some(many) = args.many_clients {
        return clients::run(&args, many, &queries).await;
    }
    if args.round_cost {
        return round_cost::run(&args).await;
    }
    if let Some(counts) = &args.secure {
        return secure::run(&args, counts).await;
    }

    let plan = client_plan(&args.dir, args.rows, args.clients);
    prepare_data(&args.dir, &plan, args.regenerate)?;
    let bytes: u64 = plan
        .iter()
        .map(|c| fs::metadata(&c.path).map(|m| m.len()).unwrap_or(0))
        .sum();

    if args.network {
        return network::run(&args, &plan, &queries, &args.rtt).await;
    }
    if args.load {
        return load::run(&args, &plan, &queries).await;
    }

    let federated = FedContext::new();
    federated.sql(&federated_table_sql(&plan, "")).await?;
    let centralized =
        SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    let files: Vec<String> = plan
        .iter()
        .map(|c| c.path.to_string_lossy().into_owned())
        .collect();
    let all_rows = centralized
        .read_parquet(files, ParquetReadOptions::default())
        .await?;
    centralized.register_table("t", all_rows.into_view())?;

    if args.remote {
        return remote::run(&args, &plan, &federated, &queries).await;
    }
    if args.ballista {
        #[cfg(feature = "ballista")]
        return ballista::run(&args, &plan, &queries).await;
        #[cfg(not(feature = "ballista"))]
        return Err("--ballista: fedsql-bench was built without the `ballista` feature".into());
    }
    if args.pgwire {
        return pgwire::run(&args, &federated, &queries).await;
    }
    if args.policy {
        return policy::run(&args, &plan, &federated, &queries).await;
    }
    if let Some(index) = args.fit_memory {
        return fits::one_fit_memory(&federated, index).await;
    }
    if args.fits {
        return fits::run(&federated, &args).await;
    }

    let mut timings = Vec::new();
    let mut warnings = Vec::new();
    let mut compared = 0;
    let suite: &[SuiteQuery] = if args.no_suite { &[] } else { &queries };
    for query in suite {
        eprintln!("{}: warm-up", query.name);
        let (_, fed_rows) = run_federated(&federated, &query.sql).await?;
        let (_, central_rows) = run_centralized(&centralized, &query.sql).await?;
        if query.is_approximate() {
            eprintln!("{}: approximate, results not compared", query.name);
        } else {
            compared += 1;
            if let Err(difference) = compare_results(&fed_rows, &central_rows) {
                warnings.push(format!(
                    "WARNING: {}: federated and centralized results differ: {difference}",
                    query.name
                ));
            }
        }

        let mut timing = Timing::default();
        for run in 0..args.runs {
            // Alternate which engine goes first, so neither always runs on a
            // cache the other has just warmed.
            if run % 2 == 0 {
                timing
                    .federated
                    .push(run_federated(&federated, &query.sql).await?.0);
                timing
                    .centralized
                    .push(run_centralized(&centralized, &query.sql).await?.0);
            } else {
                timing
                    .centralized
                    .push(run_centralized(&centralized, &query.sql).await?.0);
                timing
                    .federated
                    .push(run_federated(&federated, &query.sql).await?.0);
            }
        }
        eprintln!(
            "{}: federated {:.3} s, centralized {:.3} s (medians)",
            query.name,
            median(&timing.federated),
            median(&timing.centralized)
        );
        timings.push((query.name.clone(), timing));
    }

    if !args.no_suite {
        print_report(&args, bytes, &timings);
        println!();
        for warning in &warnings {
            println!("{warning}");
        }
        if warnings.is_empty() {
            println!(
                "Results: federated and centralized agree on all {compared} exact queries \
                 (floats to {FLOAT_TOLERANCE:e} relative; approximate queries not compared)."
            );
        }
    }
    if !args.no_models {
        models::run(&federated, args.runs).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::values_agree;
    use std::path::Path;

    use datafusion::arrow::util::display::array_value_to_string;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use crate::data::{TextKeys, bench_schema, generate_batch};

    #[test]
    fn the_suite_parses_into_ten_named_one_statement_queries() {
        let queries = parse_suite(SUITE);
        assert_eq!(queries.len(), 10);
        assert_eq!(queries[0].name, "q01_count");
        assert_eq!(queries[0].sql, "SELECT count(*) AS n FROM t");
        assert!(
            queries
                .iter()
                .all(|q| q.sql.starts_with("SELECT") && !q.sql.contains(';'))
        );
        let approximate: Vec<&str> = queries
            .iter()
            .filter(|q| q.is_approximate())
            .map(|q| q.name.as_str())
            .collect();
        assert_eq!(approximate, ["q10_approx_median"]);
    }

    #[test]
    fn a_query_may_span_lines_and_comments_are_skipped() {
        let queries = parse_suite(
            "-- intro\n\n-- name: a\n-- about a\nSELECT 1\n  AS one;\n-- name: b\nSELECT 2;\n",
        );
        assert_eq!(
            queries,
            [
                SuiteQuery {
                    name: "a".into(),
                    sql: "SELECT 1 AS one".into()
                },
                SuiteQuery {
                    name: "b".into(),
                    sql: "SELECT 2".into()
                },
            ]
        );
    }

    #[test]
    fn eight_clients_get_the_reference_shares() {
        let plan = client_plan(Path::new("d"), 10_000_000, 8);
        let rows: Vec<u64> = plan.iter().map(|c| c.rows).collect();
        assert_eq!(
            rows,
            [
                2_500_000, 2_000_000, 1_500_000, 1_200_000, 1_000_000, 800_000, 600_000, 400_000
            ]
        );
        assert_eq!(plan[7].path, Path::new("d").join("client_08.parquet"));
        let odd = client_plan(Path::new("d"), 1001, 3);
        assert_eq!(odd.iter().map(|c| c.rows).sum::<u64>(), 1001);
    }

    #[test]
    fn generated_batches_have_the_documented_ranges() {
        let schema = bench_schema();
        let mut rng = StdRng::seed_from_u64(SEED);
        let batch = generate_batch(&mut rng, 5000, &schema, &TextKeys::new()).unwrap();
        assert_eq!(batch.num_columns(), 15);
        let column = |name: &str| {
            let array = batch.column(schema.index_of(name).unwrap());
            (0..batch.num_rows())
                .map(|i| {
                    array_value_to_string(array, i)
                        .unwrap()
                        .parse::<f64>()
                        .unwrap_or(f64::NAN)
                })
                .collect::<Vec<_>>()
        };
        assert!(column("x1").iter().all(|v| (0.0..1.0).contains(v)));
        assert!(column("x9").iter().all(|v| *v == 0.0 || *v == 1.0));
        assert!(column("y_logistic").iter().all(|v| *v == 0.0 || *v == 1.0));
        assert!(column("y_poisson").iter().all(|v| *v >= 0.0));
        let rate = column("y_logistic").iter().sum::<f64>() / 5000.0;
        assert!((0.2..0.8).contains(&rate), "logistic rate {rate}");
    }

    #[tokio::test]
    async fn the_federated_table_holds_the_plans_files_and_not_a_subfolders() {
        let dir = tempfile::tempdir().unwrap();
        let plan = client_plan(dir.path(), 30, 2);
        prepare_data(dir.path(), &plan, false).unwrap();
        // Another mode's data in a subfolder, as `--round-cost` writes it.
        let sub = dir.path().join("round-cost");
        let other = client_plan(&sub, 7, 1);
        prepare_data(&sub, &other, false).unwrap();

        let ctx = FedContext::new();
        ctx.sql(&federated_table_sql(&plan, "")).await.unwrap();
        let counted = ctx
            .sql("SELECT count(*) AS n FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let n = array_value_to_string(counted[0].column(0), 0).unwrap();
        assert_eq!(n, plan.iter().map(|c| c.rows).sum::<u64>().to_string());
        let clients = ctx
            .sql("SHOW CLIENTS t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let names: Vec<String> = clients
            .iter()
            .flat_map(|b| {
                (0..b.num_rows()).map(move |i| array_value_to_string(b.column(0), i).unwrap())
            })
            .collect();
        assert_eq!(names, ["client_01", "client_02"]);
    }

    #[test]
    fn floats_agree_to_a_relative_tolerance_and_text_exactly() {
        assert!(values_agree("1.0000000000001", "1.0000000000002"));
        assert!(values_agree("5", "5.0"));
        assert!(!values_agree("1.001", "1.002"));
        assert!(!values_agree("north", "south"));
        assert!(
            compare_results(&[vec!["n".into()], vec!["3".into()]], &[vec!["n".into()]]).is_err()
        );
    }
}
