//! Segment files of a spilled log: a sequence of records, each a 13-byte header (offset `u64`
//! LE, stream `u8`, length `u32` LE) and its bytes, with a sparse in-memory index; and how the
//! log appends its memory to the current segment.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cove_guest_protocol::Stream;
use tracing::warn;

use super::OutputLog;

/// Output bytes between two index entries of a segment file.
pub const INDEX_STRIDE: u64 = 256 * 1024;
/// Bytes of a spill record's header.
pub(super) const HEADER_LEN: u64 = 13;

/// A record start in a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// Output offset of the record's first byte.
    pub(super) offset: u64,
    /// File position of its header.
    pub(super) pos: u64,
}

/// One segment file: records covering output `[start, end)`.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) path: PathBuf,
    pub(super) file: Arc<File>,
    pub(super) start: u64,
    pub(super) end: u64,
    /// File length in bytes.
    pub(super) len: u64,
    pub(super) index: Vec<Position>,
}

pub(super) fn stream_byte(s: Stream) -> u8 {
    match s {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    }
}

pub(super) fn byte_stream(b: u8) -> io::Result<Stream> {
    match b {
        1 => Ok(Stream::Stdout),
        2 => Ok(Stream::Stderr),
        _ => Err(corrupt()),
    }
}

pub(super) fn corrupt() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "output spill file is corrupt")
}

impl OutputLog {
    /// The segment that records starting at `first` go to: the last one, unless it is full,
    /// does not end at `first`, or lies on the other side of the head's end.
    fn current_segment(&mut self, first: u64) -> io::Result<&mut Segment> {
        let head = self.limits.head();
        let fresh = match self.segments.back() {
            None => true,
            Some(s) => {
                s.end != first
                    || (s.start < head) != (first < head)
                    || (first >= head && s.len >= self.limits.segment_bytes())
            }
        };
        if fresh {
            let path = PathBuf::from(format!("{}.{}.log", self.base.display(), self.next_segment));
            self.next_segment += 1;
            let file = open_spill_file(&path)?;
            self.segments.push_back(Segment {
                path,
                file: Arc::new(file),
                start: first,
                end: first,
                len: 0,
                index: Vec::new(),
            });
        }
        self.segments
            .back_mut()
            .ok_or_else(|| io::Error::other("no segment"))
    }

    pub(super) fn write_spill(&mut self) -> io::Result<()> {
        let records = std::mem::take(&mut self.mem);
        let result = (|| {
            let bytes: usize = records
                .iter()
                .map(|r| r.data.len() + HEADER_LEN as usize)
                .sum();
            let mut buf = Vec::with_capacity(bytes);
            let first = records.front().map_or(self.total, |r| r.offset);
            let seg = self.current_segment(first)?;
            let mut new_index = Vec::new();
            let mut last_indexed = seg.index.last().map(|p| p.offset);
            let mut pos = seg.len;
            let mut end = seg.end;
            for rec in &records {
                if last_indexed.is_none_or(|o| rec.offset - o >= INDEX_STRIDE) {
                    new_index.push(Position {
                        offset: rec.offset,
                        pos,
                    });
                    last_indexed = Some(rec.offset);
                }
                buf.extend_from_slice(&rec.offset.to_le_bytes());
                buf.push(stream_byte(rec.stream));
                buf.extend_from_slice(&(rec.data.len() as u32).to_le_bytes());
                buf.extend_from_slice(&rec.data);
                pos += HEADER_LEN + rec.data.len() as u64;
                end = rec.end();
            }
            seg.file.write_all_at(&buf, seg.len)?;
            seg.len = pos;
            seg.end = end;
            seg.index.extend(new_index);
            Ok(())
        })();
        if result.is_err() {
            self.mem = records;
        }
        result
    }
}

pub(super) fn remove_file(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            warn!(error = %e, "removing an output spill file failed");
        }
    }
}

fn open_spill_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}
