//! Bridges between the blocking tar code and the async object store: a `Write` that sends
//! fixed-size chunks into a bounded channel, and a `Read` that takes chunks from one.

use std::io::{self, Read, Write};

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

/// Chunks buffered in the channel between packer and uploader.
const CHANNEL_CHUNKS: usize = 2;

/// A blocking writer whose bytes arrive, in chunks of `chunk_bytes`, at the returned receiver.
/// Call it only from a blocking thread (`spawn_blocking`). Once the receiver is dropped, writes
/// fail with `BrokenPipe`.
pub(super) fn channel_writer(chunk_bytes: usize) -> (ChannelWriter, mpsc::Receiver<Bytes>) {
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    (
        ChannelWriter {
            tx,
            buf: BytesMut::with_capacity(chunk_bytes),
            chunk_bytes,
        },
        rx,
    )
}

/// A blocking writer whose bytes go to a snapshot upload in fixed-size chunks; use it only on
/// a blocking thread. Writes fail with `BrokenPipe` once the upload stopped.
pub struct ChannelWriter {
    tx: mpsc::Sender<Bytes>,
    buf: BytesMut,
    chunk_bytes: usize,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.buf.reserve(self.chunk_bytes);
        self.tx
            .blocking_send(chunk)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "snapshot upload stopped"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = self.chunk_bytes - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= self.chunk_bytes {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// A blocking reader of the chunks sent to the returned sender (at most `depth` queued). An
/// `Err` chunk is returned as the read error; the end of the channel is the end of the data.
pub(super) fn channel_reader(depth: usize) -> (mpsc::Sender<io::Result<Bytes>>, ChannelReader) {
    let (tx, rx) = mpsc::channel(depth);
    (
        tx,
        ChannelReader {
            rx,
            current: Bytes::new(),
        },
    )
}

/// A blocking reader of a snapshot download; use it only on a blocking thread. A failed
/// download is its read error; the end of the object is the end of the data.
pub struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}
