//! Shared test harness: federations of the demo rows split over clients in
//! several ways, a centralized DataFusion context over the same rows put
//! together, and a comparison of results (integers and strings exactly,
//! floats to 1e-9 relative).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::prelude::{CsvReadOptions, SessionContext};
use fedsql::FedContext;
use tempfile::TempDir;

/// How the client files are stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Format {
    Csv,
    Parquet,
}

/// A federated table `clinic` over client files, and the same rows as one
/// table in a plain DataFusion context.
pub(crate) struct Federation {
    /// Holds the client files for as long as the federation lives.
    _files: TempDir,
    pub fed: FedContext,
    pub central: SessionContext,
    pub sizes: Vec<usize>,
    /// Each client's file, in client order.
    pub client_files: Vec<PathBuf>,
}

/// The demo rows: the header and every data line, clients concatenated.
pub(crate) fn demo_rows() -> (String, Vec<String>) {
    let mut header = String::new();
    let mut rows = Vec::new();
    for (_, csv) in fedsql::frontend::demo::DEMO_CLIENTS {
        let mut lines = csv.lines();
        header = lines.next().expect("header").to_string();
        rows.extend(lines.filter(|l| !l.is_empty()).map(str::to_string));
    }
    (header, rows)
}

/// Client sizes for `clients` clients over `n` rows: uneven, and from three
/// clients on, one client with a single row; from seven on, an empty one.
pub(crate) fn split_sizes(n: usize, clients: usize) -> Vec<usize> {
    match clients {
        1 => vec![n],
        3 => vec![1, n / 3, n - 1 - n / 3],
        7 => {
            let mut sizes = vec![0, 1, 2, n / 10, n / 7, n / 4];
            let used: usize = sizes.iter().sum();
            sizes.push(n - used);
            sizes
        }
        k => {
            let mut sizes = vec![n / k; k];
            sizes[k - 1] += n % k;
            sizes
        }
    }
}

/// Writes `rows` split by `sizes` as client files under `dir`, one file per
/// client named `c{i}`, and returns their paths.
pub(crate) fn write_clients(
    dir: &Path,
    header: &str,
    rows: &[String],
    sizes: &[usize],
    format: Format,
) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut start = 0;
    let mut paths = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let chunk = &rows[start..start + size];
        start += size;
        let csv = format!(
            "{header}\n{}",
            chunk.iter().map(|r| format!("{r}\n")).collect::<String>()
        );
        let path = match format {
            Format::Csv => {
                let path = dir.join(format!("c{i}.csv"));
                std::fs::write(&path, csv).unwrap();
                path
            }
            Format::Parquet => {
                let path = dir.join(format!("c{i}.parquet"));
                write_parquet(&path, &csv, fedsql::frontend::demo::demo_schema());
                path
            }
        };
        paths.push(path);
    }
    assert_eq!(start, rows.len());
    paths
}

/// Writes CSV text (with header) as a Parquet file with the given schema.
pub(crate) fn write_parquet(path: &Path, csv: &str, schema: SchemaRef) {
    let reader = datafusion::arrow::csv::ReaderBuilder::new(Arc::clone(&schema))
        .with_header(true)
        .build(std::io::Cursor::new(csv.as_bytes().to_vec()))
        .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema, None).unwrap();
    for batch in reader {
        writer.write(&batch.unwrap()).unwrap();
    }
    writer.close().unwrap();
}

/// The variable that picks the site engine's fast path for the test
/// harness: `on` or `off` (read here only, never by the library).
pub(crate) const FAST_PATH_VAR: &str = "FEDSQL_TEST_FAST_PATH";

/// The fast-path modes a test that runs in both runs in: both (on, then
/// off), or the one [`FAST_PATH_VAR`] names.
pub(crate) fn fast_path_modes() -> Vec<bool> {
    match std::env::var(FAST_PATH_VAR).as_deref() {
        Ok("on") => vec![true],
        Ok("off") => vec![false],
        Ok(other) => panic!("{FAST_PATH_VAR}={other}: expected on or off"),
        Err(_) => vec![true, false],
    }
}

/// The demo rows split over clients by `sizes`, registered as federated
/// table `clinic`; and the concatenated rows as `clinic` in a plain context.
/// The fast path is on unless [`FAST_PATH_VAR`] is `off`.
pub(crate) async fn federation(sizes: &[usize], format: Format) -> Federation {
    federation_with(sizes, format, "").await
}

/// As [`federation`], with the federated table's OPTIONS (e.g. a policy's
/// `'min_group_rows' '5'`); none when `options` is empty.
pub(crate) async fn federation_with(sizes: &[usize], format: Format, options: &str) -> Federation {
    let fast_path = std::env::var(FAST_PATH_VAR).as_deref() != Ok("off");
    federation_in_mode(sizes, format, options, fast_path).await
}

/// [`federation`] with the site engine's fast path on or off.
pub(crate) async fn federation_in(sizes: &[usize], format: Format, fast_path: bool) -> Federation {
    federation_in_mode(sizes, format, "", fast_path).await
}

/// [`federation_with`] with the site engine's fast path on or off.
pub(crate) async fn federation_in_mode(
    sizes: &[usize],
    format: Format,
    options: &str,
    fast_path: bool,
) -> Federation {
    let (header, rows) = demo_rows();
    let dir = TempDir::new().unwrap();
    let clients = dir.path().join("clinic");
    let client_files = write_clients(&clients, &header, &rows, sizes, format);
    let fed = FedContext::new();
    let stored = match format {
        Format::Csv => "CSV",
        Format::Parquet => "PARQUET",
    };
    let mode = if fast_path { "on" } else { "off" };
    let options = if options.is_empty() {
        format!("'fast_path' '{mode}'")
    } else {
        format!("'fast_path' '{mode}', {options}")
    };
    fed.sql(&format!(
        "CREATE FEDERATED TABLE clinic STORED AS {stored} LOCATION '{}' OPTIONS ({options})",
        clients.display()
    ))
    .await
    .unwrap();

    // Centralized: all rows in one file, read with the federated schema.
    let all = dir.path().join("all.csv");
    std::fs::write(&all, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
    let schema = fedsql::coordinator::client_column::data_schema(
        &fed.session()
            .table_provider("clinic")
            .await
            .unwrap()
            .schema(),
    );
    let central = SessionContext::new();
    central
        .register_csv(
            "clinic",
            all.to_str().unwrap(),
            CsvReadOptions::new().schema(&schema),
        )
        .await
        .unwrap();
    Federation {
        _files: dir,
        fed,
        central,
        sizes: sizes.to_vec(),
        client_files,
    }
}

/// One cell of a result, for comparison.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub(crate) enum Cell {
    Null,
    Float(f64),
    Text(String),
}

/// A result as rows of cells (floats kept as numbers, all else formatted).
pub(crate) fn rows_of(batches: &[RecordBatch]) -> Vec<Vec<Cell>> {
    let options = FormatOptions::default();
    let mut out = Vec::new();
    for batch in batches {
        let columns: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| {
                let floats = matches!(
                    c.data_type(),
                    DataType::Float16 | DataType::Float32 | DataType::Float64
                )
                .then(|| datafusion::arrow::compute::cast(c, &DataType::Float64).unwrap());
                (
                    c,
                    floats,
                    ArrayFormatter::try_new(c.as_ref(), &options).unwrap(),
                )
            })
            .collect();
        for row in 0..batch.num_rows() {
            out.push(
                columns
                    .iter()
                    .map(|(c, floats, fmt)| {
                        if c.is_null(row) {
                            Cell::Null
                        } else if let Some(f) = floats {
                            Cell::Float(f.as_primitive::<Float64Type>().value(row))
                        } else {
                            Cell::Text(fmt.value(row).to_string())
                        }
                    })
                    .collect(),
            );
        }
    }
    out
}

/// Whether two floats agree to `rel` relative (or to 1e-12 absolute, for
/// values that are zero up to rounding).
pub(crate) fn close(a: f64, b: f64, rel: f64) -> bool {
    let diff = (a - b).abs();
    (a.is_nan() && b.is_nan()) || a == b || diff <= rel * a.abs().max(b.abs()) || diff <= 1e-12
}

/// Asserts that two results are the same: same column names, same rows (in
/// order when `ordered`), strings and integers exactly, floats to `rel`.
pub(crate) fn assert_same_result(
    what: &str,
    fed: &[RecordBatch],
    central: &[RecordBatch],
    ordered: bool,
    rel: f64,
) {
    if let Err(difference) = same_result(fed, central, ordered, rel) {
        panic!("{what}: {difference}");
    }
}

/// Whether two results are the same, as [`assert_same_result`] asks; the
/// difference, if not.
pub(crate) fn same_result(
    fed: &[RecordBatch],
    central: &[RecordBatch],
    ordered: bool,
    rel: f64,
) -> Result<(), String> {
    let names = |b: &[RecordBatch]| -> Vec<String> {
        b.first()
            .map(|b| {
                b.schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    if !fed.is_empty() && !central.is_empty() && names(fed) != names(central) {
        return Err(format!(
            "column names differ: {:?} federated, {:?} centralized",
            names(fed),
            names(central)
        ));
    }
    let mut a = rows_of(fed);
    let mut b = rows_of(central);
    if !ordered {
        let key = |r: &Vec<Cell>| format!("{r:?}");
        a.sort_by_key(key);
        b.sort_by_key(key);
    }
    if a.len() != b.len() {
        return Err(format!(
            "{} rows federated, {} centralized\nfed: {a:?}\ncentral: {b:?}",
            a.len(),
            b.len()
        ));
    }
    for (i, (ra, rb)) in a.iter().zip(&b).enumerate() {
        let same = ra.len() == rb.len()
            && ra.iter().zip(rb).all(|(x, y)| match (x, y) {
                (Cell::Float(x), Cell::Float(y)) => close(*x, *y, rel),
                _ => x == y,
            });
        if !same {
            return Err(format!(
                "row {i} differs\nfederated:   {ra:?}\ncentralized: {rb:?}"
            ));
        }
    }
    Ok(())
}

/// Runs one statement federated and centralized and compares the results.
pub(crate) async fn assert_consistent(f: &Federation, sql: &str) {
    assert_consistent_to(f, sql, 1e-9).await;
}

/// As [`assert_consistent`], with a relative tolerance for floats.
pub(crate) async fn assert_consistent_to(f: &Federation, sql: &str, rel: f64) {
    let what = format!("{sql}\n(clients of sizes {:?})", f.sizes);
    let fed = match f.fed.sql(sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    }
    .unwrap_or_else(|e| panic!("{what}: federated run failed: {e}"));
    let central = match f.central.sql(sql).await {
        Ok(df) => df.collect().await,
        Err(e) => Err(e),
    }
    .unwrap_or_else(|e| panic!("{what}: centralized run failed: {e}"));
    let ordered = sql.to_ascii_uppercase().contains("ORDER BY");
    assert_same_result(&what, &fed, &central, ordered, rel);
}

/// A sparse secure round's graph nonces as a hostile test coordinator
/// collects them: the first call for a session asks every site with keys
/// to reveal its nonce for `keys` (each site reveals once per session);
/// later calls for the session give the same nonces. A site that refuses
/// (its keys were not relayed as it sent them) has none. In a round of at
/// most 100 sites there are none.
pub(crate) async fn graph_nonces<'a, S: fedsql::protocol::site::Site + ?Sized>(
    sites: &[Arc<S>],
    request: impl Fn(usize) -> fedsql::protocol::site::SiteRequest<'a>,
    session: &fedsql::protocol::secure::SecureSession,
    keys: &[Option<fedsql::protocol::secure::ParticipantKeys>],
) -> Vec<Option<[u8; 32]>> {
    use fedsql::protocol::secure::{ShareRequest, graph};
    if !graph::session_is_sparse(session) {
        return Vec::new();
    }
    if let Some(known) = REVEALED.lock().unwrap().get(&session.id) {
        return known.clone();
    }
    let reveal = ShareRequest {
        session: session.clone(),
        keys: keys.to_vec(),
        nonces: Vec::new(),
    };
    let mut nonces = vec![None; keys.len()];
    for (c, k) in keys.iter().enumerate() {
        if k.is_some() && c < sites.len() {
            nonces[c] = sites[c].secure_reveal(&request(c), &reveal).await.ok();
        }
    }
    REVEALED.lock().unwrap().insert(session.id, nonces.clone());
    nonces
}

/// Records the nonces a test coordinator collected itself for a session
/// (for [`graph_seed`] and later calls of [`graph_nonces`]).
pub(crate) fn remember_nonces(
    session: &fedsql::protocol::secure::SecureSession,
    nonces: Vec<Option<[u8; 32]>>,
) {
    REVEALED.lock().unwrap().insert(session.id, nonces);
}

/// The graph seed of a session whose nonces [`graph_nonces`] collected
/// (all zeros before, and in a full round).
pub(crate) fn graph_seed(
    session: &fedsql::protocol::secure::SecureSession,
) -> fedsql::protocol::secure::graph::GraphSeed {
    use fedsql::protocol::secure::graph;
    let known = REVEALED.lock().unwrap().get(&session.id).cloned();
    match known {
        Some(nonces) if graph::session_is_sparse(session) => {
            // Hashed as the sites do, without the commitment check (the
            // nonces were revealed by the sites themselves).
            let keys: Vec<_> = nonces
                .iter()
                .map(|n| {
                    n.map(|n| fedsql::protocol::secure::ParticipantKeys {
                        mask_key: [0; 32],
                        cipher_key: [0; 32],
                        self_commitment: [0; 32],
                        list_key: [0; 32],
                        graph_commitment: graph::nonce_commitment(&session.id, &n),
                        signed: None,
                    })
                })
                .collect();
            graph::seed(session, &keys, &nonces).unwrap_or([0; 32])
        }
        _ => [0; 32],
    }
}

/// Graph nonces by session id.
type NoncesBySession = std::collections::HashMap<[u8; 16], Vec<Option<[u8; 32]>>>;

/// The nonces [`graph_nonces`] collected, by session id.
static REVEALED: std::sync::LazyLock<std::sync::Mutex<NoncesBySession>> =
    std::sync::LazyLock::new(Default::default);
