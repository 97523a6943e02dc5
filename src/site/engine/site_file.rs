//! A site's one file ([`SiteFile`]): where it is, how a scan names it,
//! its metadata as it is now; and a template's scan bound to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use datafusion::common::{DataFusionError, Statistics};
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::object_store::ObjectMeta;
use datafusion::object_store::path::Path as StorePath;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::Result;

/// A site's one file: where it is, and how its scans name it.
#[derive(Debug, Clone)]
pub struct SiteFile {
    pub(crate) path: PathBuf,
    location: StorePath,
}

impl SiteFile {
    /// The file at `path`, named as a listing of it names it.
    pub fn new(path: &Path) -> Result<Self> {
        let url = ListingTableUrl::parse(path.to_string_lossy())?;
        Ok(Self {
            path: path.to_path_buf(),
            location: url.prefix().clone(),
        })
    }

    /// How a scan of the file names it.
    pub(crate) fn location(&self) -> &StorePath {
        &self.location
    }

    /// The file's metadata as it is now: its size and modification time
    /// key every cache of its listing and footer.
    pub(crate) fn stat(&self) -> Result<ObjectMeta> {
        let unreadable = |e: std::io::Error| {
            DataFusionError::External(format!("cannot read {}: {e}", self.path.display()).into())
        };
        let meta = std::fs::metadata(&self.path).map_err(unreadable)?;
        Ok(self.meta(meta.len(), Some(meta.modified().map_err(unreadable)?)))
    }

    /// The file's metadata from its length and modification time.
    pub(crate) fn meta(&self, size: u64, modified: Option<SystemTime>) -> ObjectMeta {
        ObjectMeta {
            location: self.location.clone(),
            last_modified: modified.unwrap_or(SystemTime::UNIX_EPOCH).into(),
            size,
            e_tag: None,
            version: None,
        }
    }
}

/// A template's file scan bound to a site's file as `meta` describes it
/// (a template's scan reads exactly one file).
pub fn bound_scan(config: &FileScanConfig, meta: &ObjectMeta) -> Arc<dyn ExecutionPlan> {
    let files = config.file_groups.iter().flat_map(|g| g.iter());
    let bound: Vec<PartitionedFile> = files
        .map(|template_file| {
            let mut bound = template_file.clone();
            bound.object_meta = meta.clone();
            bound.statistics = None;
            bound.metadata_size_hint = None;
            bound
        })
        .collect();
    let schema = config.file_schema().clone();
    let config = FileScanConfigBuilder::from(config.clone())
        .with_file_groups(vec![FileGroup::new(bound)])
        .with_statistics(Statistics::new_unknown(&schema))
        .build();
    DataSourceExec::from_data_source(config)
}
