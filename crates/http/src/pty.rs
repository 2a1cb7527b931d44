//! Data plane: `GET /v1/attach/{cid}/pty`, a WebSocket to a command that runs on a pseudo-terminal.
//!
//! Authorised like the other data-plane routes (the command's attachment token as
//! `Authorization: Bearer`), or, for browsers, which cannot set that header on a WebSocket, by
//! the token in a `cove.bearer.<token>` subprotocol offered beside `cove.pty` (the server then
//! answers `Sec-WebSocket-Protocol: cove.pty`). Binary frames carry terminal bytes both ways: from the server, the
//! terminal's output from `?offset=N` (default 0, so a reconnecting client can resume where it
//! stopped); from the client, keystrokes written to the terminal's input. Text frames carry JSON
//! [`PtyMessage`]s: the client sends `{"resize":{"cols":C,"rows":R}}`; the server sends
//! `{"gap":{...}}` for dropped output and `{"exit":{...command...}}` once the command ended and all
//! its output was sent, then closes the socket. Closing the socket does not end the command: it
//! keeps running and can be attached to again. The output is also in the command's output log, so
//! the SSE attach works for it too.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use cove_api_types::{GapEvent, PtyMessage, PTY_PROTOCOL, PTY_TOKEN_PROTOCOL_PREFIX};
use cove_control_plane::attach::{OutputEvent, OutputStream};
use cove_control_plane::ControlPlane;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tracing::{debug, warn};

use super::data_plane::authorize;
use super::extract::ApiQuery;
use crate::render::ApiError;

/// Close code sent when the command's output stream broke (1011: internal error).
const CLOSE_STREAM_BROKE: u16 = 1011;
/// Close code for a client message that is not a terminal byte frame or a known JSON message
/// (1003: unsupported data).
const CLOSE_BAD_MESSAGE: u16 = 1003;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PtyQuery {
    offset: Option<u64>,
}

pub(super) async fn session(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<PtyQuery>,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let sandbox_id = match protocol_token(&headers) {
        Some(token) if super::bearer(&headers).is_none() => {
            cp.authorize_attachment(&cid, token).await?
        }
        _ => authorize(&cp, &headers, &cid).await?,
    };
    let events = cp
        .open_pty(&sandbox_id, &cid, q.offset.unwrap_or(0))
        .await?;
    // The session outlives this handler's scope: it keeps its caller.
    let caller = cove_control_plane::orgs::scope::require()?;
    Ok(ws.protocols([PTY_PROTOCOL]).on_upgrade(move |socket| {
        cove_control_plane::orgs::scope::scoped(caller, run(cp, sandbox_id, cid, events, socket))
    }))
}

/// The attachment token of a `cove.bearer.<token>` subprotocol, offered beside `cove.pty`.
fn protocol_token(headers: &HeaderMap) -> Option<&str> {
    let offered: Vec<&str> = headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    if !offered.contains(&PTY_PROTOCOL) {
        return None;
    }
    offered
        .iter()
        .find_map(|p| p.strip_prefix(PTY_TOKEN_PROTOCOL_PREFIX))
        .filter(|t| !t.is_empty())
}

/// Pumps output to the socket and the socket's frames to the terminal until the command ends or
/// the client goes away.
async fn run(
    cp: ControlPlane,
    sandbox_id: String,
    cid: String,
    mut events: OutputStream,
    socket: WebSocket,
) {
    let (mut tx, mut rx) = socket.split();
    let output = async {
        while let Some(event) = events.next().await {
            let message = match event {
                Ok(OutputEvent::Output { data, .. }) => Message::Binary(data),
                Ok(OutputEvent::Gap { offset, len }) => {
                    json_message(&PtyMessage::Gap(GapEvent { offset, len }))
                }
                Ok(OutputEvent::Exited(command)) => {
                    let _ = tx.send(json_message(&PtyMessage::Exit(command))).await;
                    let _ = tx.send(Message::Close(None)).await;
                    return;
                }
                Ok(OutputEvent::End) => continue,
                Err(e) => {
                    warn!(command_id = %cid, error = %e, "pty output stream failed");
                    let _ = tx
                        .send(close(CLOSE_STREAM_BROKE, "the output stream broke"))
                        .await;
                    return;
                }
            };
            if tx.send(message).await.is_err() {
                return;
            }
        }
    };
    let input = async {
        while let Some(Ok(message)) = rx.next().await {
            let result = match message {
                Message::Binary(data) => cp
                    .pty_input(&sandbox_id, &cid, data)
                    .await
                    .map_err(|e| e.to_string()),
                Message::Text(text) => match serde_json::from_str::<PtyMessage>(&text) {
                    Ok(PtyMessage::Resize(size)) => cp
                        .resize_command(&sandbox_id, &cid, size.cols, size.rows)
                        .await
                        .map_err(|e| e.to_string()),
                    _ => return Some("expected {\"resize\":{\"cols\":C,\"rows\":R}}"),
                },
                Message::Close(_) => return None,
                Message::Ping(_) | Message::Pong(_) => Ok(()),
            };
            if let Err(e) = result {
                // The command ended or closed its input: output (and the exit) still follow.
                debug!(command_id = %cid, error = %e, "pty input not delivered");
            }
        }
        None
    };
    let bad = tokio::select! {
        () = output => None,
        bad = input => bad,
    };
    if let Some(reason) = bad {
        debug!(command_id = %cid, reason, "closing a pty socket");
        let _ = tx.send(close(CLOSE_BAD_MESSAGE, reason)).await;
    }
}

fn json_message(m: &PtyMessage) -> Message {
    Message::Text(serde_json::to_string(m).unwrap_or_default().into())
}

fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::SEC_WEBSOCKET_PROTOCOL,
            value.parse().expect("header"),
        );
        headers
    }

    #[test]
    fn the_token_rides_in_a_subprotocol_beside_cove_pty() {
        assert_eq!(
            protocol_token(&offered("cove.pty, cove.bearer.abc-_1")),
            Some("abc-_1")
        );
        assert_eq!(protocol_token(&offered("cove.bearer.abc")), None);
        assert_eq!(protocol_token(&offered("cove.pty, cove.bearer.")), None);
        assert_eq!(protocol_token(&offered("cove.pty")), None);
        assert_eq!(protocol_token(&HeaderMap::new()), None);
    }
}
