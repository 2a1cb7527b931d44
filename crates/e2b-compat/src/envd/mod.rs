//! The in-sandbox `envd` API over Cove's services: the `process.Process` and
//! `filesystem.Filesystem` Connect services (JSON codec), `/files` upload and download, and
//! `/health`.
//!
//! Unary RPCs take and answer `application/json`; streaming RPCs take and answer
//! `application/connect+json` envelopes ([`crate::envelope`]) and always end with one
//! end-of-stream frame, which carries the error if the stream fails.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::envelope::{self, Decoder, FLAG_END_STREAM, FLAG_MESSAGE};
use crate::error::{ConnectCode, ConnectError, EnvdHttpError};
use crate::model::errors::EndOfStream;
use crate::E2b;

pub mod files;
pub mod filesystem;
pub mod paths;
pub mod process;
pub mod watchers;

/// Content type of streaming Connect messages (exact: the SDK compares it without parameters).
pub const CONNECT_JSON: &str = "application/connect+json";

/// Largest unary request body (1 MiB).
pub const MAX_UNARY_BODY: usize = 1 << 20;

/// Default keepalive interval of a stream whose request names none (90 s, as upstream).
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);

/// The envd router (requests already carry their [`crate::dispatch::Target`]).
pub fn router(e2b: E2b) -> Router {
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .route(
            "/files",
            get(files::download)
                .post(files::upload)
                // Uploads stream through; Cove's file service bounds their size.
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/process.Process/Start", post(process::start))
        .route("/process.Process/Connect", post(process::connect))
        .route("/process.Process/List", post(process::list))
        .route("/process.Process/SendInput", post(process::send_input))
        .route("/process.Process/StreamInput", post(process::stream_input))
        .route("/process.Process/SendSignal", post(process::send_signal))
        .route("/process.Process/CloseStdin", post(process::close_stdin))
        .route("/process.Process/Update", post(process::update))
        .route("/filesystem.Filesystem/Stat", post(filesystem::stat))
        .route("/filesystem.Filesystem/MakeDir", post(filesystem::make_dir))
        .route("/filesystem.Filesystem/Move", post(filesystem::rename))
        .route("/filesystem.Filesystem/ListDir", post(filesystem::list_dir))
        .route("/filesystem.Filesystem/Remove", post(filesystem::remove))
        .route("/filesystem.Filesystem/WatchDir", post(watchers::watch_dir))
        .route(
            "/filesystem.Filesystem/CreateWatcher",
            post(watchers::create_watcher),
        )
        .route(
            "/filesystem.Filesystem/GetWatcherEvents",
            post(watchers::get_watcher_events),
        )
        .route(
            "/filesystem.Filesystem/RemoveWatcher",
            post(watchers::remove_watcher),
        )
        .fallback(|| async {
            ConnectError::new(
                ConnectCode::Unimplemented,
                "this envd route is not implemented by Cove",
            )
        })
        .with_state(e2b)
}

/// Checks `X-Access-Token` for every envd route except `/health` and `/files` (which check
/// it themselves, with signatures as the alternative).
#[allow(clippy::result_large_err)]
pub(crate) fn check_access_token(e2b: &E2b, cove_id: &str, req: &Request) -> Result<(), Response> {
    let path = req.uri().path();
    if path == "/health" || path == "/files" {
        return Ok(());
    }
    let given = req
        .headers()
        .get("x-access-token")
        .and_then(|v| v.to_str().ok());
    if given.is_some_and(|t| constant_time_eq(t.as_bytes(), e2b.access_token(cove_id).as_bytes())) {
        return Ok(());
    }
    Err(EnvdHttpError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized access, please provide a valid access token or method signing if supported",
    )
    .into_response())
}

/// Token and signature compares that take the same time wherever the first difference is.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// The user named by `Authorization: Basic base64(user:)`, if any.
pub(crate) fn basic_user(headers: &HeaderMap) -> Result<Option<String>, ConnectError> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || ConnectError::new(ConnectCode::Unauthenticated, "invalid authorization header");
    let v = v.to_str().map_err(|_| bad())?;
    let Some((scheme, rest)) = v.split_once(' ') else {
        return Err(bad());
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(bad());
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let user = raw.split_once(':').map_or(raw.as_str(), |(u, _)| u);
    if user.is_empty() {
        return Ok(None);
    }
    if !user
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(ConnectError::new(
            ConnectCode::Unauthenticated,
            format!("invalid username: '{user}'"),
        ));
    }
    Ok(Some(user.to_string()))
}

/// `Connect-Timeout-Ms` of a request (`None`: absent, zero or invalid).
pub(crate) fn connect_timeout(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

/// `Keepalive-Ping-Interval` (seconds) of a stream request, else [`DEFAULT_KEEPALIVE`].
pub(crate) fn keepalive_interval(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_KEEPALIVE, Duration::from_secs)
}

/// Parses a unary request body.
pub(crate) fn unary_request<T: DeserializeOwned>(body: &Bytes) -> Result<T, ConnectError> {
    let body: &[u8] = if body.is_empty() { b"{}" } else { body };
    serde_json::from_slice(body).map_err(|e| {
        ConnectError::new(
            ConnectCode::InvalidArgument,
            format!("invalid request message: {e}"),
        )
    })
}

/// A unary answer.
pub(crate) fn unary_response<T: Serialize>(msg: &T) -> Response {
    axum::Json(msg).into_response()
}

/// Reads the single request message of a server-streaming RPC (one envelope, then the end of
/// the body).
pub(crate) async fn stream_request<T: DeserializeOwned>(body: Body) -> Result<T, ConnectError> {
    let limited = http_body_util::Limited::new(body, envelope::MAX_ENVELOPE_PAYLOAD + 5);
    let bytes = limited
        .collect()
        .await
        .map_err(|_| {
            ConnectError::new(
                ConnectCode::ResourceExhausted,
                "request message is too large",
            )
        })?
        .to_bytes();
    let mut d = Decoder::new();
    d.push(&bytes);
    let bad = |m: String| ConnectError::new(ConnectCode::InvalidArgument, m);
    let env = d
        .next_envelope()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("missing request message".into()))?;
    serde_json::from_slice(&env.payload).map_err(|e| bad(format!("invalid request message: {e}")))
}

/// Decodes the envelopes of a client-streaming request body as they arrive.
pub(crate) fn stream_messages<T: DeserializeOwned + Send + 'static>(
    body: Body,
) -> impl Stream<Item = Result<T, ConnectError>> + Send {
    let frames = body.into_data_stream();
    futures::stream::unfold(
        (frames, Decoder::new(), false),
        |(mut frames, mut d, done)| async move {
            if done {
                return None;
            }
            loop {
                match d.next_envelope() {
                    Ok(Some(env)) if env.is_end_stream() => return None,
                    Ok(Some(env)) => {
                        let msg = serde_json::from_slice::<T>(&env.payload).map_err(|e| {
                            ConnectError::new(
                                ConnectCode::InvalidArgument,
                                format!("invalid request message: {e}"),
                            )
                        });
                        let failed = msg.is_err();
                        return Some((msg, (frames, d, failed)));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let err = ConnectError::new(ConnectCode::InvalidArgument, e.to_string());
                        return Some((Err(err), (frames, d, true)));
                    }
                }
                match frames.next().await {
                    Some(Ok(chunk)) => d.push(&chunk),
                    Some(Err(_)) => {
                        let err =
                            ConnectError::new(ConnectCode::Canceled, "the request body broke off");
                        return Some((Err(err), (frames, d, true)));
                    }
                    None => {
                        if d.finish().is_err() {
                            let err = ConnectError::new(
                                ConnectCode::InvalidArgument,
                                "the request body ended inside a message",
                            );
                            return Some((Err(err), (frames, d, true)));
                        }
                        return None;
                    }
                }
            }
        },
    )
}

/// One message envelope.
pub(crate) fn message_frame<T: Serialize>(msg: &T) -> Bytes {
    let json = serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec());
    envelope::encode(FLAG_MESSAGE, &json)
}

/// The end-of-stream envelope: `{}` or `{"error": {...}}`.
pub(crate) fn end_frame(error: Option<&ConnectError>) -> Bytes {
    let end = EndOfStream {
        error: error.map(ConnectError::body),
    };
    let json = serde_json::to_vec(&end).unwrap_or_else(|_| b"{}".to_vec());
    envelope::encode(FLAG_END_STREAM, &json)
}

/// A streaming answer from ready-made envelopes.
pub(crate) fn stream_response(frames: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    let body = Body::from_stream(frames.map(Ok::<_, std::convert::Infallible>));
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONNECT_JSON));
    resp
}

/// A stream that fails before its first message: `200` with only the end-of-stream error.
pub(crate) fn stream_error(e: ConnectError) -> Response {
    stream_response(futures::stream::once(async move { end_frame(Some(&e)) }))
}
