//! One command's output: stdout and stderr bytes in one offset space, in the order they were read.
//!
//! Records `(offset, stream, bytes)` are kept in memory until they exceed the memory limit
//! (`--output-memory-bytes`, 1 MiB by default); then every record in memory is appended to a spill
//! file (`<run-dir>/output/<command_id>.log`) and memory starts over. The spill file is a sequence
//! of records, each a 13-byte header (offset `u64` LE, stream `u8`, length `u32` LE) and its bytes,
//! with a sparse in-memory index (one entry per [`INDEX_STRIDE`] bytes of output), so a read from
//! any offset scans at most a few records. The spilled part never changes, so readers read it
//! with positional reads without holding the log's lock.
//!
//! At most `--output-cap-bytes` (1 GiB by default) are kept; later bytes are dropped for every
//! reader, including attached ones, and the log reports `truncated`. If the spill file cannot be
//! written (the node's disk is full), the log stops storing at that point and reports `truncated`.
//!
//! Memory per command is bounded by the memory limit plus one pipe read, plus the index (16 bytes
//! per [`INDEX_STRIDE`] of output, 64 KiB for a full 1 GiB log). When the command ends, output in
//! memory beyond [`KEEP_AFTER_CLOSE`] is spilled, so finished commands hold little memory.

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
    /// Bytes kept in memory before spilling to the file.
    pub memory_bytes: usize,
    /// Bytes kept at most.
    pub cap_bytes: u64,
}

/// Consecutive bytes of one stream are merged into records of at most this size.
const MERGE_LIMIT: usize = 64 * 1024;
/// Memory accounted per record beyond its bytes.
const RECORD_OVERHEAD: usize = 64;
/// Output bytes between two index entries of the spill file.
pub const INDEX_STRIDE: u64 = 256 * 1024;
/// Bytes of a spill record's header.
const HEADER_LEN: u64 = 13;
/// Output kept in memory after the command ended; more is spilled.
pub const KEEP_AFTER_CLOSE: usize = 64 * 1024;

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

/// A record start in the spill file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    /// Output offset of the record's first byte.
    offset: u64,
    /// File position of its header.
    pos: u64,
}

#[derive(Debug)]
struct Spill {
    file: Arc<File>,
    len: u64,
    index: Vec<Position>,
}

/// The output of one command.
#[derive(Debug)]
pub struct OutputLog {
    limits: LogLimits,
    spill_path: PathBuf,
    total: u64,
    truncated: bool,
    closed: bool,
    /// Records covering `[mem_start, total)`; `[0, mem_start)` is in the spill file.
    mem: VecDeque<Record>,
    mem_start: u64,
    mem_bytes: usize,
    spill: Option<Spill>,
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
    /// An empty log that spills to `spill_path` when needed.
    pub fn new(spill_path: PathBuf, limits: LogLimits) -> Self {
        Self {
            limits,
            spill_path,
            total: 0,
            truncated: false,
            closed: false,
            mem: VecDeque::new(),
            mem_start: 0,
            mem_bytes: 0,
            spill: None,
        }
    }

    /// Bytes kept (the offset after the last byte).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Output was dropped (cap reached, or the spill file failed).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Appends bytes read from `stream`; returns how many were kept. Nothing is kept after
    /// [`OutputLog::close`].
    pub fn append(&mut self, stream: Stream, data: &[u8]) -> usize {
        if self.closed || data.is_empty() {
            return 0;
        }
        let room = self.limits.cap_bytes.saturating_sub(self.total);
        let keep = room.min(data.len() as u64) as usize;
        if keep < data.len() {
            self.truncated = true;
        }
        if keep == 0 {
            return 0;
        }
        let data = &data[..keep];
        match self.mem.back_mut() {
            Some(last) if last.stream == stream && last.data.len() + keep <= MERGE_LIMIT => {
                last.data.extend_from_slice(data);
                self.mem_bytes += keep;
            }
            _ => {
                self.mem.push_back(Record {
                    offset: self.total,
                    stream,
                    data: data.to_vec(),
                });
                self.mem_bytes += keep + RECORD_OVERHEAD;
            }
        }
        self.total += keep as u64;
        if self.mem_bytes > self.limits.memory_bytes {
            self.spill_memory();
        }
        keep
    }

    /// No more output: later appends are dropped, and memory beyond [`KEEP_AFTER_CLOSE`] spills.
    pub fn close(&mut self) {
        self.closed = true;
        if self.mem_bytes > KEEP_AFTER_CLOSE {
            self.spill_memory();
        }
    }

    /// Deletes the spill file (the command is forgotten). Readers that hold it keep reading.
    pub fn remove_spill_file(&mut self) {
        if self.spill.is_some() {
            if let Err(e) = std::fs::remove_file(&self.spill_path) {
                if e.kind() != io::ErrorKind::NotFound {
                    warn!(error = %e, "removing an output spill file failed");
                }
            }
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
                warn!(error = %e, path = %self.spill_path.display(), "output spill failed; dropping further output");
                self.truncated = true;
                self.limits.cap_bytes = self.total;
            }
        }
    }

    fn write_spill(&mut self) -> io::Result<()> {
        let spill = match &mut self.spill {
            Some(s) => s,
            None => {
                let file = open_spill_file(&self.spill_path)?;
                self.spill.insert(Spill {
                    file: Arc::new(file),
                    len: 0,
                    index: Vec::new(),
                })
            }
        };
        let bytes: usize = self
            .mem
            .iter()
            .map(|r| r.data.len() + HEADER_LEN as usize)
            .sum();
        let mut buf = Vec::with_capacity(bytes);
        let mut new_index = Vec::new();
        let mut last_indexed = spill.index.last().map(|p| p.offset);
        let mut pos = spill.len;
        for rec in &self.mem {
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
        }
        spill.file.write_all_at(&buf, spill.len)?;
        spill.len = pos;
        spill.index.extend(new_index);
        Ok(())
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
    /// The next bytes are in the spill file: read them with [`LogReader::read_spilled`] (blocking
    /// I/O, without the log's lock).
    Spilled(SpilledRead),
}

/// A pending read of the spill file.
#[derive(Debug)]
pub struct SpilledRead {
    file: Arc<File>,
    start: Position,
    end: u64,
}

/// One reader's position in a log.
#[derive(Debug)]
pub struct LogReader {
    offset: u64,
    /// A record start at or before `offset` in the spill file.
    cursor: Option<Position>,
}

impl LogReader {
    /// A reader at `offset`, clamped to the kept output.
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

    /// Up to `max` bytes of one stream from memory, or where to read the file.
    pub fn next(&mut self, log: &OutputLog, max: usize) -> Next {
        if self.offset >= log.total {
            return Next::CaughtUp;
        }
        if self.offset >= log.mem_start {
            return Next::Chunk(self.read_memory(log, max));
        }
        let Some(spill) = &log.spill else {
            return Next::CaughtUp;
        };
        let i = spill.index.partition_point(|p| p.offset <= self.offset);
        let mut start = match i {
            0 => Position { offset: 0, pos: 0 },
            _ => spill.index[i - 1],
        };
        if let Some(c) = self.cursor {
            if c.offset <= self.offset && c.offset > start.offset {
                start = c;
            }
        }
        Next::Spilled(SpilledRead {
            file: spill.file.clone(),
            start,
            end: log.mem_start,
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

    /// Reads up to `max` bytes of one stream from the spill file (blocking).
    pub fn read_spilled(&mut self, read: SpilledRead, max: usize) -> io::Result<Chunk> {
        let SpilledRead { file, start, end } = read;
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
                self.cursor = Some(rec);
                if self.offset < rend {
                    break;
                }
            }
            rec = Position {
                offset: rend,
                pos: rec.pos + HEADER_LEN + len,
            };
            self.cursor = Some(rec);
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

    /// Reads the next chunk, doing file I/O inline (for tests and blocking callers).
    pub fn next_blocking(&mut self, log: &OutputLog, max: usize) -> io::Result<Option<Chunk>> {
        match self.next(log, max) {
            Next::Chunk(c) => Ok(Some(c)),
            Next::CaughtUp => Ok(None),
            Next::Spilled(s) => self.read_spilled(s, max).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(dir: &Path, memory_bytes: usize, cap_bytes: u64) -> OutputLog {
        OutputLog::new(
            dir.join("c.log"),
            LogLimits {
                memory_bytes,
                cap_bytes,
            },
        )
    }

    /// Writes a deterministic mix of stdout and stderr chunks; returns the expected bytes.
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
            let kept = log.append(stream, &data);
            expected.extend(data[..kept].iter().map(|&b| (stream, b)));
        }
        expected
    }

    fn read_all(log: &OutputLog, offset: u64, max: usize) -> Vec<(Stream, u8)> {
        let mut r = LogReader::new(log, offset);
        let mut out = Vec::new();
        while let Some(c) = r.next_blocking(log, max).expect("read") {
            assert_eq!(c.offset, offset + out.len() as u64);
            assert!(!c.data.is_empty() && c.data.len() <= max);
            out.extend(c.data.iter().map(|&b| (c.stream, b)));
        }
        out
    }

    #[test]
    fn memory_only_reads_from_every_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 1 << 20, 1 << 30);
        let expected = fill(&mut l, 60);
        assert!(!dir.path().join("c.log").exists());
        assert_eq!(l.total(), expected.len() as u64);
        for off in (0..expected.len()).step_by(97) {
            assert_eq!(read_all(&l, off as u64, 1000), expected[off..]);
        }
    }

    #[test]
    fn spilled_reads_are_exact_from_every_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 2000, 1 << 30);
        let expected = fill(&mut l, 400);
        assert!(dir.path().join("c.log").exists());
        assert!(l.mem_start > 0 && l.mem_start < l.total());
        for off in (0..expected.len())
            .step_by(1013)
            .chain([expected.len() - 1])
        {
            assert_eq!(
                read_all(&l, off as u64, 777),
                expected[off..],
                "offset {off}"
            );
        }
        assert_eq!(read_all(&l, 0, 1 << 20), expected);
        // Past the end: starts at the end.
        assert!(read_all(&l, u64::MAX, 100).is_empty());
    }

    #[test]
    fn index_is_sparse_and_large_logs_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 4096, 1 << 30);
        let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        for _ in 0..64 {
            l.append(Stream::Stdout, &chunk);
        }
        let spill = l.spill.as_ref().expect("spilled");
        assert!(spill.index.len() <= (l.total() / INDEX_STRIDE + 2) as usize);
        let off = 3 * 65536 + 12345;
        let mut r = LogReader::new(&l, off);
        let c = r.next_blocking(&l, 10).expect("read").expect("chunk");
        assert_eq!(c.offset, off);
        assert_eq!(c.data, chunk[12345..12355]);
    }

    #[test]
    fn cap_truncates_for_everyone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 100, 1000);
        let expected = fill(&mut l, 50);
        assert_eq!(l.total(), 1000);
        assert_eq!(expected.len(), 1000);
        assert!(l.truncated());
        assert_eq!(read_all(&l, 0, 64), expected);
    }

    #[test]
    fn close_spills_large_memory_and_stops_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = log(dir.path(), 1 << 20, 1 << 30);
        l.append(Stream::Stdout, &vec![7u8; KEEP_AFTER_CLOSE + 1]);
        l.close();
        assert_eq!(l.mem_bytes, 0);
        assert_eq!(l.append(Stream::Stdout, b"late"), 0);
        assert_eq!(read_all(&l, 0, 1 << 20).len(), KEEP_AFTER_CLOSE + 1);
        l.remove_spill_file();
        assert!(!dir.path().join("c.log").exists());
    }

    #[test]
    fn failed_spill_stops_storing_but_keeps_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = OutputLog::new(
            dir.path().join("missing/c.log"),
            LogLimits {
                memory_bytes: 10,
                cap_bytes: 1 << 30,
            },
        );
        assert_eq!(l.append(Stream::Stdout, b"0123456789abcdef"), 16);
        assert!(l.truncated());
        assert_eq!(l.append(Stream::Stdout, b"more"), 0);
        assert_eq!(read_all(&l, 0, 100).len(), 16);
    }
}
