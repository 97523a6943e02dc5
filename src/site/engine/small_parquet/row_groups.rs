//! The rows a fit keeps, read by the site itself from its Parquet files:
//! row group by row group, each through the file's pages.
//!
//! The first round of a fit reads a site's rows once and keeps them
//! decoded for the rounds that follow ([`crate::site::engine::kept_rows`]).
//! DataFusion's scan fetches all of a row group's column chunks before it
//! decodes them (88 MB for a million rows of 11 doubles), one row group
//! per stream, and those buffers, on top of the rows already kept, set a
//! fit's peak memory. Read here, a row group is decoded from the file one
//! page at a time (the Parquet reader over the open file), so a stream
//! holds a page per column rather than the row group's chunks. It
//! decodes 16 batches' rows at once into one buffer per column and hands
//! them out as batches that share it ([`BATCHES_PER_DECODE`]).
//!
//! The streams read whole row groups, each a run of them in the order of
//! the files, about the same number of rows each; the batches are cut at
//! the end of every row group, so they are the same however many streams
//! read the files, and a fit's sums keep their bits on any machine. The
//! scans that [`SmallScan`] can read (columns, or expressions over them;
//! no filter evaluated in the scan, no limit) of files that all have the
//! table's columns are read here; any other goes to DataFusion's scan.

use std::collections::VecDeque;
use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DFResult, Statistics};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::Stream;

use super::footers::FooterCache;
use super::open_file::OpenFile;
use super::parts::PagedFile;
use super::scan::SmallScan;
use crate::site::engine::site_file::SiteFile;
use crate::site::files::file_scan;

/// One of the site's files as the scan reads it.
struct ScanFile {
    path: PathBuf,
    /// Open since the footer was read, so that the pages read are the
    /// pages of that footer's file.
    file: PagedFile,
    metadata: ArrowReaderMetadata,
    mask: ProjectionMask,
    /// The place of each column the scan reads among those decoded.
    places: Vec<usize>,
}

/// A row group: its file (an index into the scan's files) and its number.
type RowGroup = (usize, usize);

/// The scan of a site's Parquet files, row group by row group (see the
/// module's notes).
pub(crate) struct RowGroupsExec {
    scan: SmallScan,
    files: Arc<[ScanFile]>,
    /// Per stream, its row groups in order.
    streams: Vec<Vec<RowGroup>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for RowGroupsExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowGroupsExec")
            .field(
                "files",
                &self.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}

impl RowGroupsExec {
    /// `node` read here in at most `streams` streams, when it is a scan
    /// of some of `paths` (the site's files) this module can read:
    /// `None` for any other node or scan, and for files without the
    /// table's columns.
    pub(crate) fn of(
        node: &Arc<dyn ExecutionPlan>,
        paths: &[PathBuf],
        footers: &FooterCache,
        streams: usize,
        batch_size: usize,
    ) -> DFResult<Option<Self>> {
        let Some(config) = file_scan(node) else {
            return Ok(None);
        };
        let Some(scan) = SmallScan::of(config, batch_size) else {
            return Ok(None);
        };
        // The scan's files in order, each once (a file split in byte
        // ranges appears in several groups).
        let located: Vec<(&PathBuf, SiteFile)> = paths
            .iter()
            .filter_map(|p| Some((p, SiteFile::new(p).ok()?)))
            .collect();
        let mut named = Vec::new();
        for file in config.file_groups.iter().flat_map(|g| g.iter()) {
            if !file.partition_values.is_empty() {
                return Ok(None);
            }
            let path = located
                .iter()
                .find(|(_, site)| *site.location() == file.object_meta.location);
            let Some((path, _)) = path else {
                return Ok(None);
            };
            if !named.contains(*path) {
                named.push((*path).clone());
            }
        }
        let mut files = Vec::with_capacity(named.len());
        for path in named {
            let file = OpenFile::open(&path)?;
            let metadata = footers.metadata(&path, &file, &scan.table)?;
            let Some((mask, places)) = scan.columns_in(&metadata) else {
                return Ok(None);
            };
            let len = file.len;
            let Some(file) = file.into_file() else {
                return Ok(None);
            };
            files.push(ScanFile {
                path,
                file: PagedFile::new(Arc::new(file), len),
                metadata,
                mask,
                places,
            });
        }
        let streams = spread(&files, streams);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&scan.schema)),
            Partitioning::UnknownPartitioning(streams.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Some(Self {
            scan,
            files: files.into(),
            streams,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

/// The row groups of `files` in order, cut into at most `streams` runs of
/// about the same number of rows (at least one run, empty without rows).
fn spread(files: &[ScanFile], streams: usize) -> Vec<Vec<RowGroup>> {
    let groups: Vec<(RowGroup, u64)> = files
        .iter()
        .enumerate()
        .flat_map(|(f, file)| {
            let metadata = file.metadata.metadata();
            (0..metadata.num_row_groups())
                .map(move |g| ((f, g), metadata.row_group(g).num_rows().max(0) as u64))
        })
        .collect();
    let runs = streams.min(groups.len()).max(1);
    let total: u64 = groups.iter().map(|(_, rows)| rows).sum();
    let mut spread = vec![Vec::new(); runs];
    let mut before = 0;
    for (group, rows) in groups {
        // The run of the group's first row: the runs split the rows evenly.
        let run = (before * runs as u64)
            .checked_div(total)
            .map_or(0, |r| r as usize)
            .min(runs - 1);
        spread[run].push(group);
        before += rows;
    }
    spread.retain(|run| !run.is_empty());
    if spread.is_empty() {
        spread.push(Vec::new());
    }
    spread
}

impl DisplayAs for RowGroupsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let files: Vec<String> = self
            .files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        write!(
            f,
            "RowGroupsExec: files=[{}], streams={}",
            files.join(", "),
            self.streams.len()
        )
    }
}

impl ExecutionPlan for RowGroupsExec {
    fn name(&self) -> &str {
        "RowGroupsExec"
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
                "RowGroupsExec has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let groups = self.streams.get(partition).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "RowGroupsExec has {} streams, not {partition}",
                self.streams.len()
            ))
        })?;
        Ok(Box::pin(RowGroupsStream {
            scan: self.scan.clone(),
            files: Arc::clone(&self.files),
            groups: groups.iter().copied().collect(),
            reader: None,
            decoded: None,
            metrics: BaselineMetrics::new(&self.metrics, partition),
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> DFResult<Arc<Statistics>> {
        Ok(Arc::new(Statistics::new_unknown(&self.scan.schema)))
    }
}

/// Batches decoded at once: a stream decodes this many batches' rows of
/// a row group in one buffer per column, and hands them out as batches
/// that share it. A kept column is then a few buffers of a megabyte
/// rather than hundreds of 64 KB ones, and nothing is copied (a binomial
/// fit over 10M rows peaked 50 MB lower, measured with huge pages).
const BATCHES_PER_DECODE: usize = 16;

/// The batches of one stream's row groups, decoded as they are asked for.
struct RowGroupsStream {
    scan: SmallScan,
    files: Arc<[ScanFile]>,
    groups: VecDeque<RowGroup>,
    /// The reader of the row group under way, and its file.
    reader: Option<(ParquetRecordBatchReader, usize)>,
    /// The rows decoded and not yet handed out, and how many were.
    decoded: Option<(RecordBatch, usize)>,
    metrics: BaselineMetrics,
}

impl RowGroupsStream {
    fn next_batch(&mut self) -> Option<DFResult<RecordBatch>> {
        let _timer = self.metrics.elapsed_compute().timer();
        loop {
            // The batches of a row group are cut every `batch_size` rows
            // from its first, as a reader of that batch size cuts them.
            if let Some((decoded, from)) = &mut self.decoded {
                let rows = (decoded.num_rows() - *from).min(self.scan.batch_size);
                if rows > 0 {
                    let batch = decoded.slice(*from, rows);
                    *from += rows;
                    return Some(Ok(batch));
                }
                self.decoded = None;
            }
            if let Some((reader, f)) = &mut self.reader {
                match reader.next() {
                    Some(Ok(decoded)) => {
                        match self.scan.output(&decoded, &self.files[*f].places) {
                            Ok(output) => self.decoded = Some((output, 0)),
                            Err(e) => return Some(Err(e)),
                        }
                        continue;
                    }
                    Some(Err(e)) => return Some(Err(e.into())),
                    None => self.reader = None,
                }
            }
            let (f, group) = self.groups.pop_front()?;
            match self.open(f, group) {
                Ok(reader) => self.reader = Some((reader, f)),
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The reader of row group `group` of file `f`: its own batches,
    /// whichever stream reads it.
    fn open(&self, f: usize, group: usize) -> DFResult<ParquetRecordBatchReader> {
        let file = &self.files[f];
        Ok(ParquetRecordBatchReaderBuilder::new_with_metadata(
            file.file.clone(),
            file.metadata.clone(),
        )
        .with_projection(file.mask.clone())
        .with_row_groups(vec![group])
        .with_batch_size(self.scan.batch_size.saturating_mul(BATCHES_PER_DECODE))
        .build()?)
    }
}

impl Stream for RowGroupsStream {
    type Item = DFResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.next_batch();
        self.metrics.record_poll(Poll::Ready(next))
    }
}

impl RecordBatchStream for RowGroupsStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.scan.schema)
    }
}
