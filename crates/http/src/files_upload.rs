//! `POST /v1/sandboxes/{id}/files:upload?user=`: several files in one `multipart/form-data`
//! request.
//!
//! Parts are read in order:
//! - `path` (UTF-8 text) or `path_b64` (base64 of the path's bytes): destination of the next
//!   `file` part; relative paths are under the user's home.
//! - `mode` (text, optional): permission bits of the next `file` part (`0755`, `0o755` or `493`).
//! - `file`: the content, streamed straight to the sandbox. Without a `path` part before it, the
//!   part's `filename` is the destination.
//!
//! e.g. `curl -F path=/data/a.csv -F file=@a.csv -F path=/data/b.bin -F file=@b.bin ...`.
//!
//! Each file is written atomically (temporary file + rename) before the next part is read, and
//! may be at most [`cove_api_types::MAX_UPLOAD_BYTES`]. When a part fails, the files before it
//! stay written, nothing of the failing one is left, and the error names the failing part by its
//! 1-based index and path. The answer lists the written files in order.

use axum::extract::multipart::{Field, MultipartError};
use axum::extract::{Multipart, Path, State};
use axum::Json;
use bytes::Bytes;
use cove_api_types::UploadedFiles;
use cove_control_plane::{ControlPlane, ServiceError};
use cove_domain::InvalidInput;
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::extract::ApiQuery;
use super::files_query::WriteFileQuery;
use crate::render::ApiError;

/// Longest text part (`path`, `path_b64`, `mode`), in bytes.
const MAX_TEXT_PART: usize = 8 * 1024;
/// Chunks of one file part queued towards the sandbox.
const PART_QUEUE: usize = 4;

/// Query of `files:upload`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct UploadQuery {
    /// Owner of every written file and created directory (default: the sandbox's user).
    user: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/files:upload",
    tag = "files",
    description = "Write several files from one multipart/form-data body: for each file, optional `path`/`path_b64`/`mode` text parts, then its `file` part.",
    params(("id" = String, Path, description = "Sandbox id"), UploadQuery),
    request_body(content = Vec<u8>, content_type = "multipart/form-data"),
    responses((status = 200, body = cove_api_types::UploadedFiles, description = "The written files")),
)]
pub(super) async fn upload(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<UploadQuery>,
    mut multipart: Multipart,
) -> Result<Json<UploadedFiles>, ApiError> {
    cp.running_sandbox(&id).await?;
    let mut files = Vec::new();
    let (mut path, mut path_b64, mut mode) = (None, None, None);
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "path" => path = Some(text(field, "path").await?),
            "path_b64" => path_b64 = Some(text(field, "path_b64").await?),
            "mode" => mode = Some(text(field, "mode").await?),
            "file" => {
                let index = files.len() + 1;
                let (p, pb) = match (path.take(), path_b64.take()) {
                    (None, None) => (field.file_name().map(str::to_string), None),
                    given => given,
                };
                let shown = p.clone().or_else(|| pb.clone()).unwrap_or_default();
                let wq = WriteFileQuery {
                    path: p,
                    path_b64: pb,
                    user: q.user.clone(),
                    mode: mode.take(),
                };
                let info = write_part(&cp, &id, wq, field)
                    .await
                    .map_err(|e| in_part(e, &format!("file {index} ({shown})")))?;
                files.push(info);
            }
            other => {
                return Err(InvalidInput::new(
                    "multipart",
                    format!("unknown part {other:?}; parts are path, path_b64, mode and file"),
                )
                .into())
            }
        }
    }
    if path.is_some() || path_b64.is_some() || mode.is_some() {
        return Err(InvalidInput::new(
            "multipart",
            "a path or mode part has no file part after it",
        )
        .into());
    }
    if files.is_empty() {
        return Err(InvalidInput::new("multipart", "no file part").into());
    }
    Ok(Json(UploadedFiles { files }))
}

/// Streams one file part into the sandbox while reading it from the request.
async fn write_part(
    cp: &ControlPlane,
    id: &str,
    q: WriteFileQuery,
    mut field: Field<'_>,
) -> Result<cove_api_types::FileInfo, ServiceError> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(PART_QUEUE);
    let pump = async move {
        loop {
            let item = match field.chunk().await {
                Ok(Some(b)) => Ok(b),
                Ok(None) => break,
                Err(e) => Err(std::io::Error::other(e.body_text())),
            };
            let failed = item.is_err();
            // The writer gave up (its error is the answer): stop reading this part.
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    };
    let (path, user, options) = q.into_service()?;
    let body = ReceiverStream::new(rx).boxed();
    let write = cp.write_file(id, path, user, options, None, body);
    let ((), written) = tokio::join!(pump, write);
    written
}

/// A short text part.
async fn text(mut field: Field<'_>, name: &str) -> Result<String, ServiceError> {
    let mut buf = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        buf.extend_from_slice(&chunk);
        if buf.len() > MAX_TEXT_PART {
            return Err(
                InvalidInput::new(name, format!("is longer than {MAX_TEXT_PART} bytes")).into(),
            );
        }
    }
    String::from_utf8(buf).map_err(|_| {
        InvalidInput::new(name, "is not UTF-8; send a path's bytes as path_b64").into()
    })
}

fn multipart_error(e: MultipartError) -> ServiceError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ServiceError::TooLarge(e.body_text())
    } else {
        InvalidInput::new("multipart", e.body_text()).into()
    }
}

/// Prefixes an error's message with the part it is about; the code stays.
fn in_part(e: ServiceError, part: &str) -> ServiceError {
    use ServiceError as E;
    let p = |m: String| format!("{part}: {m}");
    match e {
        E::Invalid(i) => E::Invalid(InvalidInput::new(i.field, p(i.message))),
        E::FileNotFound(m) => E::FileNotFound(p(m)),
        E::FailedPrecondition(m) => E::FailedPrecondition(p(m)),
        E::AlreadyExists(m) => E::AlreadyExists(p(m)),
        E::PermissionDenied(m) => E::PermissionDenied(p(m)),
        E::NoSpace(m) => E::NoSpace(p(m)),
        E::TooLarge(m) => E::TooLarge(p(m)),
        E::Unavailable(m) => E::Unavailable(p(m)),
        other => other,
    }
}
