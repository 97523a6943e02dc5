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
mod tests;
