//! Tests of the small-Parquet fast path: its scan gives what DataFusion's
//! own scan gives.

use std::time::{Duration, SystemTime};

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::tree_node::TreeNode;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::physical_plan::collect;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

use super::*;
use crate::site::engine::site_session;
use crate::site::files::file_scan;

fn write(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch =
        RecordBatch::try_from_iter_with_nullable(columns.into_iter().map(|(n, c)| (n, c, true)))
            .unwrap();
    // Row groups of three rows: a file of four rows has two.
    let properties = datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(3))
        .build();
    let mut writer = ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        Some(properties),
    )
    .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

fn rows(a: &[Option<i64>], s: &[Option<&str>], x: &[Option<f64>]) -> Vec<(&'static str, ArrayRef)> {
    vec![
        ("a", Arc::new(Int64Array::from(a.to_vec())) as ArrayRef),
        ("s", Arc::new(StringArray::from(s.to_vec()))),
        ("x", Arc::new(Float64Array::from(x.to_vec()))),
    ]
}

/// `sql`'s plan over table `t` (the file at `path`) at a site: the
/// plan's one file scan, and the plan.
async fn site_plan(path: &Path, sql: &str) -> (SessionContext, Arc<dyn ExecutionPlan>) {
    let ctx = site_session();
    ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    (ctx, plan)
}

/// The plan with its file scan read by a [`SmallParquetExec`]
/// (which must take it), over a cache shared between calls.
fn read_by_site(
    plan: &Arc<dyn ExecutionPlan>,
    path: &Path,
    footers: &Arc<FooterCache>,
) -> Arc<dyn ExecutionPlan> {
    Arc::clone(plan)
        .transform_up(|node| {
            let Some(config) = file_scan(&node) else {
                return Ok(datafusion::common::tree_node::Transformed::no(node));
            };
            let scan = SmallScan::of(config, 8192).expect("a scan of columns only");
            let stat = std::fs::metadata(path).unwrap();
            let mut meta = config.file_groups[0]
                .iter()
                .next()
                .unwrap()
                .object_meta
                .clone();
            meta.size = stat.len();
            meta.last_modified = stat.modified().unwrap().into();
            let exec = SmallParquetExec::new(
                path,
                None,
                scan,
                Arc::clone(footers),
                (Arc::clone(&node), meta),
                Arc::clone(node.properties()),
            );
            Ok(datafusion::common::tree_node::Transformed::yes(
                Arc::new(exec) as Arc<dyn ExecutionPlan>,
            ))
        })
        .unwrap()
        .data
}

async fn run(ctx: &SessionContext, plan: Arc<dyn ExecutionPlan>) -> String {
    let batches = collect(plan, ctx.task_ctx()).await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

fn shows_small_scan(plan: &Arc<dyn ExecutionPlan>) -> bool {
    datafusion::physical_plan::displayable(plan.as_ref())
        .indent(true)
        .to_string()
        .contains("SmallParquetExec")
}

#[tokio::test]
async fn a_small_file_read_by_the_site_gives_the_rows_datafusions_scan_gives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    write(
        &path,
        rows(
            &[Some(3), None, Some(-7), Some(3)],
            &[Some("b"), Some("a"), None, Some("b")],
            &[Some(0.5), Some(2.25), None, Some(-1.0)],
        ),
    );
    let footers = Arc::default();
    // Columns out of the file's order and twice, a string read as a
    // view, a filter above the scan, grouping, and no column at all.
    for sql in [
        "SELECT x, s, a, x AS x2 FROM t",
        "SELECT s, sum(x), count(a), min(a) FROM t WHERE a > 0 OR x IS NULL GROUP BY s ORDER BY s",
        "SELECT count(*) FROM t",
        // A common expression DataFusion evaluates in the scan.
        "SELECT count(*) FILTER (WHERE a = 3), sum(x) FILTER (WHERE a = 3), min(s) FILTER (WHERE x > 0) FROM t",
    ] {
        let (ctx, plan) = site_plan(&path, sql).await;
        let whole = read_by_site(&plan, &path, &footers);
        assert!(shows_small_scan(&whole), "{sql}");
        assert_eq!(run(&ctx, whole).await, run(&ctx, plan).await, "{sql}");
    }
}

#[tokio::test]
async fn a_rewritten_file_is_read_with_its_new_footer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    write(
        &path,
        rows(
            &[Some(1), Some(2)],
            &[Some("a"), Some("b")],
            &[Some(1.0), Some(2.0)],
        ),
    );
    let footers = Arc::default();
    let sql = "SELECT sum(a), count(s), sum(x) FROM t";
    let (ctx, plan) = site_plan(&path, sql).await;
    let first = run(&ctx, read_by_site(&plan, &path, &footers)).await;
    assert!(first.contains("| 3 "), "{first}");
    // The same schema, other rows: the cached footer's row counts and
    // offsets no longer describe the file.
    write(
        &path,
        rows(
            &[Some(5), Some(9), Some(0)],
            &[Some("c"), Some("d"), Some("e")],
            &[Some(4.0), Some(8.0), Some(16.0)],
        ),
    );
    let again = run(&ctx, read_by_site(&plan, &path, &footers)).await;
    let (_, fresh) = site_plan(&path, sql).await;
    assert_eq!(again, run(&ctx, fresh).await);
    assert!(again.contains("| 14 "), "{again}");
}

/// The file at `path` with its last byte (of the footer's magic)
/// overwritten, its length kept and its modification time set to
/// `modified`: a file no footer can be read from.
fn break_tail(path: &Path, modified: SystemTime) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::End(-1)).unwrap();
    file.write_all(b"X").unwrap();
    file.set_modified(modified).unwrap();
}

/// A one-row file at `path`, last written at `modified`, and the
/// table schema of its columns.
fn file_written_at(path: &Path, modified: SystemTime) -> SchemaRef {
    write(path, rows(&[Some(1)], &[Some("a")], &[Some(1.0)]));
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(modified).unwrap();
    let (_, plan) = futures::executor::block_on(site_plan(path, "SELECT a, s, x FROM t"));
    let mut table = None;
    plan.apply(|node| {
        if let Some(config) = file_scan(node) {
            table = Some(Arc::clone(config.file_schema()));
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    table.expect("a file scan")
}

#[test]
fn a_settled_file_s_footer_is_not_read_again_while_its_length_and_time_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let table = file_written_at(&path, an_hour_ago);
    let footers = FooterCache::default();
    let metadata =
        |footers: &FooterCache| footers.metadata(&path, &OpenFile::open(&path).unwrap(), &table);
    assert_eq!(
        metadata(&footers)
            .unwrap()
            .metadata()
            .file_metadata()
            .num_rows(),
        1
    );
    // Same length, same time: the footer is not read again.
    break_tail(&path, an_hour_ago);
    assert!(metadata(&footers).is_ok());
    // A time one second later: read again, and found broken.
    break_tail(&path, an_hour_ago + Duration::from_secs(1));
    let e = metadata(&footers).unwrap_err().to_string();
    assert!(e.contains("does not end in a Parquet footer"), "{e}");
}

#[test]
fn a_file_written_just_now_has_its_footer_read_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    // Written within SETTLED of the read: a second write in the same
    // clock tick would leave the time as it is.
    let just_now = SystemTime::now();
    let table = file_written_at(&path, just_now);
    let footers = FooterCache::default();
    let metadata =
        |footers: &FooterCache| footers.metadata(&path, &OpenFile::open(&path).unwrap(), &table);
    assert!(metadata(&footers).is_ok());
    assert!(metadata(&footers).is_ok());
    break_tail(&path, just_now);
    let e = metadata(&footers).unwrap_err().to_string();
    assert!(e.contains("does not end in a Parquet footer"), "{e}");
}

/// The bytes the cache's `open` gives for the file, when kept.
fn kept_bytes(footers: &FooterCache, path: &Path) -> Option<Vec<u8>> {
    match footers.open(path).unwrap().source() {
        open_file::Source::Kept(bytes) => Some(bytes.to_vec()),
        open_file::Source::File(_) => None,
    }
}

/// Whether the cache's `open` gives the file's kept bytes.
fn kept(footers: &FooterCache, path: &Path) -> bool {
    kept_bytes(footers, path).is_some()
}

#[tokio::test]
async fn a_settled_small_file_is_read_from_its_kept_bytes_while_its_length_and_time_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    file_written_at(&path, an_hour_ago);
    let footers: Arc<FooterCache> = Arc::default();
    let sql = "SELECT sum(a), count(s), sum(x) FROM t";
    let (ctx, plan) = site_plan(&path, sql).await;
    let first = run(&ctx, read_by_site(&plan, &path, &footers)).await;
    assert_eq!(first, run(&ctx, Arc::clone(&plan)).await);
    assert!(kept(&footers, &path));
    // Same length, same time: the kept bytes are read, not the file
    // (whose footer is now broken).
    break_tail(&path, an_hour_ago);
    let again = run(&ctx, read_by_site(&plan, &path, &footers)).await;
    assert_eq!(again, first);
    // What is kept is the file as it was read, not as it is now.
    let on_disk = std::fs::read(&path).unwrap();
    assert_ne!(kept_bytes(&footers, &path).unwrap(), on_disk);
    // Those bytes, length and time in another file renamed over it:
    // the file is read again.
    let copy = dir.path().join("copy.parquet");
    std::fs::write(&copy, &on_disk).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&copy)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    std::fs::rename(&copy, &path).unwrap();
    assert_eq!(kept_bytes(&footers, &path).unwrap(), on_disk);
    break_tail(&path, an_hour_ago + Duration::from_secs(1));
    let scan = read_by_site(&plan, &path, &footers);
    let e = collect(scan, ctx.task_ctx()).await.unwrap_err().to_string();
    assert!(e.contains("does not end in a Parquet footer"), "{e}");
}

#[test]
fn files_written_just_now_or_larger_than_small_are_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let footers = FooterCache::default();
    let recent = dir.path().join("recent.parquet");
    file_written_at(&recent, SystemTime::now());
    assert!(!kept(&footers, &recent));
    assert!(!kept(&footers, &recent));
    let large = dir.path().join("large.parquet");
    let n = (SMALL_FILE / 8 + 1000) as i64;
    // Distinct doubles: no dictionary or compression makes them small.
    let x: Vec<Option<f64>> = (0..n).map(|i| Some(i as f64 * 1.000_001)).collect();
    let a: Vec<Option<i64>> = (0..n).map(Some).collect();
    let s: Vec<Option<&str>> = vec![Some("a"); n as usize];
    let batch = RecordBatch::try_from_iter_with_nullable(
        rows(&a, &s, &x).into_iter().map(|(n, c)| (n, c, true)),
    )
    .unwrap();
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(&large).unwrap(), batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&large)
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert!(std::fs::metadata(&large).unwrap().len() > SMALL_FILE);
    assert!(!kept(&footers, &large));
    // The same file, settled and small, is.
    let settled = dir.path().join("settled.parquet");
    file_written_at(&settled, old);
    assert!(kept(&footers, &settled));
}

#[tokio::test]
async fn a_file_without_a_table_column_is_read_by_datafusions_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    write(
        &path,
        rows(
            &[Some(1), Some(2)],
            &[Some("a"), Some("b")],
            &[Some(1.0), Some(2.0)],
        ),
    );
    let footers = Arc::default();
    let sql = "SELECT a, x FROM t ORDER BY a";
    let (ctx, plan) = site_plan(&path, sql).await;
    // Rewritten without `x`, and with `a` of another type: DataFusion's
    // scan adapts the file (a NULL column, a cast); so must the site.
    write(
        &path,
        vec![(
            "a",
            Arc::new(datafusion::arrow::array::Int32Array::from(vec![4, 6])) as ArrayRef,
        )],
    );
    let whole = run(&ctx, read_by_site(&plan, &path, &footers)).await;
    let expected = [
        "+---+---+",
        "| a | x |",
        "+---+---+",
        "| 4 |   |",
        "| 6 |   |",
        "+---+---+",
    ];
    assert_eq!(whole, expected.join("\n"));
}
