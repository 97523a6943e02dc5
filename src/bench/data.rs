//! The benchmark data: a synthetic regression set (x1..x10, a Gaussian, a
//! Bernoulli and a Poisson response, two text keys) over Parquet clients
//! of uneven size, written once and reused.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use datafusion::arrow::array::{ArrayRef, Float64Builder, Int64Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp1, Poisson, StandardNormal};

use crate::{BATCH_ROWS, BenchResult, G1_VALUES, G2_VALUES, SEED, SHARES_OF_8};

/// One client's file and how many rows it holds.
#[derive(Debug, Clone)]
pub(crate) struct ClientFile {
    pub(crate) index: usize,
    pub(crate) path: PathBuf,
    pub(crate) rows: u64,
}

/// `CREATE FEDERATED TABLE t` over exactly the files of `plan`, one client
/// per file named after it, with `options` (`""` for none). Not `LOCATION`
/// of the folder: that would also make each of its subfolders a client
/// (`--round-cost` and `--many-clients` keep their data in subfolders).
pub(crate) fn federated_table_sql(plan: &[ClientFile], options: &str) -> String {
    let clients: Vec<String> = plan
        .iter()
        .map(|c| {
            let name = c.path.file_stem().unwrap_or_default().to_string_lossy();
            format!("'{name}' = '{}'", c.path.display())
        })
        .collect();
    format!(
        "CREATE FEDERATED TABLE t CLIENTS ({}){options}",
        clients.join(", ")
    )
}

/// The clients' files and row counts: fixed shares for 8 clients, linearly
/// declining shares otherwise; the rounding remainder goes to the first.
pub(crate) fn client_plan(dir: &Path, total: u64, clients: usize) -> Vec<ClientFile> {
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
pub(crate) fn bench_schema() -> SchemaRef {
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
pub(crate) fn prepare_data(dir: &Path, plan: &[ClientFile], regenerate: bool) -> BenchResult<()> {
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
pub(crate) fn has_rows(path: &Path, rows: u64, schema: &Schema) -> bool {
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
pub(crate) fn write_client(client: &ClientFile, schema: &SchemaRef) -> BenchResult<()> {
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
pub(crate) struct TextKeys {
    pub(crate) g1: Vec<String>,
    pub(crate) g2: Vec<String>,
}

impl TextKeys {
    pub(crate) fn new() -> Self {
        Self {
            g1: (0..G1_VALUES).map(|i| format!("g{i:02}")).collect(),
            g2: (0..G2_VALUES).map(|i| format!("k{i:04}")).collect(),
        }
    }
}

/// Coefficients of x1..x10 in the three responses (modest, so the Poisson
/// means stay small and the logistic rate away from 0 and 1).
pub(crate) const BETA_GAUSSIAN: [f64; 10] = [0.5, -0.3, 0.2, 0.1, 0.0, 0.4, -0.2, 0.05, 0.8, 0.3];
pub(crate) const BETA_LOGISTIC: [f64; 10] =
    [0.8, -0.4, 0.3, 0.2, -0.1, 0.25, -0.15, 0.03, 0.5, 0.3];
pub(crate) const BETA_POISSON: [f64; 10] = [0.4, 0.1, -0.1, 0.05, 0.05, 0.1, -0.05, 0.01, 0.3, 0.2];
pub(crate) const INTERCEPT_GAUSSIAN: f64 = 1.0;
/// x8 has mean 10: these intercepts centre it out of the linear predictors.
pub(crate) const INTERCEPT_LOGISTIC: f64 = -1.0 - 10.0 * 0.03;
pub(crate) const INTERCEPT_POISSON: f64 = 0.2 - 10.0 * 0.01;

pub(crate) fn linear(intercept: f64, beta: &[f64; 10], x: &[f64; 10]) -> f64 {
    intercept + beta.iter().zip(x).map(|(b, x)| b * x).sum::<f64>()
}

/// One batch of rows. The covariates are of different kinds on purpose:
/// x1 uniform on [0, 1) (the suite's q06 keys on floor(x1 * 4)), x2..x5
/// standard normal, x6 correlated with x1, x7 exponential, x8 normal with
/// mean 10 and sd 3, x9 0/1 with P(1) = 0.3, x10 uniform on [-1, 1).
pub(crate) fn generate_batch(
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
