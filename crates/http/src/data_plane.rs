//! Data plane: a command's output as server-sent events, and its stdin.
//!
//! Authorised by the command's attachment token (`Authorization: Bearer`), which is valid for that
//! one command only. Output events carry byte offsets; `?offset=N` (or `Last-Event-ID`) resumes
//! exactly where a dropped connection stopped. Where the reader's position falls in the dropped
//! middle of an output longer than the cap, a `gap` event `{offset, len}` names the bytes that are
//! gone and the stream continues after them. PTY commands also have a WebSocket (see `pty`).
//!
//! With `Accept: application/octet-stream` the same route streams the command's stdout as raw
//! bytes instead (`attach_binary.rs`): `?offset=` then counts stdout bytes, one such stream per
//! command at a time, and the body ends cleanly once the command exited and every stdout byte
//! was sent; a body that breaks off (a connection reset, an unfinished chunked body) did not
//! end. The exit status is not in the body (HTTP trailers reach few clients): read the command
//! (`GET /v1/sandboxes/{id}/commands/{cid}`) after the end.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use base64::Engine;
use cove_api_types::GapEvent;
use cove_control_plane::attach::{OutputEvent, OutputSource};
use cove_control_plane::{ControlPlane, ServiceError};
use futures::StreamExt;
use http_body_util::BodyExt;
use serde::Deserialize;

use super::extract::ApiQuery;
use super::operations::async_stream;
use crate::render::ApiError;

/// Largest output event in bytes before encoding (32 KiB): larger chunks go out as several
/// events, which keeps every event cheap to parse for a client however large the read.
pub const SSE_EVENT_BYTES: usize = 32 * 1024;

/// Largest stdin write in one request (1 MiB); split larger input into several requests.
pub const MAX_STDIN_WRITE: usize = 1 << 20;

pub(super) async fn authorize(
    cp: &ControlPlane,
    headers: &HeaderMap,
    cid: &str,
) -> Result<String, ServiceError> {
    let token = super::bearer(headers)
        .ok_or_else(|| ServiceError::Unauthorized("missing attachment token".into()))?;
    cp.authorize_attachment(cid, token).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AttachQuery {
    offset: Option<u64>,
    encoding: Option<String>,
}

pub(super) async fn attach(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<AttachQuery>,
) -> Result<axum::response::Response, ApiError> {
    let sandbox_id = authorize(&cp, &headers, &cid).await?;
    if wants_octet_stream(&headers) {
        if q.encoding.is_some() {
            return Err(cove_domain::InvalidInput::new(
                "encoding",
                "applies to the SSE stream only, not to application/octet-stream",
            )
            .into());
        }
        return binary(&cp, &sandbox_id, &cid, q.offset.unwrap_or(0)).await;
    }
    let utf8 = match q.encoding.as_deref() {
        None | Some("base64") => false,
        Some("utf8") | Some("utf-8") => true,
        Some(other) => {
            return Err(cove_domain::InvalidInput::new(
                "encoding",
                format!("must be base64 or utf8, not {other:?}"),
            )
            .into())
        }
    };
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let offset = q.offset.or(resume).unwrap_or(0);
    let mut events = cp.attach_output(&sandbox_id, &cid, offset, true).await?;
    let stream = async_stream(move |tx| async move {
        let mut carry = [Utf8Carry::default(), Utf8Carry::default()];
        while let Some(ev) = events.next().await {
            let out = match ev {
                Ok(OutputEvent::Output {
                    offset,
                    source,
                    data,
                }) => output_events(&mut carry, utf8, offset, source, &data),
                Ok(OutputEvent::Gap { offset, len }) => {
                    // With utf8, an incomplete character (at most 3 bytes) held back before a
                    // gap cannot be completed: it goes with the gap.
                    for c in &mut carry {
                        c.pending.clear();
                    }
                    vec![Event::default()
                        .event("gap")
                        .id((offset + len).to_string())
                        .json_data(GapEvent { offset, len })]
                }
                Ok(OutputEvent::Exited(cmd)) => {
                    vec![Event::default().event("exit").json_data(&*cmd)]
                }
                Ok(OutputEvent::End) => continue,
                Err(e) => {
                    tracing::warn!(command_id = %cid, error = %e, "attach stream failed");
                    // A dead agent ended the command: say so; else the stream only broke.
                    let body = match &e {
                        cove_control_plane::ServiceError::GuestRestarted(_) => serde_json::json!({
                            "code": e.code().as_str(),
                            "message": e.public_message(),
                        }),
                        _ => serde_json::json!({
                            "code": "unavailable",
                            "message":
                                "the output stream broke; reconnect with ?offset= to resume",
                        }),
                    };
                    vec![Event::default().event("error").json_data(body)]
                }
            };
            for ev in out.into_iter().flatten() {
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Whether the client asked for the raw stdout stream (`Accept: application/octet-stream`).
fn wants_octet_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/octet-stream"))
        })
}

/// The raw stdout stream from stdout byte `offset`; an error after the headers aborts the body.
async fn binary(
    cp: &ControlPlane,
    sandbox_id: &str,
    cid: &str,
    offset: u64,
) -> Result<axum::response::Response, ApiError> {
    let stream = cp.attach_stdout(sandbox_id, cid, offset).await?;
    let cid = cid.to_string();
    let body = Body::from_stream(stream.map(move |item| {
        item.map_err(|e| {
            tracing::warn!(command_id = %cid, error = %e, "raw stdout stream failed");
            std::io::Error::other(e.public_message())
        })
    }));
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/octet-stream".to_string(),
            ),
            (
                axum::http::HeaderName::from_static(STDOUT_OFFSET_HEADER),
                offset.to_string(),
            ),
        ],
        body,
    )
        .into_response())
}

/// Response header of the raw stdout stream: the stdout offset its first byte has.
pub const STDOUT_OFFSET_HEADER: &str = "cove-stdout-offset";

/// The `stdout`/`stderr` events of one chunk of output, each of at most [`SSE_EVENT_BYTES`].
fn output_events(
    carry: &mut [Utf8Carry; 2],
    utf8: bool,
    offset: u64,
    source: OutputSource,
    data: &[u8],
) -> Vec<Result<Event, axum::Error>> {
    let (name, idx) = match source {
        OutputSource::Stdout => ("stdout", 0),
        OutputSource::Stderr => ("stderr", 1),
    };
    let mut events = Vec::with_capacity(data.len() / SSE_EVENT_BYTES + 1);
    let mut at = offset;
    for piece in data.chunks(SSE_EVENT_BYTES) {
        let end = at + piece.len() as u64;
        let payload = if utf8 {
            carry[idx]
                .push(at, piece)
                .map(|(start, text)| cove_api_types::OutputEvent {
                    offset: start,
                    len: end - start,
                    data: text,
                })
        } else {
            Some(cove_api_types::OutputEvent {
                offset: at,
                len: piece.len() as u64,
                data: base64::engine::general_purpose::STANDARD.encode(piece),
            })
        };
        if let Some(payload) = payload {
            events.push(
                Event::default()
                    .event(name)
                    .id(end.to_string())
                    .json_data(&payload),
            );
        }
        at = end;
    }
    events
}

/// Holds back the incomplete tail of a UTF-8 sequence so that a character split between two reads
/// is sent whole in the next event.
#[derive(Default)]
struct Utf8Carry {
    pending: Vec<u8>,
    pending_offset: u64,
}

impl Utf8Carry {
    /// Returns the start offset and text of what can be sent now, or `None` if everything is held.
    fn push(&mut self, offset: u64, data: &[u8]) -> Option<(u64, String)> {
        let start = if self.pending.is_empty() {
            offset
        } else {
            self.pending_offset
        };
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(data);
        let keep = incomplete_tail(&buf);
        let tail = buf.split_off(buf.len() - keep);
        if !tail.is_empty() {
            self.pending = tail;
            self.pending_offset = start + buf.len() as u64;
        }
        if buf.is_empty() {
            return None;
        }
        Some((start, String::from_utf8_lossy(&buf).into_owned()))
    }
}

/// Length of a trailing, possibly incomplete multi-byte sequence (0–3 bytes).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // continuation byte: look further back
        }
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

pub(super) async fn stdin_write(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let sandbox_id = authorize(&cp, &headers, &cid).await?;
    let limited = http_body_util::Limited::new(body, MAX_STDIN_WRITE);
    let data = limited
        .collect()
        .await
        .map_err(|_| ServiceError::TooLarge("stdin writes are at most 1 MiB per request".into()))?
        .to_bytes();
    cp.write_stdin(&sandbox_id, &cid, data).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn stdin_close(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let sandbox_id = authorize(&cp, &headers, &cid).await?;
    cp.close_stdin(&sandbox_id, &cid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_chunks_become_bounded_events_with_exact_offsets() {
        let mut carry = [Utf8Carry::default(), Utf8Carry::default()];
        let data = vec![b'a'; 2 * SSE_EVENT_BYTES + 5];
        let events = output_events(&mut carry, false, 100, OutputSource::Stdout, &data);
        assert_eq!(events.len(), 3);
        // A character across an event boundary is sent whole in the next event (utf8).
        let mut data = vec![b'a'; SSE_EVENT_BYTES - 1];
        data.extend_from_slice("≤".as_bytes());
        let first = carry[0].push(0, &data[..SSE_EVENT_BYTES]);
        assert_eq!(
            first.map(|(o, t)| (o, t.len())),
            Some((0, SSE_EVENT_BYTES - 1))
        );
        let rest = carry[0].push(SSE_EVENT_BYTES as u64, &data[SSE_EVENT_BYTES..]);
        assert_eq!(rest, Some(((SSE_EVENT_BYTES - 1) as u64, "≤".to_string())));
    }

    #[test]
    fn octet_stream_is_asked_for_by_accept() {
        let mut h = HeaderMap::new();
        assert!(!wants_octet_stream(&h));
        h.insert("accept", "text/event-stream".parse().expect("header"));
        assert!(!wants_octet_stream(&h));
        h.insert(
            "accept",
            "text/plain, Application/Octet-Stream;q=0.9"
                .parse()
                .expect("header"),
        );
        assert!(wants_octet_stream(&h));
    }

    #[test]
    fn split_character_is_sent_whole() {
        let mut c = Utf8Carry::default();
        assert_eq!(c.push(0, b"\xE2"), None);
        assert_eq!(c.push(1, b"\x89\xA4\n"), Some((0, "≤\n".to_string())));
        assert_eq!(
            c.push(4, b"A\0B\xFFC"),
            Some((4, "A\0B\u{FFFD}C".to_string()))
        );
    }
}
