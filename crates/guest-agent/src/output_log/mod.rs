//! One command's output: stdout and stderr bytes in one offset space, in the order they were read.
//!
//! # What is kept
//! Every byte the command writes gets the next offset, so an offset names the same byte for the
//! command's whole life. The log keeps the **head**, bytes `[0, H)` with `H = cap − tail`, and
//! the **tail**, the last `tail` bytes (`--output-cap-bytes`, 1 GiB, and `--output-tail-bytes`,
//! half the cap, by default). While the output is at most `cap` bytes, all of it is kept. Beyond,
//! the middle `[H, total − tail)` is dropped: the tail rolls forward as output arrives. A reader
//! positioned in the dropped range gets a [`Next::Gap`] naming the dropped bytes and continues at
//! the start of the tail, so offsets stay exact on both sides of the gap. A reader that keeps up
//! with the command while it runs is never in the dropped range and receives every byte.
//!
//! # Where it is kept
//! Records `(offset, stream, bytes)` are kept in memory until they exceed the memory limit
//! (`--output-memory-bytes`, 1 MiB by default); then they are appended to the current segment
//! file (`<run-dir>/output/<command_id>.<n>.log`) and memory starts over. A segment file is a
//! sequence of records, each a 13-byte header (offset `u64` LE, stream `u8`, length `u32` LE) and
//! its bytes, with a sparse in-memory index (one entry per [`INDEX_STRIDE`] bytes of output), so a
//! read from any offset scans at most a few records. The head ends a segment exactly at `H`;
//! tail segments hold at most `max(tail / 4, 64 KiB)` bytes each and are deleted once all their
//! bytes are older than the tail. Segments never change once written, so readers read them with
//! positional reads without holding the log's lock (a deleted segment stays readable to a reader
//! that already holds it).
//!
//! Disk per command is at most `cap` plus one tail segment; memory is the memory limit plus one
//! pipe read, plus the index (16 bytes per [`INDEX_STRIDE`] of kept output). When the command
//! ends, output in memory beyond [`KEEP_AFTER_CLOSE`] is spilled, so finished commands hold
//! little memory. If a segment cannot be written (the node's disk is full), the log stops
//! storing and counting at that point and reports `truncated`.
//!
//! Files: this one holds the log and its writer side (append, roll, spill); `segment` the
//! segment files' record format; `reader` the readers.

mod reader;
mod segment;

use std::collections::VecDeque;
use std::path::PathBuf;

use cove_guest_protocol::Stream;
use tracing::warn;

pub use self::reader::{LogReader, Next, SpilledRead};
pub use self::segment::INDEX_STRIDE;
use self::segment::{remove_file, Segment};

/// Limits of one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// Bytes kept in memory before spilling to a segment file.
    pub memory_bytes: usize,
    /// Bytes kept at most: the head (`cap_bytes − tail_bytes`) plus the tail.
    pub cap_bytes: u64,
    /// Bytes at the end of the output always kept (at most `cap_bytes`).
    pub tail_bytes: u64,
}

impl LogLimits {
    fn head(&self) -> u64 {
        self.cap_bytes - self.tail_bytes.min(self.cap_bytes)
    }

    fn tail(&self) -> u64 {
        self.tail_bytes.min(self.cap_bytes)
    }

    /// Bytes of output one tail segment holds at most.
    fn segment_bytes(&self) -> u64 {
        (self.tail() / 4).max(MIN_SEGMENT_BYTES)
    }
}

/// Consecutive bytes of one stream are merged into records of at most this size.
const MERGE_LIMIT: usize = 64 * 1024;
/// Memory accounted per record beyond its bytes.
const RECORD_OVERHEAD: usize = 64;
/// Output kept in memory after the command ended; more is spilled.
pub const KEEP_AFTER_CLOSE: usize = 64 * 1024;
/// Smallest tail segment.
const MIN_SEGMENT_BYTES: u64 = 64 * 1024;

#[derive(Debug)]
pub(crate) struct Record {
    offset: u64,
    stream: Stream,
    data: Vec<u8>,
}

impl Record {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// The output of one command.
#[derive(Debug)]
pub struct OutputLog {
    limits: LogLimits,
    /// Segment files are `<base>.<n>.log`.
    base: PathBuf,
    next_segment: u64,
    /// Bytes produced (kept or dropped): the offset after the last byte.
    total: u64,
    /// Storing failed: nothing more is stored or counted.
    frozen: bool,
    closed: bool,
    /// Records covering `[mem_start, total)` (the first may start before `mem_start` when the
    /// tail rolled past its beginning).
    mem: VecDeque<Record>,
    mem_start: u64,
    mem_bytes: usize,
    /// Oldest first; they cover the kept output below `mem_start`.
    segments: VecDeque<Segment>,
}

/// Bytes of one stream starting at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Offset of the first byte.
    pub offset: u64,
    /// The stream.
    pub stream: Stream,
    /// The bytes (never empty).
    pub data: Vec<u8>,
}

impl OutputLog {
    /// An empty log whose segment files are `<base>.<n>.log`.
    pub fn new(base: PathBuf, limits: LogLimits) -> Self {
        Self {
            limits,
            base,
            next_segment: 0,
            total: 0,
            frozen: false,
            closed: false,
            mem: VecDeque::new(),
            mem_start: 0,
            mem_bytes: 0,
            segments: VecDeque::new(),
        }
    }

    /// Bytes produced so far, kept or dropped (the offset after the last byte).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Output was dropped (the middle of a long output, or storing failed).
    pub fn truncated(&self) -> bool {
        self.frozen || self.gap().is_some()
    }

    /// The dropped range `[from, to)` of a long output, if any.
    pub fn gap(&self) -> Option<(u64, u64)> {
        let (head, tail) = (self.limits.head(), self.limits.tail());
        (self.total > head + tail).then(|| (head, self.total - tail))
    }

    /// Appends bytes read from `stream`; returns how many were taken (all, unless the log is
    /// closed or storing failed).
    pub fn append(&mut self, stream: Stream, data: &[u8]) -> usize {
        if self.closed || self.frozen || data.is_empty() {
            return 0;
        }
        let head = self.limits.head();
        let mut rest = data;
        // The head ends a segment exactly at `head`: records never straddle it.
        if self.total < head && self.total + rest.len() as u64 > head {
            let n = (head - self.total) as usize;
            self.push(stream, &rest[..n]);
            rest = &rest[n..];
        }
        if !rest.is_empty() && self.total >= head && self.mem_start < head && !self.mem.is_empty() {
            self.spill_memory();
            if self.frozen {
                return data.len() - rest.len();
            }
        }
        self.push(stream, rest);
        self.drop_middle();
        if self.mem_bytes > self.limits.memory_bytes {
            self.spill_memory();
        }
        data.len()
    }

    fn push(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match self.mem.back_mut() {
            Some(last) if last.stream == stream && last.data.len() + data.len() <= MERGE_LIMIT => {
                last.data.extend_from_slice(data);
                self.mem_bytes += data.len();
            }
            _ => {
                if self.mem.is_empty() {
                    self.mem_start = self.total;
                }
                self.mem.push_back(Record {
                    offset: self.total,
                    stream,
                    data: data.to_vec(),
                });
                self.mem_bytes += data.len() + RECORD_OVERHEAD;
            }
        }
        self.total += data.len() as u64;
    }

    /// Forgets what fell out of the tail: whole records in memory, whole tail segments.
    fn drop_middle(&mut self) {
        let Some((from, to)) = self.gap() else { return };
        while let Some(first) = self.mem.front() {
            if first.offset < from || first.end() > to {
                break;
            }
            let n = first.data.len();
            self.mem.pop_front();
            self.mem_bytes = self.mem_bytes.saturating_sub(n + RECORD_OVERHEAD);
            self.mem_start = self.mem.front().map_or(self.total, |r| r.offset);
        }
        while let Some(pos) = self
            .segments
            .iter()
            .position(|s| s.start >= from && s.end <= to)
        {
            if let Some(seg) = self.segments.remove(pos) {
                remove_file(&seg.path);
            }
        }
    }

    /// No more output: later appends are dropped, and memory beyond [`KEEP_AFTER_CLOSE`] spills.
    pub fn close(&mut self) {
        self.closed = true;
        if self.mem_bytes > KEEP_AFTER_CLOSE {
            self.spill_memory();
        }
    }

    /// Deletes the segment files (the command is forgotten). Readers that hold one keep reading.
    pub fn remove_spill_file(&mut self) {
        for seg in self.segments.drain(..) {
            remove_file(&seg.path);
        }
    }

    fn spill_memory(&mut self) {
        if self.mem.is_empty() {
            return;
        }
        match self.write_spill() {
            Ok(()) => {
                self.mem.clear();
                self.mem_start = self.total;
                self.mem_bytes = 0;
            }
            Err(e) => {
                // Memory must stay bounded: keep what is in memory and store nothing more.
                warn!(error = %e, path = %self.base.display(), "output spill failed; dropping further output");
                self.frozen = true;
            }
        }
    }
}

#[cfg(test)]
mod tests;
