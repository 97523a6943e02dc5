//! A site's small Parquet file read by the site itself, on the thread that
//! runs its scan, and decoded straight into the scan's columns.
//!
//! A thousand clients of a thousand rows each read a thousand small files
//! per query. DataFusion's file scan reads each in several byte ranges on
//! tokio's blocking pool, converts the file's schema, plans row groups and
//! adapts the batches: fixed costs that, for a file of 100 kB, are several
//! times the decoding itself. A file of at most [`SMALL_FILE`] bytes whose
//! scan evaluates no filter and has no limit is read here instead: its
//! footer, then only the column chunks of the columns the scan needs
//! ([`parts`]), decoded, and the scan's projection (columns, or an
//! expression DataFusion pushed into the scan) evaluated over them. Its
//! parsed footer is kept in a [`FooterCache`] ([`footers`]) with the
//! footer's bytes and the file's length and modification time; a file that
//! may have changed is read again, and parsed anew when its footer's bytes
//! differ, so a file that changed is never decoded with a stale footer. A file whose columns differ from the
//! table's (a missing column, another type), and any other scan, go to
//! DataFusion's scan, as before.

use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DFResult, Statistics};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::object_store::ObjectMeta;
use datafusion::parquet::arrow::arrow_reader::{
    ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::Stream;

use crate::site::engine::site_file;

mod footers;
mod open_file;
mod parts;
pub(crate) mod row_groups;
mod scan;
pub(crate) use footers::FooterCache;
pub(crate) use open_file::{OpenFile, SMALL_FILE};
use parts::{ReadParts, chunk_ranges};
pub(crate) use scan::SmallScan;

/// The scan of one small Parquet file (see the module's notes).
pub(crate) struct SmallParquetExec {
    path: PathBuf,
    /// The file, opened when the scan was bound to it; opened again by a
    /// second execution.
    opened: Mutex<Option<OpenFile>>,
    scan: SmallScan,
    footers: Arc<FooterCache>,
    /// The template's scan (shared, not copied: a site binds it only when
    /// it must) and the file's metadata: DataFusion's scan of the file, for
    /// a file whose columns differ from the table's (it adapts them: casts,
    /// NULLs for a missing column).
    fallback: (Arc<dyn ExecutionPlan>, ObjectMeta),
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for SmallParquetExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmallParquetExec")
            .field("path", &self.path)
            .field("scan", &self.scan)
            .finish_non_exhaustive()
    }
}

impl SmallParquetExec {
    /// The scan of the file at `path`, with the `properties` of the
    /// template's scan it replaces (one partition, the same schema).
    pub(crate) fn new(
        path: &Path,
        opened: Option<OpenFile>,
        scan: SmallScan,
        footers: Arc<FooterCache>,
        fallback: (Arc<dyn ExecutionPlan>, ObjectMeta),
        properties: Arc<PlanProperties>,
    ) -> Self {
        Self {
            path: path.to_path_buf(),
            opened: Mutex::new(opened),
            scan,
            footers,
            fallback,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The file's footer and the column chunks of its columns read: the
    /// reader of its columns; `None` when a column of the table is not in
    /// the file with the table's type.
    fn open(&self) -> DFResult<Option<(ParquetRecordBatchReader, Vec<usize>)>> {
        let opened = self.opened.lock().expect("not poisoned").take();
        let file = match opened {
            Some(file) => file,
            None => self.footers.open(&self.path)?,
        };
        let metadata = self.footers.metadata(&self.path, &file, &self.scan.table)?;
        let Some((mask, places)) = self.scan.columns_in(&metadata) else {
            return Ok(None);
        };
        let parts = ReadParts::read(&file, chunk_ranges(&metadata, &mask, file.len)?)?;
        // A file of fewer rows than a batch is read in one batch either
        // way; its decoders need not reserve room for a whole one.
        let rows = usize::try_from(metadata.metadata().file_metadata().num_rows()).unwrap_or(0);
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(parts, metadata)
            .with_projection(mask)
            .with_batch_size(self.scan.batch_size.min(rows.max(1)))
            .build()?;
        Ok(Some((reader, places)))
    }
}

impl DisplayAs for SmallParquetExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let projection: Vec<String> = self
            .scan
            .exprs
            .iter()
            .zip(self.scan.schema.fields())
            .map(|(e, out)| match e.downcast_ref::<Column>() {
                Some(c) if c.name() == out.name() => out.name().clone(),
                _ => format!("{e} as {}", out.name()),
            })
            .collect();
        write!(
            f,
            "SmallParquetExec: file={}, projection=[{}]",
            self.path.display(),
            projection.join(", ")
        )
    }
}

impl ExecutionPlan for SmallParquetExec {
    fn name(&self) -> &str {
        "SmallParquetExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "SmallParquetExec has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SmallParquetExec has one partition, not {partition}"
            )));
        }
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let opened = {
            let _timer = metrics.elapsed_compute().timer();
            self.open()?
        };
        let Some((reader, places)) = opened else {
            let (template_scan, meta) = &self.fallback;
            let config = crate::site::files::file_scan(template_scan).ok_or_else(|| {
                DataFusionError::Internal("a small file's template scan is no file scan".into())
            })?;
            return site_file::bound_scan(config, meta).execute(0, context);
        };
        Ok(Box::pin(SmallParquetStream {
            scan: self.scan.clone(),
            reader,
            places,
            metrics,
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> DFResult<Arc<Statistics>> {
        Ok(Arc::new(Statistics::new_unknown(&self.scan.schema)))
    }
}

/// The batches of one small file, decoded as they are asked for.
struct SmallParquetStream {
    scan: SmallScan,
    reader: ParquetRecordBatchReader,
    places: Vec<usize>,
    metrics: BaselineMetrics,
}

impl SmallParquetStream {
    fn next_batch(&mut self) -> Option<DFResult<RecordBatch>> {
        let _timer = self.metrics.elapsed_compute().timer();
        let decoded = match self.reader.next()? {
            Ok(decoded) => decoded,
            Err(e) => return Some(Err(e.into())),
        };
        Some(self.scan.output(&decoded, &self.places))
    }
}

impl Stream for SmallParquetStream {
    type Item = DFResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.next_batch();
        // Rows counted, not bytes: sizing each batch's buffers is a cost a
        // thousand small files would pay per batch.
        match &next {
            Some(Ok(batch)) => self.metrics.record_output(batch.num_rows()),
            _ => self.metrics.done(),
        }
        Poll::Ready(next)
    }
}

impl RecordBatchStream for SmallParquetStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.scan.schema)
    }
}

#[cfg(test)]
mod tests {
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
        let batch = RecordBatch::try_from_iter_with_nullable(
            columns.into_iter().map(|(n, c)| (n, c, true)),
        )
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

    fn rows(
        a: &[Option<i64>],
        s: &[Option<&str>],
        x: &[Option<f64>],
    ) -> Vec<(&'static str, ArrayRef)> {
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
        let metadata = |footers: &FooterCache| {
            footers.metadata(&path, &OpenFile::open(&path).unwrap(), &table)
        };
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
        let metadata = |footers: &FooterCache| {
            footers.metadata(&path, &OpenFile::open(&path).unwrap(), &table)
        };
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
            ArrowWriter::try_new(std::fs::File::create(&large).unwrap(), batch.schema(), None)
                .unwrap();
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
}
