//! Connections: handshake, request routing, and one writer task per connection.
//! [`serve`] accepts on the unix socket; [`serve_connection`] serves one connection on any
//! byte stream, so other transports reuse it. Every connection [`serve`] accepted ends when its
//! `stop` token is cancelled, and its tracker says when the last one has closed (a quiesce:
//! see [`crate::agent`]).
//!
//! Every request of a connection runs in its own task; responses go through one bounded queue to
//! the writer, so a slow host paces the agent instead of growing its memory. `Data`/`DataEnd`
//! frames of an upload are routed by id to the upload's task through a bounded channel. A frame
//! that cannot be decoded, or a protocol violation, drops that connection only.

use std::collections::HashMap;
use std::sync::Arc;

use cove_guest_protocol::{
    encode_frame, read_frame, ErrorCode, FrameError, GuestFrame, HostFrame, Request, Response,
    MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::dispatch::dispatch;
use crate::error::AgentError;
use crate::files::{self, write::Upload};
use crate::responder::Responder;
use crate::state::Agent;

/// Frames queued for the writer of one connection.
const WRITE_QUEUE: usize = 4;
/// Chunks queued for one upload.
const UPLOAD_QUEUE: usize = 4;
/// Requests of one connection served at once; more wait.
const MAX_IN_FLIGHT: usize = 256;

/// Accepts connections until the future is dropped (which closes the listener). Each
/// connection runs on `connections` and closes once `stop` is cancelled.
pub async fn serve(
    agent: Arc<Agent>,
    listener: UnixListener,
    connections: &TaskTracker,
    stop: &CancellationToken,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(serve_connection(agent.clone(), stream, stop.child_token()));
            }
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves one connection on any byte stream (a unix socket, a virtio-serial port, ...) until
/// the host closes it, breaks the protocol, or `cancel` is cancelled: the handshake, then
/// requests until EOF. Returns once both halves of the stream are dropped.
pub async fn serve_connection<S>(agent: Arc<Agent>, stream: S, cancel: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, wr) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel(WRITE_QUEUE);
    let writer = tokio::spawn(write_loop(wr, rx, cancel.clone()));
    let greeted = tokio::select! {
        version = handshake(&mut rd, &tx) => version,
        _ = cancel.cancelled() => None,
    };
    if let Some(version) = greeted {
        read_loop(&agent, version, &mut rd, &tx, &cancel).await;
    }
    drop(tx);
    // Let queued answers (a handshake or protocol error) go out, then stop streams still running.
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
    }
    cancel.cancel();
    let _ = writer.await;
}

/// Reads `Hello` and answers it; the version the connection speaks, or `None` when it must
/// close.
async fn handshake(
    rd: &mut (impl AsyncRead + Unpin),
    tx: &mpsc::Sender<GuestFrame>,
) -> Option<u32> {
    let frame: HostFrame = match read_frame(rd).await {
        Ok(f) => f,
        Err(e) => {
            debug!(error = %e, "connection closed before hello");
            return None;
        }
    };
    let response = match frame.request {
        // The connection speaks the host's version when this agent knows it.
        Request::Hello { version }
            if (MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) =>
        {
            Response::Hello {
                version,
                agent_version: env!("CARGO_PKG_VERSION").to_string(),
            }
        }
        Request::Hello { version } => Response::Error {
            code: ErrorCode::UnsupportedVersion,
            message: format!(
                "protocol version {version} is not supported; this agent speaks \
                 {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
            ),
        },
        _ => Response::Error {
            code: ErrorCode::Protocol,
            message: "the first frame must be Hello".into(),
        },
    };
    let spoken = match response {
        Response::Hello { version, .. } => Some(version),
        _ => None,
    };
    let _ = tx
        .send(GuestFrame {
            id: frame.id,
            response,
        })
        .await;
    spoken
}

async fn read_loop(
    agent: &Arc<Agent>,
    version: u32,
    rd: &mut (impl AsyncRead + Unpin),
    tx: &mpsc::Sender<GuestFrame>,
    cancel: &CancellationToken,
) {
    let mut uploads: HashMap<u64, mpsc::Sender<Upload>> = HashMap::new();
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let frame: HostFrame = tokio::select! {
            f = read_frame(rd) => match f {
                Ok(f) => f,
                Err(FrameError::Closed) => return,
                Err(e) => {
                    warn!(error = %e, "bad frame; dropping the connection");
                    return;
                }
            },
            _ = cancel.cancelled() => return,
        };
        let r = Responder::new(frame.id, tx.clone());
        match frame.request {
            Request::Data { data } => match uploads.get(&frame.id) {
                // A failed upload stops receiving; its remaining chunks are dropped.
                Some(up) => {
                    let _ = up.send(Upload::Data(data)).await;
                }
                None => return protocol_error(&r, "data frame of no open upload").await,
            },
            Request::DataEnd => match uploads.remove(&frame.id) {
                Some(up) => {
                    let _ = up.send(Upload::End).await;
                }
                None => return protocol_error(&r, "end of no open upload").await,
            },
            Request::WriteFile(req) => {
                if uploads.contains_key(&frame.id) {
                    return protocol_error(&r, "upload id already in use").await;
                }
                let (up_tx, up_rx) = mpsc::channel(UPLOAD_QUEUE);
                uploads.insert(frame.id, up_tx);
                let agent = agent.clone();
                tokio::spawn(async move { files::write::write_file(&agent, req, up_rx, &r).await });
            }
            Request::Hello { .. } => {
                r.send(
                    AgentError::new(ErrorCode::Protocol, "hello was already done").into_response(),
                )
                .await;
            }
            request => {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let agent = agent.clone();
                tokio::spawn(async move {
                    dispatch(&agent, version, request, &r).await;
                    drop(permit);
                });
            }
        }
    }
}

async fn protocol_error(r: &Responder, message: &str) {
    warn!(message, "protocol violation; dropping the connection");
    r.send(AgentError::new(ErrorCode::Protocol, message).into_response())
        .await;
}

async fn write_loop(
    mut wr: impl AsyncWrite + Unpin,
    mut rx: mpsc::Receiver<GuestFrame>,
    cancel: CancellationToken,
) {
    loop {
        let frame = tokio::select! {
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            _ = cancel.cancelled() => break,
        };
        let bytes = match encode_frame(&frame) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "response cannot be encoded");
                let err = GuestFrame {
                    id: frame.id,
                    response: AgentError::internal(format!("response cannot be sent: {e}"))
                        .into_response(),
                };
                match encode_frame(&err) {
                    Ok(b) => b,
                    Err(_) => break,
                }
            }
        };
        let written = tokio::select! {
            w = wr.write_all(&bytes) => w.is_ok(),
            _ = cancel.cancelled() => false,
        };
        if !written {
            break;
        }
    }
    cancel.cancel();
}
