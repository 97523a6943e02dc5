//! The parts of a small Parquet file a site reads: its footer, then the
//! column chunks of the columns a scan needs (see [`super`]).

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use datafusion::common::{DataFusionError, Result as DFResult};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
use datafusion::parquet::errors::{ParquetError, Result as ParquetResult};
use datafusion::parquet::file::reader::{ChunkReader, Length};

use super::open_file::{OpenFile, Source, read_at};

/// How many of a file's last bytes are read first, in the hope that the
/// footer is among them (one read instead of two).
const FOOTER_GUESS: u64 = 16 << 10;

/// A Parquet file's footer with its length and magic: the last bytes of a
/// file of `len` bytes, read with `read_at` (offset, length).
pub(super) fn read_tail(
    len: u64,
    read_at: impl Fn(u64, usize) -> DFResult<Bytes>,
) -> DFResult<Bytes> {
    let not_parquet =
        |what: &str| DataFusionError::External(format!("Parquet error: {what}").into());
    if len < 12 {
        return Err(not_parquet("the file is too short to be a Parquet file"));
    }
    let guess = len.min(FOOTER_GUESS);
    let last = read_at(len - guess, guess as usize)?;
    let n = last.len();
    if &last[n - 4..] != b"PAR1" {
        return Err(not_parquet("the file does not end in a Parquet footer"));
    }
    let footer = u32::from_le_bytes(last[n - 8..n - 4].try_into().expect("four bytes")) as u64;
    let tail = footer + 8;
    if tail > len - 4 {
        return Err(not_parquet("the footer's length is past the file's start"));
    }
    if tail <= guess {
        Ok(last.slice((guess - tail) as usize..))
    } else {
        read_at(len - tail, tail as usize)
    }
}

/// Ranges of a file read apart, when the gap between them is wider than
/// this; nearer ones are read as one.
const MAX_GAP: u64 = 4 << 10;

/// The parts of a file a scan reads: the column chunks of its columns, each
/// read once; anything else asked of it is an error.
pub(super) struct ReadParts {
    len: u64,
    /// (offset, bytes), by offset, apart.
    parts: Vec<(u64, Bytes)>,
}

impl ReadParts {
    /// The byte ranges `ranges` of `file`, near ones read as one; all of
    /// it, without a read, when the cache keeps its bytes.
    pub(super) fn read(file: &OpenFile, mut ranges: Vec<(u64, u64)>) -> DFResult<Self> {
        let len = file.len;
        let file = match file.source() {
            Source::Kept(bytes) => {
                return Ok(Self {
                    len,
                    parts: vec![(0, bytes.clone())],
                });
            }
            Source::File(file) => file,
        };
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some((_, last_end)) if start <= *last_end + MAX_GAP => {
                    *last_end = (*last_end).max(end);
                }
                _ => merged.push((start, end)),
            }
        }
        let parts = merged
            .into_iter()
            .map(|(start, end)| Ok((start, read_at(file, start, (end - start) as usize)?)))
            .collect::<DFResult<_>>()?;
        Ok(Self { len, parts })
    }

    /// The part holding `length` bytes from `start`, and where in it they begin.
    fn part(&self, start: u64, length: usize) -> ParquetResult<(&Bytes, usize)> {
        let i = self.parts.partition_point(|(s, _)| *s <= start);
        if let Some((s, bytes)) = i.checked_sub(1).map(|i| &self.parts[i]) {
            let from = (start - s) as usize;
            if from + length <= bytes.len() {
                return Ok((bytes, from));
            }
        }
        Err(ParquetError::General(format!(
            "bytes {start}..{} of the file are in no column chunk read",
            start + length as u64
        )))
    }
}

impl Length for ReadParts {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for ReadParts {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> ParquetResult<Self::T> {
        let (bytes, from) = self.part(start, 0)?;
        Ok(bytes.slice(from..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> ParquetResult<Bytes> {
        let (bytes, from) = self.part(start, length)?;
        Ok(bytes.slice(from..from + length))
    }
}

/// An open file read with positioned reads, never through the file's
/// shared offset, so that several streams may read it at once; each read
/// is of what the reader asks for (a page), not of whole column chunks.
#[derive(Debug, Clone)]
pub(super) struct PagedFile {
    file: Arc<File>,
    len: u64,
}

impl PagedFile {
    /// `file`, of `len` bytes.
    pub(super) fn new(file: Arc<File>, len: u64) -> Self {
        Self { file, len }
    }
}

/// Sequential reads of a file from an offset of their own.
pub(super) struct ReadFrom {
    file: Arc<File>,
    offset: u64,
}

impl Read for ReadFrom {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

impl Length for PagedFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for PagedFile {
    type T = BufReader<ReadFrom>;

    fn get_read(&self, start: u64) -> ParquetResult<Self::T> {
        Ok(BufReader::new(ReadFrom {
            file: Arc::clone(&self.file),
            offset: start,
        }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> ParquetResult<Bytes> {
        let mut bytes = Vec::with_capacity(length);
        let from = ReadFrom {
            file: Arc::clone(&self.file),
            offset: start,
        };
        from.take(length as u64).read_to_end(&mut bytes)?;
        if bytes.len() != length {
            return Err(ParquetError::EOF(format!(
                "expected {length} bytes at offset {start}, read only {}",
                bytes.len()
            )));
        }
        Ok(Bytes::from(bytes))
    }
}

/// The byte ranges of the column chunks `mask` reads, checked against the
/// file's length (a footer may say anything).
pub(super) fn chunk_ranges(
    metadata: &ArrowReaderMetadata,
    mask: &ProjectionMask,
    len: u64,
) -> DFResult<Vec<(u64, u64)>> {
    let mut ranges = Vec::new();
    for row_group in metadata.metadata().row_groups() {
        for (leaf, column) in row_group.columns().iter().enumerate() {
            if !mask.leaf_included(leaf) {
                continue;
            }
            let start = column
                .dictionary_page_offset()
                .unwrap_or_else(|| column.data_page_offset());
            let size = column.compressed_size();
            let end = start.checked_add(size);
            match (
                u64::try_from(start),
                end.and_then(|e| u64::try_from(e).ok()),
            ) {
                (Ok(start), Some(end)) if start <= end && end <= len => ranges.push((start, end)),
                _ => {
                    return Err(DataFusionError::External(
                        "Parquet error: a column chunk lies outside the file".into(),
                    ));
                }
            }
        }
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_no_parquet_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in [
            ("short", &b"PAR1"[..]),
            ("text", &b"not a parquet file at all"[..]),
            // A footer length past the file's start.
            (
                "long footer",
                &b"PAR1\x00\x00\x00\x00\xff\xff\x00\x00PAR1"[..],
            ),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let file = File::open(&path).unwrap();
            let e = read_tail(bytes.len() as u64, |start, n| read_at(&file, start, n)).unwrap_err();
            assert!(e.to_string().contains("Parquet error"), "{name}: {e}");
        }
    }

    #[test]
    fn parts_not_read_are_never_made_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(
            &path,
            (0..=255u8).cycle().take(100_000).collect::<Vec<u8>>(),
        )
        .unwrap();
        let file = OpenFile::open(&path).unwrap();
        // Two near ranges read as one, a far one apart.
        let parts = ReadParts::read(&file, vec![(90_000, 90_010), (10, 20), (30, 40)]).unwrap();
        assert_eq!(parts.parts.len(), 2);
        assert_eq!(&parts.get_bytes(35, 3).unwrap()[..], &[35, 36, 37]);
        assert_eq!(
            parts.get_bytes(90_000, 2).unwrap()[..],
            [(90_000 % 256) as u8, (90_001 % 256) as u8]
        );
        for (start, length) in [(5, 10), (35, 10), (50, 1), (89_999, 2), (95_000, 1)] {
            assert!(parts.get_bytes(start, length).is_err(), "{start}+{length}");
        }
    }
}
