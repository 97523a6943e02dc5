//! A small Parquet file opened for a site's scan ([`OpenFile`]): the open
//! file or the bytes the footer cache keeps of it, with the `stat` it was
//! opened with; and how many bytes make a file small.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::SystemTime;

use bytes::Bytes;
use datafusion::common::{DataFusionError, Result as DFResult};

/// The largest file a site reads itself, on the scan's own thread: reads
/// from the page cache of at most this many bytes take well under a
/// millisecond.
pub(crate) const SMALL_FILE: u64 = 1 << 20;

/// The device and inode of a file: a file replaced by another (renamed
/// over it) has another, whatever its length and time.
pub(super) type Inode = (u64, u64);

/// A file opened for a scan, with its length and modification time.
#[derive(Debug)]
pub struct OpenFile {
    pub(super) source: Source,
    pub(super) len: u64,
    pub(super) modified: Option<SystemTime>,
    pub(super) inode: Inode,
}

/// Where a scan reads a file's bytes from.
#[derive(Debug)]
pub(super) enum Source {
    /// The open file.
    File(File),
    /// Its whole bytes, as the cache keeps them.
    Kept(Bytes),
}

/// The error of a file that cannot be read.
pub(super) fn unreadable(path: &Path) -> impl Fn(std::io::Error) -> DataFusionError + '_ {
    move |e| DataFusionError::External(format!("cannot read {}: {e}", path.display()).into())
}

impl OpenFile {
    /// The file at `path`, opened, with its length and modification time
    /// (from the `stat` of the open file).
    pub fn open(path: &Path) -> DFResult<Self> {
        let file = File::open(path).map_err(unreadable(path))?;
        let stat = file.metadata().map_err(unreadable(path))?;
        Ok(Self {
            len: stat.len(),
            modified: stat.modified().ok(),
            inode: (stat.dev(), stat.ino()),
            source: Source::File(file),
        })
    }

    /// Where its bytes are read from.
    pub(super) fn source(&self) -> &Source {
        &self.source
    }

    /// The open file; `None` when the cache's bytes stand for it.
    pub(super) fn into_file(self) -> Option<File> {
        match self.source {
            Source::File(file) => Some(file),
            Source::Kept(_) => None,
        }
    }

    /// `len` bytes from `start`.
    pub(super) fn read_at(&self, start: u64, len: usize) -> DFResult<Bytes> {
        match &self.source {
            Source::File(file) => read_at(file, start, len),
            Source::Kept(bytes) => usize::try_from(start)
                .ok()
                .and_then(|start| Some(start..start.checked_add(len)?))
                .filter(|range| range.end <= bytes.len())
                .map(|range| bytes.slice(range))
                .ok_or_else(|| {
                    DataFusionError::External(
                        format!("Parquet error: bytes {start}..+{len} are past the file's end")
                            .into(),
                    )
                }),
        }
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

/// `len` bytes of `file` from `start`.
pub(super) fn read_at(file: &File, start: u64, len: usize) -> DFResult<Bytes> {
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, start)?;
    Ok(Bytes::from(buf))
}
