//! Connections to the guest agent: the handshake, and the shared multiplexed connection that
//! carries unary calls.
//!
//! The shared connection has one writer task (callers queue whole encoded frames, so a caller
//! that gives up never leaves half a frame on the socket) and one reader task that hands each
//! response to the caller waiting for its id. When the connection breaks, every pending call fails
//! with `Unavailable` (or `Protocol` when the guest misbehaved) and the client reconnects on the
//! next call. A response for an id that was never issued drops the connection; a late response for
//! a call that gave up is ignored.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cove_guest_protocol::{
    encode_frame, read_frame, write_frame, CommandInfo, ErrorCode, FileInfo, FrameError,
    GuestFrame, HostFrame, Request, Response, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use cove_runtime::{GuestConnector, GuestStream};
use parking_lot::{Mutex, MutexGuard};
use tokio::io::AsyncWriteExt;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tracing::warn;

use super::error::GuestError;
use cove_network::RateLimit;

/// Most entries of one directory listing accepted from the guest.
pub const MAX_LIST_ENTRIES: usize = 200_000;
/// Most commands of one command list accepted from the guest.
pub const MAX_LIST_COMMANDS: usize = 100_000;
/// Frames queued for the shared connection's writer.
const WRITE_QUEUE: usize = 64;
/// Longest wait for the guest's answer to `Hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

static LATE_REPLIES: RateLimit = RateLimit::new(Duration::from_secs(10));
static BROKEN: RateLimit = RateLimit::new(Duration::from_secs(10));

/// Connects and performs the handshake (see [`open_versioned`]).
pub async fn open(
    connector: &dyn GuestConnector,
    timeout: Duration,
) -> Result<GuestStream, GuestError> {
    open_versioned(connector, timeout).await.map(|(s, _)| s)
}

/// Connects and performs the handshake; returns the stream and the protocol version it
/// speaks. Offers [`PROTOCOL_VERSION`]; an older agent that refuses it gets a new connection
/// offering the next older version, down to [`MIN_PROTOCOL_VERSION`] (an agent only ever
/// refuses versions newer than its own, so this takes one connection per version it lacks).
pub async fn open_versioned(
    connector: &dyn GuestConnector,
    timeout: Duration,
) -> Result<(GuestStream, u32), GuestError> {
    let mut offer = PROTOCOL_VERSION;
    loop {
        match handshake(connector, timeout, offer).await {
            Err(GuestError::Guest {
                code: ErrorCode::UnsupportedVersion,
                ..
            }) if offer > MIN_PROTOCOL_VERSION => offer -= 1,
            other => return other,
        }
    }
}

/// One connection and its `Hello` offering `offer`.
async fn handshake(
    connector: &dyn GuestConnector,
    timeout: Duration,
    offer: u32,
) -> Result<(GuestStream, u32), GuestError> {
    let mut stream = tokio::time::timeout(timeout, connector.connect())
        .await
        .map_err(|_| GuestError::Unavailable("connecting to the guest agent timed out".into()))?
        .map_err(|e| GuestError::Unavailable(format!("cannot connect to the guest agent: {e}")))?;
    let hello = HostFrame {
        id: 0,
        request: Request::Hello { version: offer },
    };
    let answer = tokio::time::timeout(
        HELLO_TIMEOUT.min(timeout.max(Duration::from_secs(1))),
        async {
            write_frame(&mut stream, &hello).await?;
            read_frame::<_, GuestFrame>(&mut stream).await
        },
    )
    .await
    .map_err(|_| GuestError::Unavailable("the guest agent did not answer hello in time".into()))?
    .map_err(frame_error)?;
    if answer.id != 0 {
        return Err(GuestError::Protocol(format!(
            "hello answered with id {}",
            answer.id
        )));
    }
    match answer.response {
        Response::Hello { version, .. } if (MIN_PROTOCOL_VERSION..=offer).contains(&version) => {
            Ok((stream, version))
        }
        Response::Hello { version, .. } => Err(GuestError::Protocol(format!(
            "guest speaks protocol version {version}, offered {offer}"
        ))),
        Response::Error { code, message } => Err(GuestError::from_guest(code, message)),
        other => Err(GuestError::Protocol(format!(
            "unexpected answer to hello: {}",
            kind(&other)
        ))),
    }
}

/// The error of a failed frame read or write.
pub fn frame_error(e: FrameError) -> GuestError {
    match e {
        FrameError::Closed => {
            GuestError::Unavailable("the guest agent closed the connection".into())
        }
        FrameError::Io(e) => {
            GuestError::Unavailable(format!("connection to the guest agent failed: {e}"))
        }
        FrameError::TooLarge { len } => GuestError::Protocol(format!("frame of {len} bytes")),
        FrameError::Malformed(e) => GuestError::Protocol(format!("malformed frame: {e}")),
    }
}

/// The variant name of a response, for messages.
pub fn kind(r: &Response) -> &'static str {
    match r {
        Response::Hello { .. } => "Hello",
        Response::Ok => "Ok",
        Response::Spawned { .. } => "Spawned",
        Response::Output { .. } => "Output",
        Response::Exited(_) => "Exited",
        Response::Command(_) => "Command",
        Response::Commands(_) => "Commands",
        Response::Data { .. } => "Data",
        Response::End => "End",
        Response::FileInfo(_) => "FileInfo",
        Response::Entries(_) => "Entries",
        Response::Error { .. } => "Error",
        Response::EntriesPart(_) => "EntriesPart",
        Response::CommandsPart(_) => "CommandsPart",
        Response::Gap { .. } => "Gap",
        Response::Xattrs(_) => "Xattrs",
        Response::SpawnedCommand(_) => "SpawnedCommand",
        Response::FileEvents(_) => "FileEvents",
    }
}

/// Encodes a request; one that does not fit a frame is the caller's error.
pub fn encode(id: u64, request: Request) -> Result<Vec<u8>, GuestError> {
    encode_frame(&HostFrame { id, request }).map_err(|e| GuestError::Guest {
        code: ErrorCode::InvalidArgument,
        message: format!("request too large for the guest protocol: {e}"),
    })
}

enum Parts {
    None,
    Entries(Vec<FileInfo>),
    Commands(Vec<CommandInfo>),
}

struct Pending {
    tx: oneshot::Sender<Result<Response, GuestError>>,
    parts: Parts,
}

struct State {
    pending: HashMap<u64, Pending>,
    next_id: u64,
    failed: Option<GuestError>,
}

struct Inner {
    state: Mutex<State>,
    writer: mpsc::Sender<Vec<u8>>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Breaks the connection: every pending call gets `err`.
    fn fail(&self, err: GuestError) {
        let pending = {
            let mut st = self.state();
            if st.failed.is_none() {
                st.failed = Some(err.clone());
            }
            std::mem::take(&mut st.pending)
        };
        if !matches!(err, GuestError::Unavailable(_)) {
            if let Some(suppressed) = BROKEN.allow() {
                warn!(error = %err, suppressed, "dropping the connection to a misbehaving guest agent");
            }
        }
        for (_, p) in pending {
            let _ = p.tx.send(Err(err.clone()));
        }
    }
}

/// The shared, multiplexed connection.
pub struct Conn {
    inner: Arc<Inner>,
    tasks: [AbortHandle; 2],
    version: u32,
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A registered call; unregisters on drop (a caller that gives up).
pub struct Call<'a> {
    conn: &'a Conn,
    id: u64,
    rx: Option<oneshot::Receiver<Result<Response, GuestError>>>,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.conn.inner.state().pending.remove(&self.id);
    }
}

impl Call<'_> {
    /// Waits for the response (after [`Conn::send`]).
    pub async fn response(&mut self) -> Result<Response, GuestError> {
        let Some(rx) = self.rx.take() else {
            return Err(GuestError::Protocol("response already taken".into()));
        };
        rx.await.unwrap_or_else(|_| {
            Err(GuestError::Unavailable(
                "the connection to the guest agent was lost".into(),
            ))
        })
    }
}

impl Conn {
    /// Connects, handshakes and starts the reader and writer tasks.
    pub async fn connect(
        connector: &dyn GuestConnector,
        timeout: Duration,
    ) -> Result<Conn, GuestError> {
        let (stream, version) = open_versioned(connector, timeout).await?;
        let (rd, wr) = tokio::io::split(stream);
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                pending: HashMap::new(),
                next_id: 1,
                failed: None,
            }),
            writer: tx,
        });
        let reader = tokio::spawn(read_loop(inner.clone(), rd)).abort_handle();
        let writer = tokio::spawn(write_loop(inner.clone(), wr, rx)).abort_handle();
        Ok(Conn {
            inner,
            tasks: [reader, writer],
            version,
        })
    }

    /// The protocol version the connection speaks.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether the connection broke.
    pub fn is_broken(&self) -> bool {
        self.inner.state().failed.is_some()
    }

    /// Breaks the connection (the guest sent something unexpected).
    pub fn fail(&self, err: GuestError) {
        self.inner.fail(err);
    }

    /// Registers a call and returns it with its id.
    pub fn register(&self) -> Result<Call<'_>, GuestError> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.inner.state();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        let id = st.next_id;
        st.next_id += 1;
        st.pending.insert(
            id,
            Pending {
                tx,
                parts: Parts::None,
            },
        );
        Ok(Call {
            conn: self,
            id,
            rx: Some(rx),
        })
    }

    /// Queues the request of `call`.
    pub async fn send(&self, call: &Call<'_>, request: Request) -> Result<(), GuestError> {
        let bytes = encode(call.id, request)?;
        self.inner.writer.send(bytes).await.map_err(|_| {
            GuestError::Unavailable("the connection to the guest agent was lost".into())
        })
    }
}

async fn write_loop(
    inner: Arc<Inner>,
    mut wr: WriteHalf<GuestStream>,
    mut rx: mpsc::Receiver<Vec<u8>>,
) {
    while let Some(bytes) = rx.recv().await {
        if let Err(e) = wr.write_all(&bytes).await {
            inner.fail(GuestError::Unavailable(format!(
                "writing to the guest agent failed: {e}"
            )));
            return;
        }
    }
}

async fn read_loop(inner: Arc<Inner>, mut rd: ReadHalf<GuestStream>) {
    loop {
        let frame: GuestFrame = match read_frame(&mut rd).await {
            Ok(f) => f,
            Err(e) => return inner.fail(frame_error(e)),
        };
        if let Err(e) = deliver(&inner, frame) {
            return inner.fail(e);
        }
    }
}

/// Hands a response to its call; an error breaks the connection.
fn deliver(inner: &Inner, frame: GuestFrame) -> Result<(), GuestError> {
    let mut st = inner.state();
    if frame.id == 0 || frame.id >= st.next_id {
        return Err(GuestError::Protocol(format!(
            "response for unknown request id {}",
            frame.id
        )));
    }
    let Some(pending) = st.pending.get_mut(&frame.id) else {
        drop(st);
        if let Some(suppressed) = LATE_REPLIES.allow() {
            warn!(id = frame.id, suppressed, "ignoring a late guest response");
        }
        return Ok(());
    };
    match (frame.response, &mut pending.parts) {
        (Response::EntriesPart(v), parts) => {
            let mut acc = match std::mem::replace(parts, Parts::None) {
                Parts::None => Vec::new(),
                Parts::Entries(acc) => acc,
                Parts::Commands(_) => return Err(GuestError::Protocol("mixed list parts".into())),
            };
            if acc.len() + v.len() > MAX_LIST_ENTRIES {
                return Err(GuestError::Protocol(format!(
                    "listing of more than {MAX_LIST_ENTRIES} entries"
                )));
            }
            acc.extend(v);
            *parts = Parts::Entries(acc);
            Ok(())
        }
        (Response::CommandsPart(v), parts) => {
            let mut acc = match std::mem::replace(parts, Parts::None) {
                Parts::None => Vec::new(),
                Parts::Commands(acc) => acc,
                Parts::Entries(_) => return Err(GuestError::Protocol("mixed list parts".into())),
            };
            if acc.len() + v.len() > MAX_LIST_COMMANDS {
                return Err(GuestError::Protocol(format!(
                    "more than {MAX_LIST_COMMANDS} commands"
                )));
            }
            acc.extend(v);
            *parts = Parts::Commands(acc);
            Ok(())
        }
        (response, _) => {
            let Some(p) = st.pending.remove(&frame.id) else {
                return Ok(());
            };
            let response = match (response, p.parts) {
                (r, Parts::None) => r,
                (Response::Entries(v), Parts::Entries(mut acc)) => {
                    if acc.len() + v.len() > MAX_LIST_ENTRIES {
                        return Err(GuestError::Protocol(format!(
                            "listing of more than {MAX_LIST_ENTRIES} entries"
                        )));
                    }
                    acc.extend(v);
                    Response::Entries(acc)
                }
                (Response::Commands(v), Parts::Commands(mut acc)) => {
                    if acc.len() + v.len() > MAX_LIST_COMMANDS {
                        return Err(GuestError::Protocol(format!(
                            "more than {MAX_LIST_COMMANDS} commands"
                        )));
                    }
                    acc.extend(v);
                    Response::Commands(acc)
                }
                // An error after some parts is still the answer.
                (r @ Response::Error { .. }, _) => r,
                (r, _) => {
                    return Err(GuestError::Protocol(format!(
                        "{} after list parts",
                        kind(&r)
                    )));
                }
            };
            drop(st);
            let _ = p.tx.send(Ok(response));
            Ok(())
        }
    }
}
