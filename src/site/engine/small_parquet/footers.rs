//! A small Parquet file opened for a site's scan, and the cache of the
//! files' parsed footers and of the bytes of small settled files (see
//! [`super`]).
//!
//! Why not DataFusion's own `FileMetadataCache` (the runtime's
//! `CacheManager`, which DataFusion's Parquet scan uses, and which serves
//! every scan with the fast path off): it keeps a file's `ParquetMetaData`
//! valid while the file's length and modification time are unchanged, and
//! nothing more. This cache keeps what the site's reader needs besides:
//! the `ArrowReaderMetadata` already converted to the table's schema (a
//! schema conversion per file and query saved), the whole bytes of small
//! files (no `open` or read), and a stricter validity rule (a file written
//! within the file system's clock tick is re-read and its footer bytes
//! compared, so two writes of one length in one tick cannot leave a stale
//! footer). Its footers are few (one per small file of the site), so the
//! overlap with DataFusion's cache is small; files DataFusion scans (large
//! files, filtered scans, the fast path off) use DataFusion's cache only.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result as DFResult;
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use datafusion::parquet::file::metadata::ParquetMetaDataReader;

use super::open_file::{Inode, OpenFile, SMALL_FILE, Source, unreadable};
use super::parts::read_tail;

/// The footers the cache keeps at most, in bytes of parsed metadata (the
/// oldest go first).
const FOOTER_CACHE_BYTES: usize = 64 << 20;

/// The bytes of whole files the cache keeps at most (the oldest go first).
pub(super) const KEPT_FILE_BYTES: usize = 256 << 20;

/// The parsed footers of small files, each with the bytes it was parsed
/// from and the reader's metadata for the table schema last asked for.
///
/// A file whose length and modification time (from the `stat` of the
/// file as opened) are those its footer was read with is not read again,
/// when that modification time was at least [`SETTLED`] before the read:
/// a later write to it then sets a later time. Any other file's footer is
/// read, and parsed anew when its bytes differ from the cached ones.
///
/// The same rule keeps the whole bytes of small files ([`SMALL_FILE`]) for
/// [`FooterCache::open`]: a scan of a settled small file whose length,
/// time and inode hold (a file renamed over it is another) reads it from
/// memory, with one `stat` and no `open` or read
/// (a thousand small clients pay three system calls and a copy per file
/// and query otherwise). At most [`KEPT_FILE_BYTES`] are kept.
#[derive(Debug)]
pub struct FooterCache {
    footers: Mutex<ByPath<Arc<Footer>>>,
    /// Whole small files, each with the stamp and inode it was read with.
    files: Mutex<ByPath<((Stamp, Inode), Bytes)>>,
}

impl Default for FooterCache {
    fn default() -> Self {
        Self {
            footers: Mutex::new(ByPath::new(FOOTER_CACHE_BYTES)),
            files: Mutex::new(ByPath::new(KEPT_FILE_BYTES)),
        }
    }
}

/// A file's length and modification time.
type Stamp = (u64, SystemTime);

/// The stamp of a file of `len` bytes last written at `modified`, when it
/// vouches for the file's bytes read at `read_at` (see [`FooterCache`]).
fn settled_stamp(len: u64, modified: Option<SystemTime>, read_at: SystemTime) -> Option<Stamp> {
    modified
        .filter(|m| read_at.duration_since(*m).is_ok_and(|age| age >= SETTLED))
        .map(|m| (len, m))
}

/// Values by file path, at most `limit` bytes of them (each value's size
/// as given when it was put in); the oldest go first.
#[derive(Debug)]
struct ByPath<V> {
    by_path: HashMap<PathBuf, (V, usize)>,
    order: VecDeque<PathBuf>,
    bytes: usize,
    limit: usize,
}

impl<V> ByPath<V> {
    fn new(limit: usize) -> Self {
        Self {
            by_path: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    fn get(&self, path: &Path) -> Option<&V> {
        self.by_path.get(path).map(|(value, _)| value)
    }

    /// Puts `value` of `size` bytes in for `path`, then drops the oldest
    /// values while there are more than the limit's bytes.
    fn put(&mut self, path: &Path, value: V, size: usize) {
        self.bytes += size;
        if let Some((_, old)) = self.by_path.insert(path.to_path_buf(), (value, size)) {
            self.bytes -= old;
        } else {
            self.order.push_back(path.to_path_buf());
        }
        while self.bytes > self.limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, old)) = self.by_path.remove(&oldest) {
                self.bytes -= old;
            }
        }
    }
}

/// How long before a footer's read its file must have last been written
/// for its length and time to vouch for it: longer than the clock ticks
/// file systems stamp writes with, so that a second write in the tick of
/// the first cannot leave the time as it was.
const SETTLED: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
struct Footer {
    /// The file's last bytes: its footer, its length and the magic.
    tail: Bytes,
    /// The file's length and modification time, when they vouch for it
    /// (see [`FooterCache`]).
    stamp: Option<Stamp>,
    /// The table schema `reader` converts to.
    table: SchemaRef,
    reader: ArrowReaderMetadata,
    size: usize,
}

impl FooterCache {
    /// The file at `path` for a scan: the bytes kept of it when its length,
    /// modification time and inode (its `stat`) are those they were read
    /// with; else the file opened, and its bytes read whole and kept when
    /// it is small and settled.
    pub fn open(&self, path: &Path) -> DFResult<OpenFile> {
        let stat = std::fs::metadata(path).map_err(unreadable(path))?;
        if let Ok(modified) = stat.modified() {
            let inode = (stat.dev(), stat.ino());
            let stamp = ((stat.len(), modified), inode);
            let files = self.files.lock().expect("not poisoned");
            if let Some((_, bytes)) = files.get(path).filter(|(kept, _)| *kept == stamp) {
                return Ok(OpenFile {
                    source: Source::Kept(bytes.clone()),
                    len: stat.len(),
                    modified: Some(modified),
                    inode,
                });
            }
        }
        let file = OpenFile::open(path)?;
        let read_at = SystemTime::now();
        let Some(stamp) = settled_stamp(file.len, file.modified, read_at) else {
            return Ok(file);
        };
        if file.len > SMALL_FILE {
            return Ok(file);
        }
        let bytes = file.read_at(0, file.len as usize)?;
        self.files.lock().expect("not poisoned").put(
            path,
            ((stamp, file.inode), bytes.clone()),
            bytes.len(),
        );
        Ok(OpenFile {
            source: Source::Kept(bytes),
            ..file
        })
    }

    /// The reader's metadata for `table` of `file` (at `path`): the cached
    /// one when the file is unchanged, else parsed from its footer.
    pub(super) fn metadata(
        &self,
        path: &Path,
        file: &OpenFile,
        table: &SchemaRef,
    ) -> DFResult<ArrowReaderMetadata> {
        let cached = self
            .footers
            .lock()
            .expect("not poisoned")
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
        let tail = read_tail(file.len, |start, len| file.read_at(start, len))?;
        let stamp = settled_stamp(file.len, file.modified, read_at);
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
        let size = footer.size;
        self.footers
            .lock()
            .expect("not poisoned")
            .put(path, footer, size);
        Ok(reader)
    }
}

/// A file's footer parsed from `tail` (the footer, its length and the
/// magic), its columns read with `table`'s types where the two differ only
/// in a string or binary view.
fn parse_footer(tail: &Bytes, stamp: Option<Stamp>, table: &SchemaRef) -> DFResult<Footer> {
    let footer = &tail[..tail.len() - 8];
    // The parquet crate panics on some malformed footers (an embedded
    // Arrow schema of an unknown type): an error here.
    let (metadata, plain) = std::panic::catch_unwind(|| -> DFResult<_> {
        let metadata = Arc::new(ParquetMetaDataReader::decode_metadata(footer)?);
        let plain = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())?;
        Ok((metadata, plain))
    })
    .unwrap_or_else(|panic| {
        Err(datafusion::error::DataFusionError::Execution(format!(
            "a malformed Parquet footer: {}",
            crate::error::panic_message(panic.as_ref())
        )))
    })?;
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
