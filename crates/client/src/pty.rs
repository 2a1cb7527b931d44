//! The data plane's WebSocket to a command on a pseudo-terminal: `GET {attachment.url}/pty`.
//!
//! Binary frames carry terminal bytes both ways; JSON text frames carry a resize (client →
//! server) and gaps and the exit (server → client). See [`cove_api_types::PtyMessage`].

use bytes::Bytes;
use cove_api_types::{Attachment, Command, PtyMessage, TerminalSize};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{Client, ClientError, Result};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One event of a pty session.
#[derive(Debug, Clone, PartialEq)]
pub enum PtyEvent {
    /// Bytes the terminal printed.
    Output(Bytes),
    /// Output bytes `[offset, offset + len)` were dropped (the middle of a very long output).
    Gap {
        /// Offset of the first dropped byte.
        offset: u64,
        /// Number of dropped bytes.
        len: u64,
    },
    /// The command ended and all its output was sent; the last event.
    Exit(Box<Command>),
}

/// The sending half of a pty session: keystrokes and resizes.
pub struct PtyWriter {
    url: String,
    sink: SplitSink<Socket, Message>,
}

/// The receiving half of a pty session: terminal output, then the exit.
pub struct PtyReader {
    url: String,
    stream: SplitStream<Socket>,
    done: bool,
}

impl Client {
    /// Opens the WebSocket of a command started with `pty: true`, receiving its terminal output
    /// from byte `offset` (0 for all of it). Returns the sending and receiving halves.
    pub async fn pty(
        &self,
        attachment: &Attachment,
        offset: u64,
    ) -> Result<(PtyWriter, PtyReader)> {
        let http_url = format!(
            "{}/pty?offset={offset}",
            attachment.url.trim_end_matches('/')
        );
        let url = match http_url.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}"),
            None => match http_url.strip_prefix("http://") {
                Some(rest) => format!("ws://{rest}"),
                None => return Err(ClientError::InvalidUrl { url: http_url }),
            },
        };
        let stream_err = |reason: String| ClientError::Stream {
            url: http_url.clone(),
            reason,
        };
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| stream_err(e.to_string()))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", attachment.token))
            .map_err(|e| stream_err(e.to_string()))?;
        request.headers_mut().insert("authorization", bearer);
        let (socket, _) = match tokio_tungstenite::connect_async(request).await {
            Ok(s) => s,
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                return Err(crate::error::from_error_answer(status, &http_url, &body));
            }
            Err(e) => return Err(stream_err(e.to_string())),
        };
        let (sink, stream) = socket.split();
        Ok((
            PtyWriter {
                url: http_url.clone(),
                sink,
            },
            PtyReader {
                url: http_url,
                stream,
                done: false,
            },
        ))
    }
}

impl PtyWriter {
    fn err(&self, e: impl std::fmt::Display) -> ClientError {
        ClientError::Stream {
            url: self.url.clone(),
            reason: e.to_string(),
        }
    }

    /// Types `data` into the terminal.
    pub async fn write(&mut self, data: impl Into<Bytes>) -> Result<()> {
        let data: Bytes = data.into();
        self.sink
            .send(Message::Binary(data))
            .await
            .map_err(|e| self.err(e))
    }

    /// Resizes the terminal (its programs get `SIGWINCH`).
    pub async fn resize(&mut self, cols: u16, rows: u16) -> Result<()> {
        let text = serde_json::to_string(&PtyMessage::Resize(TerminalSize { cols, rows }))
            .map_err(|e| self.err(e))?;
        self.sink
            .send(Message::Text(text.into()))
            .await
            .map_err(|e| self.err(e))
    }

    /// Closes the socket; the command keeps running.
    pub async fn close(mut self) -> Result<()> {
        self.sink.close().await.map_err(|e| self.err(e))
    }
}

impl PtyReader {
    /// The next event; `None` after [`PtyEvent::Exit`]. The socket closing before the exit is
    /// an error (reattach with the offset after the bytes received).
    pub async fn next(&mut self) -> Option<Result<PtyEvent>> {
        if self.done {
            return None;
        }
        loop {
            let err = |reason: String| ClientError::Stream {
                url: self.url.clone(),
                reason,
            };
            let message = match self.stream.next().await {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(err(e.to_string())));
                }
                None => {
                    self.done = true;
                    return Some(Err(err("closed before the exit".into())));
                }
            };
            match message {
                Message::Binary(data) => return Some(Ok(PtyEvent::Output(data))),
                Message::Text(text) => match serde_json::from_str::<PtyMessage>(&text) {
                    Ok(PtyMessage::Exit(command)) => {
                        self.done = true;
                        return Some(Ok(PtyEvent::Exit(command)));
                    }
                    Ok(PtyMessage::Gap(g)) => {
                        return Some(Ok(PtyEvent::Gap {
                            offset: g.offset,
                            len: g.len,
                        }))
                    }
                    Ok(PtyMessage::Resize(_)) | Err(_) => {
                        self.done = true;
                        return Some(Err(err(format!("unexpected message {text}"))));
                    }
                },
                Message::Close(frame) => {
                    self.done = true;
                    let reason = frame
                        .map(|f| format!("closed: {} {}", u16::from(f.code), f.reason))
                        .unwrap_or_else(|| "closed before the exit".into());
                    return Some(Err(err(reason)));
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
    }
}
