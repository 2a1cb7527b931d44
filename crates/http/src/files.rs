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

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use cove_api_types::{ErrorBody, FileEvent, MakeDirRequest, MoveRequest};
use cove_control_plane::{ControlPlane, ServiceError};
use futures::stream::BoxStream;
use futures::{stream, StreamExt};

use super::extract::{ApiJson, ApiQuery};
use super::files_query::{ListQuery, PathQuery, ReadFileQuery, WatchQuery, WriteFileQuery};
use crate::render::ApiError;

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

#[utoipa::path(
    put,
    path = "/v1/sandboxes/{id}/files",
    tag = "files",
    description = "Write a file from the request body (streamed), atomically.",
    params(("id" = String, Path, description = "Sandbox id"), WriteFileQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = cove_api_types::FileInfo, description = "The written file")),
)]
pub(super) async fn write(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<WriteFileQuery>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    upload(&headers, body, |declared, stream| async move {
        let (path, user, options) = q.into_service()?;
        cp.write_file(&id, path, user, options, declared, stream)
            .await
    })
    .await
    .map(Json)
    .map_err(ApiError)
}

/// Most bytes, and longest time, an upload refused early is drained for.
const DRAIN_BYTES: usize = 64 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Reads and drops what is left of a request body, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
/// Runs `write` over an upload's body (a stream of chunks) and its declared length
/// (`Content-Length`). After an early refusal (a full disk, a bad path) the rest of the body is
/// drained: a socket closed with unread bytes is reset, and the reset can destroy the error
/// answer before the client reads it.
pub(super) async fn upload<T, Fut>(
    headers: &HeaderMap,
    body: Body,
    write: impl FnOnce(Option<u64>, BoxStream<'static, std::io::Result<Bytes>>) -> Fut,
) -> Result<T, ServiceError>
where
    Fut: std::future::Future<Output = Result<T, ServiceError>>,
{
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let shared = Arc::new(tokio::sync::Mutex::new(body.into_data_stream()));
    let stream = stream::unfold(shared.clone(), |body| async move {
        let next = body.lock().await.next().await;
        next.map(|chunk| (chunk.map_err(std::io::Error::other), body))
    })
    .boxed();
    let written = write(declared, stream).await;
    if written.is_err() {
        drain(&shared).await;
    }
    written
}

async fn drain(body: &tokio::sync::Mutex<axum::body::BodyDataStream>) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut body = body.lock().await;
        let mut read = 0;
        while let Some(Ok(chunk)) = body.next().await {
            read += chunk.len();
            if read > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files",
    tag = "files",
    description = "Read a file's bytes (streamed).",
    params(("id" = String, Path, description = "Sandbox id"), ReadFileQuery),
    responses((status = 200, body = Vec<u8>, content_type = "application/octet-stream", description = "The bytes")),
)]
pub(super) async fn read(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ReadFileQuery>,
) -> Result<Response, ApiError> {
    let (path, user, options) = q.into_service()?;
    let (offset, length) = (options.offset.unwrap_or(0), options.length);
    let (info, stream) = cp.read_file(&id, path, user, options).await?;
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

#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}/files",
    tag = "files",
    description = "Remove a file or directory (a symlink loses the link only).",
    params(("id" = String, Path, description = "Sandbox id"), PathQuery),
    responses((status = 204, description = "Removed")),
)]
pub(super) async fn remove(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let (path, user) = q.into_service()?;
    cp.remove_file(&id, path, user).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files:list",
    tag = "files",
    description = "List a directory.",
    params(("id" = String, Path, description = "Sandbox id"), ListQuery),
    responses((status = 200, body = cove_api_types::FileList, description = "The entries")),
)]
pub(super) async fn list(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let (path, user, options) = q.into_service()?;
    Ok(Json(cp.list_files(&id, path, user, options).await?))
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files:stat",
    tag = "files",
    description = "Describe a path (`lstat`).",
    params(("id" = String, Path, description = "Sandbox id"), PathQuery),
    responses((status = 200, body = cove_api_types::FileInfo, description = "The path")),
)]
pub(super) async fn stat(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let (path, user) = q.into_service()?;
    Ok(Json(cp.stat_file(&id, path, user).await?))
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files:exists",
    tag = "files",
    description = "Whether anything is at a path.",
    params(("id" = String, Path, description = "Sandbox id"), PathQuery),
    responses((status = 200, body = cove_api_types::FileExists, description = "Whether it exists")),
)]
pub(super) async fn exists(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let (path, user) = q.into_service()?;
    Ok(Json(cp.file_exists(&id, path, user).await?))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/files:mkdir",
    tag = "files",
    description = "Make a directory and its parents.",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::MakeDirRequest,
    responses((status = 201, body = cove_api_types::FileInfo, description = "The directory")),
)]
pub(super) async fn mkdir(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<MakeDirRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(cp.make_dir(&id, req).await?)))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/files:move",
    tag = "files",
    description = "Move or rename a file or directory.",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::MoveRequest,
    responses((status = 200, body = cove_api_types::FileInfo, description = "The destination")),
)]
pub(super) async fn mv(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<MoveRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.move_file(&id, req).await?))
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files:watch",
    tag = "files",
    description = "Server-sent events, one per change below a directory: the event name is the kind (`create`, `write`, `remove`, `rename`, `chmod`), the data one `FileEvent` as JSON; `error` with an `ErrorBody` ends it.",
    params(("id" = String, Path, description = "Sandbox id"), WatchQuery),
    responses((status = 200, body = cove_api_types::FileEvent, content_type = "text/event-stream", description = "An event stream (`text/event-stream`)")),
)]
pub(super) async fn watch(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<WatchQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let (path, user, options) = q.into_service()?;
    let batches = cp.watch_files(&id, path, user, options).await?;
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
