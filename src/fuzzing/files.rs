//! The files a data owner or an analyst points fedsql at: the worker's
//! TOML configuration, `fedsql serve`'s users file, and the CSV and
//! Parquet files a site reads (truncated, corrupted, of unexpected types,
//! with huge fields). Each input is written to a file of this process's
//! scratch folder and read by the code that reads the real ones.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::datatypes::DataType;

use super::common::{runtime, scratch};
use crate::coordinator::context::FedContext;
use crate::error::Result;
use crate::frontend::pgwire::auth::Users;
use crate::site::worker::{WorkerArgs, WorkerConfig};

/// Most columns of a fuzzed file whose aggregates are asked for.
const MOST_COLUMNS: usize = 6;

/// A fresh file name in the scratch folder `kind` (never reused, so no
/// cache keyed by path can answer from an earlier input).
fn fresh(kind: &str, extension: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = scratch().join(kind);
    let _ = std::fs::create_dir_all(&dir);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("input-{n}.{extension}"))
}

/// A worker's `--config` file (with `--listen` given, so that no input
/// makes it look a name up); a `token` file sits beside it.
pub fn worker_config(data: &[u8]) -> Result<()> {
    let path = fresh("worker_config", "toml");
    let dir = path.parent().expect("a folder").to_path_buf();
    std::fs::write(dir.join("token"), "fuzz-token\n")?;
    std::fs::write(&path, data)?;
    let args = WorkerArgs {
        config: Some(path.clone()),
        listen: Some("127.0.0.1:0".into()),
        ..WorkerArgs::default()
    };
    let result = runtime().block_on(async {
        let config = WorkerConfig::from_args(&args).await?;
        config.check_dp_has_policy()?;
        crate::site::worker::tokens::check_names(&config.token, &config.named_tokens)?;
        crate::site::worker::config::approvals_file_of(&path)?;
        Ok(())
    });
    let _ = std::fs::remove_file(&path);
    result
}

/// `fedsql serve --users FILE` (a `token_file` beside it is read too).
pub fn users_file(data: &[u8]) -> Result<()> {
    let path = fresh("users_file", "toml");
    let dir = path.parent().expect("a folder").to_path_buf();
    std::fs::write(dir.join("token"), "fuzz-token\n")?;
    std::fs::write(&path, data)?;
    let result = Users::load(&path).map(|users| {
        // What a connection asks of the users: a salt for any name.
        let _ = users.salt_and_iterations("fuzz");
        let _ = users.to_toml();
    });
    let _ = std::fs::remove_file(&path);
    result
}

/// One site's CSV file, as `CREATE FEDERATED TABLE` reads it.
pub fn site_csv(data: &[u8]) -> Result<()> {
    site_file(data, "csv")
}

/// One site's Parquet file, as `CREATE FEDERATED TABLE` reads it.
pub fn site_parquet(data: &[u8]) -> Result<()> {
    site_file(data, "parquet")
}

/// The analyst's session the file targets register their tables in.
fn context() -> &'static FedContext {
    static CONTEXT: OnceLock<FedContext> = OnceLock::new();
    CONTEXT.get_or_init(FedContext::new)
}

/// Registers the file as one site's rows and runs the queries a site
/// answers over any table: a count and, per column, a count and a
/// distinct count (and a sum, a mean and a deviation of a number); and a
/// count grouped by the first column.
fn site_file(data: &[u8], extension: &str) -> Result<()> {
    let path = fresh(&format!("site_{extension}"), extension);
    std::fs::write(&path, data)?;
    // One file at a time: the inputs share the table's name in one
    // context (tests run them on several threads).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let result = runtime().block_on(query_file(&path, extension));
    let _ = std::fs::remove_file(&path);
    result
}

async fn query_file(path: &std::path::Path, extension: &str) -> Result<()> {
    let ctx = context();
    let table = format!("fuzz_{extension}");
    ctx.sql(&format!(
        "CREATE OR REPLACE FEDERATED TABLE {table} CLIENTS ('site' = '{}')",
        path.display()
    ))
    .await?
    .collect()
    .await?;
    let provider = ctx.federated_table(&table).await?;
    let schema = provider.schema();
    // One query of every column's aggregates (one round over the file),
    // and one grouped by the first column.
    let mut aggregates = vec!["count(*)".to_string()];
    let mut first = None;
    for field in schema.fields().iter().take(MOST_COLUMNS) {
        if field.name() == "_client" {
            continue;
        }
        let column = crate::formula::quote_ident(field.name());
        aggregates.push(format!("count({column})"));
        // approx_distinct takes no floats; count(DISTINCT) is unbounded.
        if !field.data_type().is_floating() {
            aggregates.push(format!("approx_distinct({column})"));
        }
        if field.data_type().is_numeric() && !matches!(field.data_type(), DataType::Decimal256(..))
        {
            aggregates.push(format!("sum({column}), avg({column}), stddev({column})"));
        }
        first.get_or_insert(column);
    }
    let mut queries = vec![format!("SELECT {} FROM {table}", aggregates.join(", "))];
    if let Some(column) = first {
        queries.push(format!(
            "SELECT {column}, count(*) FROM {table} GROUP BY {column}"
        ));
    }
    let mut first_error = None;
    for query in queries {
        let answer = match ctx.sql(&query).await {
            Ok(frame) => frame.collect().await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = answer {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}
