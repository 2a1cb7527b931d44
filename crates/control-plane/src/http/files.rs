//! `/v1/sandboxes/{id}/files` handlers.
//!
//! | route | answer |
//! |---|---|
//! | `PUT .../files?path=&user=&mode=` | streamed body → the file, atomically; `FileInfo` |
//! | `GET .../files?path=&offset=&length=` | the bytes (streamed) |
//! | `DELETE .../files?path=` | `204`; a symlink loses the link only |
//! | `POST .../files:upload?user=` | multipart/form-data, several files (`files_upload.rs`) |
//! | `GET .../files:list?path=&depth=` | `FileList` |
//! | `GET .../files:stat?path=` | `FileInfo` (`lstat`) |
//! | `GET .../files:exists?path=` | `{"exists": bool}` |
//! | `POST .../files:mkdir` `{path, user?}` | `FileInfo` |
//! | `POST .../files:move` `{from, to, user?}` | `FileInfo` of the destination |
//! | `GET .../files:watch?path=&recursive=` | SSE: one event per change (`create`, `write`, ...) |
//!
//! Every path may be given as `path_b64` instead (base64 bytes). A `path` (or any other) query
//! value that percent-decodes to bytes that are not UTF-8 is refused, never guessed.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use cove_api_types::{ErrorBody, FileEvent, MakeDirRequest, MoveRequest};
use cove_domain::InvalidInput;
use futures::{stream, StreamExt, TryStreamExt};

use super::extract::{ApiJson, ApiQuery};
use crate::{
    ControlPlane, ListQuery, PathQuery, ReadFileQuery, ServiceError, WatchQuery, WriteFileQuery,
};

/// How often an idle watch sends a keep-alive comment (which also notices a client that left).
const WATCH_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// The file routes (mounted under the management API's authentication).
pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route(
            "/v1/sandboxes/{id}/files",
            get(read).put(write).delete(remove),
        )
        .route(
            "/v1/sandboxes/{id}/files:upload",
            post(super::files_upload::upload).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/sandboxes/{id}/files:list", get(list))
        .route("/v1/sandboxes/{id}/files:stat", get(stat))
        .route("/v1/sandboxes/{id}/files:exists", get(exists))
        .route("/v1/sandboxes/{id}/files:mkdir", post(mkdir))
        .route("/v1/sandboxes/{id}/files:move", post(mv))
        .route("/v1/sandboxes/{id}/files:watch", get(watch))
}

/// Refuses a query whose values do not percent-decode to UTF-8 (the query extractor would
/// replace the bad bytes and name another file).
pub(super) fn check_query_utf8(uri: &Uri) -> Result<(), ServiceError> {
    let Some(query) = uri.query() else {
        return Ok(());
    };
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if std::str::from_utf8(&percent_decode(value.as_bytes())).is_err() {
            let key = String::from_utf8_lossy(&percent_decode(key.as_bytes())).into_owned();
            return Err(InvalidInput::new(
                key.clone(),
                format!(
                    "is not UTF-8 once percent-decoded; send the bytes base64-encoded as {key}_b64"
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// `application/x-www-form-urlencoded` decoding of one value: `+` is a space, `%XX` a byte.
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => match (hex(s[i + 1]), hex(s[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

async fn write(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<WriteFileQuery>,
    body: Body,
) -> Result<impl IntoResponse, ServiceError> {
    check_query_utf8(&uri)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let stream = body
        .into_data_stream()
        .map_err(std::io::Error::other)
        .boxed();
    Ok(Json(cp.write_file(&id, q, declared, stream).await?))
}

async fn read(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    ApiQuery(q): ApiQuery<ReadFileQuery>,
) -> Result<Response, ServiceError> {
    check_query_utf8(&uri)?;
    let (offset, length) = (q.offset.unwrap_or(0), q.length);
    let (info, stream) = cp.read_file(&id, q).await?;
    let mut resp = if info.size > 0 {
        // Promise what the file held when opened, and keep the promise: a file that grows
        // while it is read is cut at that length (one that shrinks ends the body early, which
        // the client sees as an incomplete response).
        let len = info
            .size
            .saturating_sub(offset)
            .min(length.unwrap_or(u64::MAX));
        let capped = stream.scan(len, |left, item| {
            let out = match item {
                Ok(_) if *left == 0 => None,
                Ok(mut b) => {
                    if b.len() as u64 > *left {
                        b.truncate(*left as usize);
                    }
                    *left -= b.len() as u64;
                    Some(Ok::<Bytes, std::io::Error>(b))
                }
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(out)
        });
        let mut resp = Body::from_stream(capped).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        resp
    } else {
        // Empty, or a file whose size says nothing (`/proc`): sent chunked, to its end.
        Body::from_stream(stream).into_response()
    };
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

async fn remove(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<StatusCode, ServiceError> {
    check_query_utf8(&uri)?;
    cp.remove_file(&id, q).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    check_query_utf8(&uri)?;
    Ok(Json(cp.list_files(&id, q).await?))
}

async fn stat(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    check_query_utf8(&uri)?;
    Ok(Json(cp.stat_file(&id, q).await?))
}

async fn exists(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    check_query_utf8(&uri)?;
    Ok(Json(cp.file_exists(&id, q).await?))
}

async fn mkdir(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<MakeDirRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok((StatusCode::CREATED, Json(cp.make_dir(&id, req).await?)))
}

async fn mv(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<MoveRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.move_file(&id, req).await?))
}

async fn watch(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    uri: Uri,
    ApiQuery(q): ApiQuery<WatchQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    check_query_utf8(&uri)?;
    let batches = cp.watch_files(&id, q).await?;
    let events = batches.flat_map(|batch| {
        let events: Vec<Result<Event, std::convert::Infallible>> = match batch {
            Ok(events) => events.iter().map(|e| Ok(sse_event(e))).collect(),
            Err(e) => vec![Ok(error_event(&e))],
        };
        stream::iter(events)
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(WATCH_KEEP_ALIVE)))
}

fn sse_event(e: &FileEvent) -> Event {
    Event::default()
        .event(e.event.as_str())
        .json_data(e)
        .unwrap_or_else(|_| Event::default().comment("unencodable event"))
}

/// The last event of a watch that failed: `event: error`, data = the usual error body.
fn error_event(e: &ServiceError) -> Event {
    let body = ErrorBody {
        code: e.code(),
        message: e.public_message(),
        request_id: super::current_request_id(),
    };
    Event::default()
        .event("error")
        .json_data(&body)
        .unwrap_or_else(|_| Event::default().comment("unencodable error"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode(b"..%2f..%2Fetc"), b"../../etc");
        assert_eq!(percent_decode(b"%2e%2e/x+y"), b"../x y");
        assert_eq!(percent_decode(b"%ff%"), b"\xff%");
        assert_eq!(percent_decode(b"%zz%4"), b"%zz%4");
    }

    #[test]
    fn non_utf8_query_values_are_refused() {
        let ok: Uri = "/x?path=%2Ftmp%2F%C3%A9&depth=2".parse().expect("uri");
        assert!(check_query_utf8(&ok).is_ok());
        let bad: Uri = "/x?path=%2Ftmp%2F%FF".parse().expect("uri");
        let err = check_query_utf8(&bad).expect_err("refused");
        assert_eq!(err.code(), cove_api_types::ErrorCode::InvalidArgument);
        assert!(err.to_string().contains("path_b64"), "{err}");
    }
}
