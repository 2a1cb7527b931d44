//! The two ends of a mux session: [`MuxClient`] (host) and [`serve`] (guest).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

use super::frame::{find_hello, Frame, MAX_DATA};
use super::{Control, STREAM_BUFFER, WINDOW};

/// Frames queued for the writer of a session.
const WRITE_QUEUE: usize = 64;
/// Bytes read from the channel at once.
const READ_CHUNK: usize = 64 * 1024;
/// Pause between `Hello`s of a host waiting for the guest.
const HELLO_RETRY: Duration = Duration::from_millis(50);

/// A session number unlikely to repeat across reconnects (time- and address-derived).
fn session_number() -> u32 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    (now.as_nanos() as u32) ^ COUNTER.fetch_add(0x9E37_79B9, Ordering::Relaxed) | 1
}

/// Errors of a mux session.
#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    /// The session ended (channel closed or broken).
    #[error("mux session closed")]
    Closed,
    /// No answer in time.
    #[error("mux peer did not answer within {0:?}")]
    Timeout(Duration),
    /// The guest's transport refused a control request.
    #[error("guest transport: {0}")]
    Refused(String),
    /// The channel failed.
    #[error("mux channel: {0}")]
    Io(#[from] io::Error),
}

impl From<MuxError> for io::Error {
    fn from(e: MuxError) -> io::Error {
        match e {
            MuxError::Io(e) => e,
            MuxError::Closed => io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()),
            MuxError::Timeout(_) => io::Error::new(io::ErrorKind::TimedOut, e.to_string()),
            MuxError::Refused(_) => io::Error::other(e.to_string()),
        }
    }
}

/// One open stream as the reader task sees it.
struct Slot {
    /// Received data for the stream's inbound task; `None` after the peer's `Close`.
    inbound: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Bytes the peer may still send before it gets more credit.
    recv_allowance: u32,
    /// Our credit for sending (one permit per byte).
    credit: Arc<Semaphore>,
}

#[derive(Default)]
struct Table {
    streams: HashMap<u32, Slot>,
    waiters: HashMap<u32, oneshot::Sender<Vec<u8>>>,
}

/// State shared by a session's tasks.
struct Core {
    table: Mutex<Table>,
    writer: mpsc::Sender<Frame>,
    closed: AtomicBool,
    closed_notify: Notify,
}

impl Core {
    fn new(writer: mpsc::Sender<Frame>) -> Arc<Core> {
        Arc::new(Core {
            table: Mutex::new(Table::default()),
            writer,
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
        })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// Drops every stream (their users see end of file or a broken pipe) and every waiter.
    fn drop_streams(&self) {
        let mut t = self.table();
        for (_, slot) in t.streams.drain() {
            slot.credit.close();
        }
        t.waiters.clear();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.drop_streams();
        self.closed_notify.notify_waiters();
    }

    /// Resolves once the session is closed.
    async fn wait_closed(&self) {
        loop {
            let notified = self.closed_notify.notified();
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Registers stream `id` and starts its tasks; returns the user's end.
    fn add_stream(self: &Arc<Self>, id: u32) -> DuplexStream {
        let (user, pump) = tokio::io::duplex(STREAM_BUFFER);
        let (tx, rx) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(WINDOW as usize));
        self.table().streams.insert(
            id,
            Slot {
                inbound: Some(tx),
                recv_allowance: WINDOW,
                credit: credit.clone(),
            },
        );
        tokio::spawn(pump_stream(self.clone(), id, pump, rx, credit));
        user
    }

    /// Handles a frame both ends treat alike; `Err` = the peer broke the rules.
    fn on_stream_frame(&self, frame: Frame) -> Result<(), &'static str> {
        let mut t = self.table();
        match frame {
            Frame::Data { id, data } => {
                let Some(slot) = t.streams.get_mut(&id) else {
                    return Ok(()); // reset locally; late data is dropped
                };
                let n = data.len() as u32;
                if n > slot.recv_allowance {
                    return Err("data beyond the granted credit");
                }
                slot.recv_allowance -= n;
                if let Some(tx) = &slot.inbound {
                    let _ = tx.send(data);
                }
            }
            Frame::Credit { id, bytes } => {
                if let Some(slot) = t.streams.get(&id) {
                    let room = (WINDOW as usize).saturating_sub(slot.credit.available_permits());
                    if bytes as usize > room {
                        return Err("credit beyond the window");
                    }
                    slot.credit.add_permits(bytes as usize);
                }
            }
            Frame::Close { id } => {
                if let Some(slot) = t.streams.get_mut(&id) {
                    slot.inbound = None;
                }
            }
            Frame::Reset { id } => {
                if let Some(slot) = t.streams.remove(&id) {
                    slot.credit.close();
                }
            }
            Frame::Ping { seq } => {
                drop(t);
                // Not dropped when the queue is full: a lost pong reads as a dead peer.
                let writer = self.writer.clone();
                tokio::spawn(async move {
                    let _ = writer.send(Frame::Pong { seq }).await;
                });
            }
            Frame::Pong { seq } | Frame::ControlReply { seq, .. } => {
                let body = match frame {
                    Frame::ControlReply { body, .. } => body,
                    _ => Vec::new(),
                };
                if let Some(w) = t.waiters.remove(&seq) {
                    let _ = w.send(body);
                }
            }
            Frame::Hello { .. } | Frame::Open { .. } | Frame::Control { .. } => {
                return Err("frame not expected from this end");
            }
        }
        Ok(())
    }

    /// Grants `bytes` more credit to the peer for stream `id`.
    fn granted(&self, id: u32, bytes: u32) -> bool {
        match self.table().streams.get_mut(&id) {
            Some(slot) => {
                slot.recv_allowance = slot.recv_allowance.saturating_add(bytes).min(WINDOW);
                true
            }
            None => false,
        }
    }
}

/// Moves one stream's bytes between its duplex pipe and the session, then unregisters it.
async fn pump_stream(
    core: Arc<Core>,
    id: u32,
    pump: DuplexStream,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    credit: Arc<Semaphore>,
) {
    let (mut prd, mut pwr) = tokio::io::split(pump);
    let inbound = async {
        while let Some(chunk) = rx.recv().await {
            if pwr.write_all(&chunk).await.is_err() {
                // The user dropped its end.
                let _ = core.writer.send(Frame::Reset { id }).await;
                if let Some(slot) = core.table().streams.remove(&id) {
                    slot.credit.close();
                }
                return;
            }
            if core.granted(id, chunk.len() as u32) {
                let bytes = chunk.len() as u32;
                if core.writer.send(Frame::Credit { id, bytes }).await.is_err() {
                    return;
                }
            }
        }
        let _ = pwr.shutdown().await;
    };
    let outbound = async {
        let mut buf = vec![0u8; MAX_DATA];
        loop {
            let n = match prd.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = core.writer.send(Frame::Close { id }).await;
                    return;
                }
                Ok(n) => n,
            };
            match credit.acquire_many(n as u32).await {
                Ok(p) => p.forget(),
                Err(_) => return, // reset or session gone
            }
            let data = buf[..n].to_vec();
            if core.writer.send(Frame::Data { id, data }).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(inbound, outbound);
    core.table().streams.remove(&id);
}

/// Writes queued frames to the channel until the queue or the channel closes.
async fn write_loop<W: AsyncWrite + Unpin>(
    core: Arc<Core>,
    mut wr: W,
    mut rx: mpsc::Receiver<Frame>,
) {
    let mut buf = Vec::with_capacity(2 * MAX_DATA);
    loop {
        let frame = tokio::select! {
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            _ = core.wait_closed() => break,
        };
        buf.clear();
        frame.encode(&mut buf);
        while buf.len() < MAX_DATA {
            match rx.try_recv() {
                Ok(f) => f.encode(&mut buf),
                Err(_) => break,
            }
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
            break;
        }
    }
    core.close();
}

/// Host end of a session: opens streams, pings, sends control requests. Cheap to clone.
#[derive(Clone)]
pub struct MuxClient {
    core: Arc<Core>,
    next_id: Arc<AtomicU32>,
}

impl std::fmt::Debug for MuxClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxClient")
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl MuxClient {
    /// Starts a session over `rd`/`wr`: sends `Hello` and waits (at most `timeout`) for the
    /// guest's `Hello`, skipping whatever came before it. Fails with `Timeout` or `Closed`.
    pub async fn connect<R, W>(rd: R, wr: W, timeout: Duration) -> Result<MuxClient, MuxError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let core = Core::new(tx);
        tokio::spawn(write_loop(core.clone(), wr, rx));
        let session = session_number();
        let (ready_tx, mut ready_rx) = oneshot::channel();
        tokio::spawn(client_read_loop(core.clone(), rd, session, ready_tx));
        let client = MuxClient {
            core,
            next_id: Arc::new(AtomicU32::new(1)),
        };
        let handshake = async {
            loop {
                client
                    .core
                    .writer
                    .send(Frame::Hello { session })
                    .await
                    .map_err(|_| MuxError::Closed)?;
                match tokio::time::timeout(HELLO_RETRY, &mut ready_rx).await {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(_)) => return Err(MuxError::Closed),
                    Err(_) => continue,
                }
            }
        };
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(())) => Ok(client),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                client.core.close();
                Err(MuxError::Timeout(timeout))
            }
        }
    }

    /// Whether the session ended.
    pub fn is_closed(&self) -> bool {
        self.core.closed.load(Ordering::SeqCst)
    }

    /// Resolves when the session ends.
    pub async fn closed(&self) {
        self.core.wait_closed().await
    }

    /// Ends the session: every stream is dropped.
    pub fn shutdown(&self) {
        self.core.close();
    }

    /// Opens a new stream to the guest.
    pub async fn open(&self) -> Result<DuplexStream, MuxError> {
        if self.is_closed() {
            return Err(MuxError::Closed);
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let user = self.core.add_stream(id);
        self.core
            .writer
            .send(Frame::Open { id })
            .await
            .map_err(|_| MuxError::Closed)?;
        Ok(user)
    }

    /// Sends a ping and waits for its pong (the guest's transport is alive and not paused).
    pub async fn ping(&self, timeout: Duration) -> Result<(), MuxError> {
        self.request(|seq| Frame::Ping { seq }, timeout)
            .await
            .map(drop)
    }

    /// Asks the guest's transport to do `control` and waits for the answer.
    pub async fn control(&self, control: &Control, timeout: Duration) -> Result<(), MuxError> {
        let body = control.encode();
        let reply = self
            .request(move |seq| Frame::Control { seq, body }, timeout)
            .await?;
        if reply.is_empty() {
            Ok(())
        } else {
            Err(MuxError::Refused(
                String::from_utf8_lossy(&reply).into_owned(),
            ))
        }
    }

    async fn request(
        &self,
        frame: impl FnOnce(u32) -> Frame,
        timeout: Duration,
    ) -> Result<Vec<u8>, MuxError> {
        if self.is_closed() {
            return Err(MuxError::Closed);
        }
        let seq = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.core.table().waiters.insert(seq, tx);
        let result = tokio::time::timeout(timeout, async {
            self.core
                .writer
                .send(frame(seq))
                .await
                .map_err(|_| MuxError::Closed)?;
            rx.await.map_err(|_| MuxError::Closed)
        })
        .await;
        self.core.table().waiters.remove(&seq);
        result.map_err(|_| MuxError::Timeout(timeout))?
    }
}

async fn client_read_loop<R: AsyncRead + Unpin>(
    core: Arc<Core>,
    mut rd: R,
    session: u32,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut chunk = vec![0u8; READ_CHUNK];
    'read: loop {
        let n = tokio::select! {
            r = rd.read(&mut chunk) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = core.wait_closed() => break,
        };
        buf.extend_from_slice(&chunk[..n]);
        if ready.is_some() {
            // Before the guest's Hello, anything is left over from an earlier session.
            match find_hello(&buf) {
                Some(at) => {
                    buf.drain(..at);
                }
                None => {
                    let keep = buf.len().min(super::HEADER_BYTES + 8);
                    buf.drain(..buf.len() - keep);
                    continue;
                }
            }
        }
        let mut at = 0;
        loop {
            match Frame::decode(&buf[at..]) {
                Ok(Some((frame, used))) => {
                    at += used;
                    let ok = match frame {
                        // Answers to repeated Hellos of this session are expected.
                        Frame::Hello { session: s } if s == session => match ready.take() {
                            Some(r) => r.send(()).is_ok(),
                            None => true,
                        },
                        Frame::Hello { .. } if ready.is_some() => true,
                        other => core.on_stream_frame(other).is_ok(),
                    };
                    if !ok {
                        break 'read;
                    }
                }
                Ok(None) => break,
                Err(_) => break 'read,
            }
        }
        buf.drain(..at);
    }
    core.close();
}

/// Guest end: serves sessions on one channel until it reaches end of file or fails.
///
/// Every stream the host opens is handed to `on_stream`; every control request goes to
/// `on_control`, whose `Err` message is sent back. Bytes that cannot be decoded drop the
/// current session's streams and the reader waits for the next `Hello`. Returns when the
/// channel reads end of file (the host side closed: a virtio-serial port whose host
/// disconnected), after dropping every stream; the caller may call it again on the same channel.
pub async fn serve<R, W, S, C>(mut rd: R, wr: W, on_stream: S, on_control: C) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
    S: Fn(DuplexStream),
    C: Fn(Control) -> Result<(), String>,
{
    let (tx, rx) = mpsc::channel(WRITE_QUEUE);
    let core = Core::new(tx);
    let writer = tokio::spawn(write_loop(core.clone(), wr, rx));
    let mut in_session = false;
    let mut current: Option<u32> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut chunk = vec![0u8; READ_CHUNK];
    let result = loop {
        let n = match rd.read(&mut chunk).await {
            Ok(0) => break Ok(()),
            Err(e) => break Err(e),
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        loop {
            if !in_session {
                match find_hello(&buf[at..]) {
                    Some(skip) => at += skip,
                    None => {
                        let keep = (buf.len() - at).min(super::HEADER_BYTES + 8);
                        at = buf.len() - keep;
                        break;
                    }
                }
            }
            match Frame::decode(&buf[at..]) {
                Ok(Some((frame, used))) => {
                    at += used;
                    let ok = match frame {
                        Frame::Hello { session } => {
                            if current != Some(session) {
                                core.drop_streams();
                                current = Some(session);
                            }
                            in_session = true;
                            core.writer.send(Frame::Hello { session }).await.is_ok()
                        }
                        Frame::Open { id } => {
                            if core.table().streams.contains_key(&id) {
                                false
                            } else {
                                on_stream(core.add_stream(id));
                                true
                            }
                        }
                        Frame::Control { seq, body } => {
                            let reply = match Control::decode(&body) {
                                Ok(c) => on_control(c).err().unwrap_or_default(),
                                Err(e) => format!("bad control request: {e}"),
                            };
                            let body = reply.into_bytes();
                            core.writer
                                .send(Frame::ControlReply { seq, body })
                                .await
                                .is_ok()
                        }
                        other => core.on_stream_frame(other).is_ok(),
                    };
                    if !ok {
                        core.drop_streams();
                        in_session = false;
                        current = None;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // Lost our place: skip this byte and look for the next Hello.
                    core.drop_streams();
                    in_session = false;
                    current = None;
                    at += 1;
                }
            }
        }
        buf.drain(..at);
    };
    core.close();
    drop(core);
    writer.abort();
    result
}

#[cfg(test)]
mod tests;
