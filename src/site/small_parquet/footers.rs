//! A small Parquet file opened for a site's scan, and the cache of the
//! files' parsed footers (see [`super`]).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result as DFResult};
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use datafusion::parquet::file::metadata::ParquetMetaDataReader;

use super::parts::read_tail;

/// The footers the cache keeps at most, in bytes of parsed metadata (the
/// oldest go first).
const FOOTER_CACHE_BYTES: usize = 64 << 20;

/// The parsed footers of small files, each with the bytes it was parsed
/// from and the reader's metadata for the table schema last asked for.
///
/// A file whose length and modification time (from the `stat` of the
/// file as opened) are those its footer was read with is not read again,
/// when that modification time was at least [`SETTLED`] before the read:
/// a later write to it then sets a later time. Any other file's footer is
/// read, and parsed anew when its bytes differ from the cached ones.
#[derive(Debug, Default)]
pub struct FooterCache {
    inner: Mutex<Footers>,
}

/// How long before a footer's read its file must have last been written
/// for its length and time to vouch for it: longer than the clock ticks
/// file systems stamp writes with, so that a second write in the tick of
/// the first cannot leave the time as it was.
const SETTLED: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct Footers {
    by_path: HashMap<PathBuf, Arc<Footer>>,
    order: VecDeque<PathBuf>,
    bytes: usize,
}

#[derive(Debug, Clone)]
struct Footer {
    /// The file's last bytes: its footer, its length and the magic.
    tail: Bytes,
    /// The file's length and modification time, when they vouch for it
    /// (see [`FooterCache`]).
    stamp: Option<(u64, SystemTime)>,
    /// The table schema `reader` converts to.
    table: SchemaRef,
    reader: ArrowReaderMetadata,
    size: usize,
}

/// A file opened for a scan, with its length and modification time.
#[derive(Debug)]
pub struct OpenFile {
    pub(super) file: File,
    pub(super) len: u64,
    modified: Option<SystemTime>,
}

impl OpenFile {
    /// The file at `path`, opened, with its length and modification time
    /// (from the `stat` of the open file).
    pub fn open(path: &Path) -> DFResult<Self> {
        let unreadable = |e: std::io::Error| {
            DataFusionError::External(format!("cannot read {}: {e}", path.display()).into())
        };
        let file = File::open(path).map_err(unreadable)?;
        let stat = file.metadata().map_err(unreadable)?;
        Ok(Self {
            len: stat.len(),
            modified: stat.modified().ok(),
            file,
        })
    }

    /// The file's length in bytes.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// When the file was last written, where the file system says.
    pub fn modified(&self) -> Option<SystemTime> {
        self.modified
    }
}

impl FooterCache {
    /// The reader's metadata for `table` of `file` (at `path`): the cached
    /// one when the file is unchanged, else parsed from its footer.
    pub(super) fn metadata(
        &self,
        path: &Path,
        file: &OpenFile,
        table: &SchemaRef,
    ) -> DFResult<ArrowReaderMetadata> {
        let cached = self
            .inner
            .lock()
            .expect("not poisoned")
            .by_path
            .get(path)
            .cloned()
            .filter(|f| Arc::ptr_eq(&f.table, table) || f.table == *table);
        if let Some(footer) = &cached
            && footer.stamp.is_some()
            && footer.stamp == file.modified.map(|m| (file.len, m))
        {
            return Ok(footer.reader.clone());
        }
        let read_at = SystemTime::now();
        let tail = read_tail(&file.file, file.len)?;
        let stamp = file
            .modified
            .filter(|m| read_at.duration_since(*m).is_ok_and(|age| age >= SETTLED))
            .map(|m| (file.len, m));
        let footer = match cached {
            Some(footer) if footer.tail == tail => {
                if footer.stamp == stamp {
                    return Ok(footer.reader.clone());
                }
                Footer {
                    stamp,
                    ..footer.as_ref().clone()
                }
            }
            _ => parse_footer(&tail, stamp, table)?,
        };
        let footer = Arc::new(footer);
        let reader = footer.reader.clone();
        let mut footers = self.inner.lock().expect("not poisoned");
        footers.bytes += footer.size;
        if let Some(old) = footers.by_path.insert(path.to_path_buf(), footer) {
            footers.bytes -= old.size;
        } else {
            footers.order.push_back(path.to_path_buf());
        }
        while footers.bytes > FOOTER_CACHE_BYTES {
            let Some(oldest) = footers.order.pop_front() else {
                break;
            };
            if let Some(old) = footers.by_path.remove(&oldest) {
                footers.bytes -= old.size;
            }
        }
        Ok(reader)
    }
}

/// A file's footer parsed from `tail` (the footer, its length and the
/// magic), its columns read with `table`'s types where the two differ only
/// in a string or binary view.
fn parse_footer(
    tail: &Bytes,
    stamp: Option<(u64, SystemTime)>,
    table: &SchemaRef,
) -> DFResult<Footer> {
    let footer = &tail[..tail.len() - 8];
    let metadata = Arc::new(ParquetMetaDataReader::decode_metadata(footer)?);
    let plain = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())?;
    let hinted: Vec<Field> = plain
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let wanted = table.field_with_name(f.name()).ok().map(|t| t.data_type());
            match wanted {
                Some(t) if is_view_of(t, f.data_type()) => {
                    f.as_ref().clone().with_data_type(t.clone())
                }
                _ => f.as_ref().clone(),
            }
        })
        .collect();
    let hint = Arc::new(Schema::new_with_metadata(
        hinted,
        plain.schema().metadata().clone(),
    ));
    let reader = if hint == *plain.schema() {
        plain
    } else {
        ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new().with_schema(hint))?
    };
    Ok(Footer {
        tail: tail.clone(),
        stamp,
        table: Arc::clone(table),
        size: reader.metadata().memory_size() + tail.len(),
        reader,
    })
}

/// Whether `view` is the view type DataFusion reads `stored` as.
fn is_view_of(view: &DataType, stored: &DataType) -> bool {
    matches!(
        (view, stored),
        (DataType::Utf8View, DataType::Utf8 | DataType::LargeUtf8)
            | (
                DataType::BinaryView,
                DataType::Binary | DataType::LargeBinary
            )
    )
}
