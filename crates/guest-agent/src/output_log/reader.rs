//! Readers of a log: each keeps its own offset, reads memory under the log's lock and segment
//! files with positional reads outside it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use cove_guest_protocol::Stream;

use super::segment::{byte_stream, corrupt, Position, HEADER_LEN};
use super::{Chunk, OutputLog};

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
