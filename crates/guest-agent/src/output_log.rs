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

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cove_guest_protocol::Stream;
use tracing::warn;

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
/// Output bytes between two index entries of a segment file.
pub const INDEX_STRIDE: u64 = 256 * 1024;
/// Bytes of a spill record's header.
const HEADER_LEN: u64 = 13;
/// Output kept in memory after the command ended; more is spilled.
pub const KEEP_AFTER_CLOSE: usize = 64 * 1024;
/// Smallest tail segment.
const MIN_SEGMENT_BYTES: u64 = 64 * 1024;

#[derive(Debug)]
struct Record {
    offset: u64,
    stream: Stream,
    data: Vec<u8>,
}

impl Record {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// A record start in a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    /// Output offset of the record's first byte.
    offset: u64,
    /// File position of its header.
    pos: u64,
}

/// One segment file: records covering output `[start, end)`.
#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: Arc<File>,
    start: u64,
    end: u64,
    /// File length in bytes.
    len: u64,
    index: Vec<Position>,
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

fn stream_byte(s: Stream) -> u8 {
    match s {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    }
}

fn byte_stream(b: u8) -> io::Result<Stream> {
    match b {
        1 => Ok(Stream::Stdout),
        2 => Ok(Stream::Stderr),
        _ => Err(corrupt()),
    }
}

fn corrupt() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "output spill file is corrupt")
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

    fn write_spill(&mut self) -> io::Result<()> {
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

fn remove_file(path: &Path) {
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

/// What a reader does next.
#[derive(Debug)]
pub enum Next {
    /// Bytes from memory.
    Chunk(Chunk),
    /// The reader is at the end of the kept output.
    CaughtUp,
    /// The next bytes are in a segment file: read them with [`LogReader::read_spilled`]
    /// (blocking I/O, without the log's lock).
    Spilled(SpilledRead),
    /// Bytes `[offset, offset + len)` were dropped; the reader moved past them.
    Gap {
        /// The reader's position before the gap.
        offset: u64,
        /// Dropped bytes skipped.
        len: u64,
    },
}

/// A pending read of a segment file.
#[derive(Debug)]
pub struct SpilledRead {
    file: Arc<File>,
    segment: u64,
    start: Position,
    end: u64,
}

/// One reader's position in a log.
#[derive(Debug)]
pub struct LogReader {
    offset: u64,
    /// A record start at or before `offset` in the segment starting at `.0`.
    cursor: Option<(u64, Position)>,
}

impl LogReader {
    /// A reader at `offset`, clamped to the output produced so far.
    pub fn new(log: &OutputLog, offset: u64) -> Self {
        Self {
            offset: offset.min(log.total),
            cursor: None,
        }
    }

    /// The offset of the next byte this reader returns.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Up to `max` bytes of one stream from memory, where to read a file, or a gap.
    pub fn next(&mut self, log: &OutputLog, max: usize) -> Next {
        if let Some((from, to)) = log.gap() {
            if self.offset >= from && self.offset < to {
                let offset = self.offset;
                self.offset = to;
                return Next::Gap {
                    offset,
                    len: to - offset,
                };
            }
        }
        if self.offset >= log.total {
            return Next::CaughtUp;
        }
        if self.offset >= log.mem_start && !log.mem.is_empty() {
            return Next::Chunk(self.read_memory(log, max));
        }
        let Some(seg) = log
            .segments
            .iter()
            .find(|s| s.start <= self.offset && self.offset < s.end)
        else {
            return Next::CaughtUp;
        };
        let i = seg.index.partition_point(|p| p.offset <= self.offset);
        let mut start = match i {
            0 => Position {
                offset: seg.start,
                pos: 0,
            },
            _ => seg.index[i - 1],
        };
        if let Some((s, c)) = self.cursor {
            if s == seg.start && c.offset <= self.offset && c.offset > start.offset {
                start = c;
            }
        }
        Next::Spilled(SpilledRead {
            file: seg.file.clone(),
            segment: seg.start,
            start,
            end: seg.end,
        })
    }

    fn read_memory(&mut self, log: &OutputLog, max: usize) -> Chunk {
        let i = log.mem.partition_point(|r| r.end() <= self.offset);
        let start = self.offset;
        let mut data = Vec::new();
        let mut stream = None;
        for rec in log.mem.range(i..) {
            if data.len() >= max || stream.is_some_and(|s| s != rec.stream) {
                break;
            }
            stream = Some(rec.stream);
            let from = (self.offset - rec.offset) as usize;
            let n = (rec.data.len() - from).min(max - data.len());
            data.extend_from_slice(&rec.data[from..from + n]);
            self.offset += n as u64;
        }
        Chunk {
            offset: start,
            stream: stream.unwrap_or(Stream::Stdout),
            data,
        }
    }

    /// Reads up to `max` bytes of one stream from a segment file (blocking).
    pub fn read_spilled(&mut self, read: SpilledRead, max: usize) -> io::Result<Chunk> {
        let SpilledRead {
            file,
            segment,
            start,
            end,
        } = read;
        let first = self.offset;
        let mut data = Vec::new();
        let mut stream = None;
        let mut rec = start;
        while rec.offset < end && data.len() < max {
            let mut header = [0u8; HEADER_LEN as usize];
            file.read_exact_at(&mut header, rec.pos)?;
            let offset = u64::from_le_bytes(header[..8].try_into().map_err(|_| corrupt())?);
            let rstream = byte_stream(header[8])?;
            let len = u32::from_le_bytes(header[9..].try_into().map_err(|_| corrupt())?) as u64;
            if offset != rec.offset || len == 0 {
                return Err(corrupt());
            }
            let rend = offset + len;
            if rend > self.offset {
                if stream.is_some_and(|s| s != rstream) {
                    break;
                }
                stream = Some(rstream);
                let from = self.offset - offset;
                let n = (len - from).min((max - data.len()) as u64) as usize;
                let at = data.len();
                data.resize(at + n, 0);
                file.read_exact_at(&mut data[at..], rec.pos + HEADER_LEN + from)?;
                self.offset += n as u64;
                self.cursor = Some((segment, rec));
                if self.offset < rend {
                    break;
                }
            }
            rec = Position {
                offset: rend,
                pos: rec.pos + HEADER_LEN + len,
            };
            self.cursor = Some((segment, rec));
        }
        match stream {
            Some(stream) if !data.is_empty() => Ok(Chunk {
                offset: first,
                stream,
                data,
            }),
            _ => Err(corrupt()),
        }
    }

    /// Reads the next chunk or gap, doing file I/O inline (for tests and blocking callers):
    /// `Ok(None)` when caught up, a gap as `Ok(Some(Err((offset, len))))`.
    pub fn next_blocking(
        &mut self,
        log: &OutputLog,
        max: usize,
    ) -> io::Result<Option<Result<Chunk, (u64, u64)>>> {
        match self.next(log, max) {
            Next::Chunk(c) => Ok(Some(Ok(c))),
            Next::CaughtUp => Ok(None),
            Next::Gap { offset, len } => Ok(Some(Err((offset, len)))),
            Next::Spilled(s) => self.read_spilled(s, max).map(|c| Some(Ok(c))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memory_bytes: usize, cap_bytes: u64, tail_bytes: u64) -> LogLimits {
        LogLimits {
            memory_bytes,
            cap_bytes,
            tail_bytes,
        }
    }

    fn log(dir: &Path, memory_bytes: usize, cap_bytes: u64) -> OutputLog {
        OutputLog::new(
            dir.join("c"),
            limits(memory_bytes, cap_bytes, cap_bytes / 2),
        )
    }

    fn files(dir: &Path) -> usize {
        std::fs::read_dir(dir).expect("dir").count()
    }

    /// Writes a deterministic mix of stdout and stderr chunks; returns the bytes written.
    fn fill(log: &mut OutputLog, n: usize) -> Vec<(Stream, u8)> {
        let mut expected = Vec::new();
        for i in 0..n {
            let stream = if i % 3 == 0 {
                Stream::Stderr
            } else {
                Stream::Stdout
            };
            let len = 1 + (i * 37) % 700;
            let data: Vec<u8> = (0..len).map(|j| ((i * 31 + j) % 256) as u8).collect();
            let taken = log.append(stream, &data);
            assert_eq!(taken, len);
            expected.extend(data.iter().map(|&b| (stream, b)));
        }
        expected
    }

    /// Bytes with their stream, and the `(offset, len)` gaps met.
    type ReadBack = (Vec<(Stream, u8)>, Vec<(u64, u64)>);

    /// Reads from `offset` to the end; returns the bytes and the gaps met.
    fn read_all(log: &OutputLog, offset: u64, max: usize) -> ReadBack {
        let mut r = LogReader::new(log, offset);
        let mut out = Vec::new();
        let mut gaps = Vec::new();
        let mut at = offset.min(log.total());
        while let Some(c) = r.next_blocking(log, max).expect("read") {
            match c {
                Ok(c) => {
                    assert_eq!(c.offset, at);
                    assert!(!c.data.is_empty() && c.data.len() <= max);
                    at += c.data.len() as u64;
                    out.extend(c.data.iter().map(|&b| (c.stream, b)));
                }
                Err((offset, len)) => {
                    assert_eq!(offset, at);
                    at += len;
                    gaps.push((offset, len));
                }
            }
        }
        assert_eq!(at, log.total());
        (out, gaps)
    }

    #[test]
    fn memory_only_reads_from_every_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 1 << 20, 1 << 30);
        let expected = fill(&mut l, 60);
        assert_eq!(files(dir.path()), 0);
        assert_eq!(l.total(), expected.len() as u64);
        for off in (0..expected.len()).step_by(97) {
            assert_eq!(read_all(&l, off as u64, 1000).0, expected[off..]);
        }
    }

    #[test]
    fn spilled_reads_are_exact_from_every_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 2000, 1 << 30);
        let expected = fill(&mut l, 400);
        assert!(files(dir.path()) > 0);
        assert!(l.mem_start > 0 && l.mem_start < l.total());
        for off in (0..expected.len())
            .step_by(1013)
            .chain([expected.len() - 1])
        {
            assert_eq!(
                read_all(&l, off as u64, 777).0,
                expected[off..],
                "offset {off}"
            );
        }
        assert_eq!(read_all(&l, 0, 1 << 20).0, expected);
        // Past the end: starts at the end.
        assert!(read_all(&l, u64::MAX, 100).0.is_empty());
    }

    #[test]
    fn index_is_sparse_and_large_logs_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 4096, 1 << 30);
        let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        for _ in 0..64 {
            l.append(Stream::Stdout, &chunk);
        }
        let indexed: usize = l.segments.iter().map(|s| s.index.len()).sum();
        assert!(indexed <= (l.total() / INDEX_STRIDE + 2) as usize);
        let off = 3 * 65536 + 12345;
        let mut r = LogReader::new(&l, off);
        let c = r
            .next_blocking(&l, 10)
            .expect("read")
            .expect("chunk")
            .expect("bytes");
        assert_eq!(c.offset, off);
        assert_eq!(c.data, chunk[12345..12355]);
    }

    #[test]
    fn a_long_output_keeps_head_and_tail_with_exact_offsets() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Head 600 bytes, tail 400 bytes, 100 bytes in memory: segments of 64 KiB at least,
        // so use a larger tail to see segments roll.
        let mut l = OutputLog::new(dir.path().join("c"), limits(100, 1000, 400));
        let expected = fill(&mut l, 50);
        let total = expected.len() as u64;
        assert_eq!(l.total(), total);
        assert!(total > 1000);
        assert!(l.truncated());
        assert_eq!(l.gap(), Some((600, total - 400)));
        let (got, gaps) = read_all(&l, 0, 64);
        assert_eq!(gaps, vec![(600, total - 1000)]);
        let mut want = expected[..600].to_vec();
        want.extend_from_slice(&expected[(total - 400) as usize..]);
        assert_eq!(got, want);
        // From inside the gap: the gap's rest, then the tail.
        let (got, gaps) = read_all(&l, 700, 1 << 20);
        assert_eq!(gaps, vec![(700, total - 400 - 700)]);
        assert_eq!(got, expected[(total - 400) as usize..]);
        // From inside the tail: exact.
        let (got, gaps) = read_all(&l, total - 10, 3);
        assert!(gaps.is_empty());
        assert_eq!(got, expected[(total - 10) as usize..]);
    }

    #[test]
    fn tail_segments_roll_and_disk_stays_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tail = 256 * 1024;
        let mut l = OutputLog::new(dir.path().join("c"), limits(16 * 1024, 512 * 1024, tail));
        let chunk: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let mut all = Vec::new();
        for i in 0..500u32 {
            let mut c = chunk.clone();
            c[0] = (i % 256) as u8;
            l.append(Stream::Stdout, &c);
            all.extend_from_slice(&c);
        }
        let total = all.len() as u64;
        let on_disk: u64 = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").metadata().expect("meta").len())
            .sum();
        assert!(
            on_disk <= 512 * 1024 + l.limits.segment_bytes() + 64 * 1024,
            "{on_disk} bytes on disk"
        );
        let (got, gaps) = read_all(&l, 0, 100_000);
        assert_eq!(gaps, vec![(256 * 1024, total - 512 * 1024)]);
        let got: Vec<u8> = got.into_iter().map(|(_, b)| b).collect();
        let mut want = all[..256 * 1024].to_vec();
        want.extend_from_slice(&all[(total - tail) as usize..]);
        assert_eq!(got, want);
        l.close();
        l.remove_spill_file();
        assert_eq!(files(dir.path()), 0);
    }

    #[test]
    fn a_reader_that_keeps_up_gets_every_byte() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = OutputLog::new(dir.path().join("c"), limits(100, 1000, 400));
        let mut r = LogReader::new(&l, 0);
        let mut got = Vec::new();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let data = vec![(i % 256) as u8; 37];
            l.append(Stream::Stdout, &data);
            want.extend_from_slice(&data);
            while let Some(c) = r.next_blocking(&l, 1000).expect("read") {
                got.extend_from_slice(&c.expect("no gap").data);
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn close_spills_large_memory_and_stops_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 1 << 20, 1 << 30);
        l.append(Stream::Stdout, &vec![7u8; KEEP_AFTER_CLOSE + 1]);
        l.close();
        assert_eq!(l.mem_bytes, 0);
        assert_eq!(l.append(Stream::Stdout, b"late"), 0);
        assert_eq!(read_all(&l, 0, 1 << 20).0.len(), KEEP_AFTER_CLOSE + 1);
        l.remove_spill_file();
        assert_eq!(files(dir.path()), 0);
    }

    #[test]
    fn failed_spill_stops_storing_but_keeps_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = OutputLog::new(dir.path().join("missing/c"), limits(10, 1 << 30, 1 << 29));
        assert_eq!(l.append(Stream::Stdout, b"0123456789abcdef"), 16);
        assert!(l.truncated());
        assert_eq!(l.append(Stream::Stdout, b"more"), 0);
        assert_eq!(read_all(&l, 0, 100).0.len(), 16);
    }
}
