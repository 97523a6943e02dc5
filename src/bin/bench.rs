//! `fedsql-bench`: how much the federated split costs against one engine
//! over all rows at once.
//!
//! It writes a synthetic regression data set (x1..x10, a Gaussian, a
//! Bernoulli and a Poisson response, two text keys) over several Parquet
//! clients of uneven size, then runs every query of the shared aggregate
//! suite (`queries/bench/aggregate_suite.sql`, compiled in) two ways over
//! the same files:
//!
//! * **federated**: a [`FedContext`] with `CREATE FEDERATED TABLE t STORED AS
//!   PARQUET LOCATION '<dir>'`, so each file is one client that runs its
//!   encoder and sends back aggregate states;
//! * **centralized**: a plain DataFusion [`SessionContext`] with
//!   `target_partitions = 2` reading all files as one table `t`, the setup
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

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use datafusion::arrow::array::{ArrayRef, Float64Builder, Int64Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use fedsql::FedContext;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp1, Poisson, StandardNormal};

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
    /// Instead: serve the federation over the PostgreSQL protocol (in this
    /// process, on loopback) and time the suite through it, and a trivial
    /// query's latency, against the federation in-process.
    #[arg(long)]
    pgwire: bool,
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
    let queries = parse_suite(SUITE);
    if queries.is_empty() {
        return Err("the benchmark suite has no `-- name:` queries".into());
    }

    let plan = client_plan(&args.dir, args.rows, args.clients);
    prepare_data(&args.dir, &plan, args.regenerate)?;
    let bytes: u64 = plan
        .iter()
        .map(|c| fs::metadata(&c.path).map(|m| m.len()).unwrap_or(0))
        .sum();

    let dir = args.dir.to_string_lossy().into_owned();
    let federated = FedContext::new();
    federated
        .sql(&format!(
            "CREATE FEDERATED TABLE t STORED AS PARQUET LOCATION '{dir}'"
        ))
        .await?;
    let centralized =
        SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    centralized
        .register_parquet("t", &dir, ParquetReadOptions::default())
        .await?;

    if args.remote {
        return remote::run(&args, &plan, &federated, &queries).await;
    }
    if args.pgwire {
        return pgwire::run(&args, &federated, &queries).await;
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

/// Model fits against the plain federated aggregate they compare with.
mod models {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use fedsql::FedContext;
    use fedsql::notices::Progress;

    use super::{BenchResult, median};

    const XS: &str = "x1 + x2 + x3 + x4 + x5 + x6 + x7 + x8 + x9 + x10";
    const SUMS_X: &str = "SELECT sum(x1), sum(x2), sum(x3), sum(x4), sum(x5), sum(x6), sum(x7), sum(x8), sum(x9), sum(x10) FROM t";

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
        let reports: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let sink = Arc::clone(&reports);
        ctx.set_progress(Progress::new(move |_| {
            sink.lock().unwrap().push(Instant::now())
        }));
        let started = Instant::now();
        ctx.sql(sql).await?.collect().await?;
        let total = started.elapsed().as_secs_f64();
        ctx.take_notices();
        let reports = reports.lock().unwrap().clone();
        let rounds = reports.windows(2).map(|w| w[1] - w[0]).collect();
        Ok((total, reports.len(), rounds))
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
    async fn median_fit(
        ctx: &FedContext,
        sql: &str,
        runs: usize,
    ) -> BenchResult<(f64, f64, usize)> {
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

    pub async fn run(ctx: &FedContext, runs: usize) -> BenchResult<()> {
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
            println!(
                "| `fedsgd` {model} ({name}), whole run ({rounds} rounds) | {total:.3} s | | |"
            );
        }
        Ok(())
    }
}

/// The suite through the PostgreSQL endpoint.
#[path = "bench/pgwire.rs"]
mod pgwire;

/// The suite and a GLM fit over workers on loopback against the same
/// clients in-process.
mod remote {
    use fedsql::FedContext;
    use fedsql::remote::worker::{self, WorkerConfig};

    use super::{
        Args, BenchResult, ClientFile, SuiteQuery, compare_results, median, models, run_federated,
    };

    const TOKEN: &str = "fedsql-bench-token";

    pub async fn run(
        args: &Args,
        plan: &[ClientFile],
        local: &FedContext,
        queries: &[SuiteQuery],
    ) -> BenchResult<()> {
        let dir = tempfile_dir()?;
        let token_file = dir.join("token");
        std::fs::write(&token_file, TOKEN)?;
        let mut workers = Vec::new();
        for client in plan {
            let mut config = WorkerConfig::new(
                "127.0.0.1:0".parse()?,
                vec![("t".to_string(), client.path.clone())],
                TOKEN,
            );
            // The log is the operator's; keep the benchmark's output clean.
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

    fn tempfile_dir() -> BenchResult<std::path::PathBuf> {
        let dir = std::env::temp_dir().join(format!("fedsql-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

// ---------------------------------------------------------------------------
// The suite

/// One query of the suite.
#[derive(Debug, Clone, PartialEq)]
struct SuiteQuery {
    name: String,
    sql: String,
}

impl SuiteQuery {
    /// Approximate aggregates (t-digest, HyperLogLog) merge sketches, so the
    /// federated answer may differ slightly from one pass over all rows.
    fn is_approximate(&self) -> bool {
        self.sql.to_ascii_lowercase().contains("approx_")
    }
}

/// Reads the suite format: a `-- name: <id>` line, then the query (up to the
/// line ending with `;`). Other `--` lines and blank lines are comments.
fn parse_suite(text: &str) -> Vec<SuiteQuery> {
    let mut queries = Vec::new();
    let mut current: Option<(String, Vec<&str>)> = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("-- name:") {
            current = Some((name.trim().to_string(), Vec::new()));
            continue;
        }
        if line.is_empty() || line.starts_with("--") {
            continue;
        }
        if let Some((name, lines)) = current.as_mut() {
            lines.push(line);
            if line.ends_with(';') {
                let sql = lines.join(" ");
                queries.push(SuiteQuery {
                    name: std::mem::take(name),
                    sql: sql.trim_end_matches(';').trim().to_string(),
                });
                current = None;
            }
        }
    }
    queries
}

// ---------------------------------------------------------------------------
// The data

/// One client's file and how many rows it holds.
#[derive(Debug, Clone)]
struct ClientFile {
    index: usize,
    path: PathBuf,
    rows: u64,
}

/// The clients' files and row counts: fixed shares for 8 clients, linearly
/// declining shares otherwise; the rounding remainder goes to the first.
fn client_plan(dir: &Path, total: u64, clients: usize) -> Vec<ClientFile> {
    let weights: Vec<u64> = if clients == SHARES_OF_8.len() {
        SHARES_OF_8.to_vec()
    } else {
        (0..clients).map(|i| (clients - i) as u64).collect()
    };
    let weight_sum: u64 = weights.iter().sum();
    let mut rows: Vec<u64> = weights.iter().map(|w| total * w / weight_sum).collect();
    rows[0] += total - rows.iter().sum::<u64>();
    rows.into_iter()
        .enumerate()
        .map(|(index, rows)| ClientFile {
            index,
            path: dir.join(format!("client_{:02}.parquet", index + 1)),
            rows,
        })
        .collect()
}

/// The columns of `t`.
fn bench_schema() -> SchemaRef {
    let mut fields: Vec<Field> = (1..=10)
        .map(|i| Field::new(format!("x{i}"), DataType::Float64, false))
        .collect();
    fields.push(Field::new("y_gaussian", DataType::Float64, false));
    fields.push(Field::new("y_logistic", DataType::Int64, false));
    fields.push(Field::new("y_poisson", DataType::Int64, false));
    fields.push(Field::new("g1", DataType::Utf8, false));
    fields.push(Field::new("g2", DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// Makes sure `dir` holds exactly the planned files with the planned row
/// counts, writing those that are missing or wrong (all, with `regenerate`).
fn prepare_data(dir: &Path, plan: &[ClientFile], regenerate: bool) -> BenchResult<()> {
    fs::create_dir_all(dir)?;
    let planned: Vec<&Path> = plan.iter().map(|c| c.path.as_path()).collect();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let is_parquet =
            name.ends_with(".parquet") && !name.starts_with('.') && !name.starts_with('_');
        if !is_parquet || planned.contains(&path.as_path()) {
            continue;
        }
        if name.starts_with("client_") {
            // A client file from a run with more clients: it would be a client too.
            eprintln!(
                "removing {} (not part of this {}-client set)",
                path.display(),
                plan.len()
            );
            fs::remove_file(&path)?;
        } else {
            return Err(format!(
                "{} holds {}, which is not a benchmark client; give an empty folder with --dir",
                dir.display(),
                path.display()
            )
            .into());
        }
    }

    let schema = bench_schema();
    let todo: Vec<&ClientFile> = plan
        .iter()
        .filter(|c| regenerate || !has_rows(&c.path, c.rows, &schema))
        .collect();
    if todo.is_empty() {
        eprintln!("using the existing data in {}", dir.display());
        return Ok(());
    }
    let total: u64 = todo.iter().map(|c| c.rows).sum();
    eprintln!(
        "writing {total} rows over {} client file(s) in {}",
        todo.len(),
        dir.display()
    );
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(todo.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> BenchResult<()> {
                    loop {
                        let Some(client) = todo.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            return Ok(());
                        };
                        write_client(client, &schema)?;
                        eprintln!("  wrote {} ({} rows)", client.path.display(), client.rows);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| "a data-writing thread panicked")?)
    })?;
    eprintln!("data written in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Whether `path` is a Parquet file with `rows` rows and the bench columns.
fn has_rows(path: &Path, rows: u64, schema: &Schema) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(meta) = ArrowReaderMetadata::load(&file, Default::default()) else {
        return false;
    };
    let names = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>()
    };
    meta.metadata().file_metadata().num_rows() as u64 == rows
        && names(meta.schema()) == names(schema)
}

/// Writes one client's file (via a hidden temporary file, so an interrupted
/// run never leaves a half-written client behind).
fn write_client(client: &ClientFile, schema: &SchemaRef) -> BenchResult<()> {
    let file_name = client
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("client");
    let tmp = client.path.with_file_name(format!(".{file_name}.tmp"));
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(File::create(&tmp)?, Arc::clone(schema), Some(props))?;
    let mut rng = StdRng::seed_from_u64(SEED + client.index as u64);
    let keys = TextKeys::new();
    let mut left = client.rows as usize;
    while left > 0 {
        let rows = left.min(BATCH_ROWS);
        writer.write(&generate_batch(&mut rng, rows, schema, &keys)?)?;
        left -= rows;
    }
    writer.close()?;
    fs::rename(&tmp, &client.path)?;
    Ok(())
}

/// The values of the text keys, made once.
struct TextKeys {
    g1: Vec<String>,
    g2: Vec<String>,
}

impl TextKeys {
    fn new() -> Self {
        Self {
            g1: (0..G1_VALUES).map(|i| format!("g{i:02}")).collect(),
            g2: (0..G2_VALUES).map(|i| format!("k{i:04}")).collect(),
        }
    }
}

/// Coefficients of x1..x10 in the three responses (modest, so the Poisson
/// means stay small and the logistic rate away from 0 and 1).
const BETA_GAUSSIAN: [f64; 10] = [0.5, -0.3, 0.2, 0.1, 0.0, 0.4, -0.2, 0.05, 0.8, 0.3];
const BETA_LOGISTIC: [f64; 10] = [0.8, -0.4, 0.3, 0.2, -0.1, 0.25, -0.15, 0.03, 0.5, 0.3];
const BETA_POISSON: [f64; 10] = [0.4, 0.1, -0.1, 0.05, 0.05, 0.1, -0.05, 0.01, 0.3, 0.2];
const INTERCEPT_GAUSSIAN: f64 = 1.0;
/// x8 has mean 10: these intercepts centre it out of the linear predictors.
const INTERCEPT_LOGISTIC: f64 = -1.0 - 10.0 * 0.03;
const INTERCEPT_POISSON: f64 = 0.2 - 10.0 * 0.01;

fn linear(intercept: f64, beta: &[f64; 10], x: &[f64; 10]) -> f64 {
    intercept + beta.iter().zip(x).map(|(b, x)| b * x).sum::<f64>()
}

/// One batch of rows. The covariates are of different kinds on purpose:
/// x1 uniform on [0, 1) (the suite's q06 keys on floor(x1 * 4)), x2..x5
/// standard normal, x6 correlated with x1, x7 exponential, x8 normal with
/// mean 10 and sd 3, x9 0/1 with P(1) = 0.3, x10 uniform on [-1, 1).
fn generate_batch(
    rng: &mut StdRng,
    rows: usize,
    schema: &SchemaRef,
    keys: &TextKeys,
) -> BenchResult<RecordBatch> {
    let mut xs: Vec<Float64Builder> = (0..10)
        .map(|_| Float64Builder::with_capacity(rows))
        .collect();
    let mut y_gaussian = Float64Builder::with_capacity(rows);
    let mut y_logistic = Int64Builder::with_capacity(rows);
    let mut y_poisson = Int64Builder::with_capacity(rows);
    let mut g1 = StringBuilder::with_capacity(rows, rows * 3);
    let mut g2 = StringBuilder::with_capacity(rows, rows * 5);
    for _ in 0..rows {
        let mut normal = || -> f64 { rng.sample(StandardNormal) };
        let x2 = normal();
        let x3 = normal();
        let x4 = normal();
        let x5 = normal();
        let x6_noise = normal();
        let x8_noise = normal();
        let y_noise = normal();
        let x1: f64 = rng.random();
        let x7: f64 = rng.sample(Exp1);
        let x9 = if rng.random_bool(0.3) { 1.0 } else { 0.0 };
        let x10 = rng.random_range(-1.0..1.0);
        let x = [
            x1,
            x2,
            x3,
            x4,
            x5,
            2.0 * (x1 - 0.5) + 0.8 * x6_noise,
            x7,
            10.0 + 3.0 * x8_noise,
            x9,
            x10,
        ];
        for (builder, value) in xs.iter_mut().zip(x) {
            builder.append_value(value);
        }
        y_gaussian.append_value(linear(INTERCEPT_GAUSSIAN, &BETA_GAUSSIAN, &x) + y_noise);
        let p = 1.0 / (1.0 + (-linear(INTERCEPT_LOGISTIC, &BETA_LOGISTIC, &x)).exp());
        y_logistic.append_value(i64::from(rng.random_bool(p)));
        let mean = linear(INTERCEPT_POISSON, &BETA_POISSON, &x).exp();
        let count: f64 = Poisson::new(mean)?.sample(rng);
        y_poisson.append_value(count as i64);
        g1.append_value(&keys.g1[rng.random_range(0..G1_VALUES)]);
        g2.append_value(&keys.g2[rng.random_range(0..G2_VALUES)]);
    }
    let mut columns: Vec<ArrayRef> = xs
        .iter_mut()
        .map(|b| Arc::new(b.finish()) as ArrayRef)
        .collect();
    columns.push(Arc::new(y_gaussian.finish()));
    columns.push(Arc::new(y_logistic.finish()));
    columns.push(Arc::new(y_poisson.finish()));
    columns.push(Arc::new(g1.finish()));
    columns.push(Arc::new(g2.finish()));
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

// ---------------------------------------------------------------------------
// Running and timing

/// Wall-clock times of one query, one entry per timed run.
#[derive(Debug, Default)]
struct Timing {
    federated: Vec<Duration>,
    centralized: Vec<Duration>,
}

/// Plans and runs `sql` federated; returns its time and formatted rows.
async fn run_federated(ctx: &FedContext, sql: &str) -> BenchResult<(Duration, Vec<Vec<String>>)> {
    let started = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let elapsed = started.elapsed();
    Ok((elapsed, format_rows(&batches)?))
}

/// Plans and runs `sql` on the centralized session.
async fn run_centralized(
    ctx: &SessionContext,
    sql: &str,
) -> BenchResult<(Duration, Vec<Vec<String>>)> {
    let started = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let elapsed = started.elapsed();
    Ok((elapsed, format_rows(&batches)?))
}

/// Every value as text, a header row first.
fn format_rows(batches: &[RecordBatch]) -> BenchResult<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    if let Some(first) = batches.first() {
        rows.push(
            first
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        );
    }
    for batch in batches {
        for row in 0..batch.num_rows() {
            let values = batch
                .columns()
                .iter()
                .map(|column| array_value_to_string(column, row))
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(values);
        }
    }
    Ok(rows)
}

/// Compares two formatted results: text exactly, numbers to
/// [`FLOAT_TOLERANCE`] relative. Describes the first difference.
fn compare_results(federated: &[Vec<String>], centralized: &[Vec<String>]) -> Result<(), String> {
    if federated.len() != centralized.len() {
        return Err(format!(
            "{} rows federated, {} centralized (header included)",
            federated.len(),
            centralized.len()
        ));
    }
    for (row, (a, b)) in federated.iter().zip(centralized).enumerate() {
        if a.len() != b.len() {
            return Err(format!(
                "row {row}: {} columns federated, {} centralized",
                a.len(),
                b.len()
            ));
        }
        for (column, (x, y)) in a.iter().zip(b).enumerate() {
            if !values_agree(x, y) {
                let name = federated[0].get(column).map_or("?", String::as_str);
                return Err(format!(
                    "row {row}, column `{name}`: {x} federated, {y} centralized"
                ));
            }
        }
    }
    Ok(())
}

fn values_agree(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => {
            let scale = x.abs().max(y.abs());
            (x - y).abs() <= FLOAT_TOLERANCE * scale || (x.is_nan() && y.is_nan())
        }
        _ => false,
    }
}

fn median(times: &[Duration]) -> f64 {
    let mut secs: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    let mid = secs.len() / 2;
    if secs.len() % 2 == 1 {
        secs[mid]
    } else {
        (secs[mid - 1] + secs[mid]) / 2.0
    }
}

fn minimum(times: &[Duration]) -> f64 {
    times
        .iter()
        .map(Duration::as_secs_f64)
        .fold(f64::INFINITY, f64::min)
}

/// The Markdown report: one row per query, then the suite totals.
fn print_report(args: &Args, bytes: u64, timings: &[(String, Timing)]) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
