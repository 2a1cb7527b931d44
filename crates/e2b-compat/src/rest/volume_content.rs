//! E2B's volume content API on Cove's volume files (`ControlPlane::*_volume_*`), as the SDK's
//! `Volume`/`AsyncVolume` call it:
//!
//! | route | answer |
//! |---|---|
//! | `GET /volumecontent/{id}/path?path=` | `200` `VolumeEntryStat` (`lstat`) |
//! | `DELETE /volumecontent/{id}/path?path=` | `204`; a directory with its contents |
//! | `PATCH /volumecontent/{id}/path?path=` `{uid?, gid?, mode?}` | `200` `VolumeEntryStat` |
//! | `GET /volumecontent/{id}/dir?path=&depth=` | `200` `[VolumeEntryStat]` |
//! | `POST /volumecontent/{id}/dir?path=&uid=&gid=&mode=&force=` | `201` `VolumeEntryStat` |
//! | `GET /volumecontent/{id}/file?path=` | `200` the bytes |
//! | `PUT /volumecontent/{id}/file?path=&uid=&gid=&mode=&force=` | `201` `VolumeEntryStat` |
//!
//! Authorised by `Authorization: Bearer <token>`, the volume's content token that `POST
//! /volumes` and `GET /volumes/{id}` answer (`ControlPlane::volume_token`): it reaches that
//! one volume of its org only; any other credential is `401`. `force` of a directory means
//! "with its parents" (without it a missing parent is `404` and an existing path `409`); a
//! write always replaces an existing file and makes missing parents, so its `force` changes
//! nothing. `mode` is the permission bits (`0o7777` at most); `path` is from the volume's root.
//! Errors are E2B's `{code, message}`; a full volume is `507`.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use cove_api_types::{FileInfo, FileType, MakeVolumeDirRequest, VolumeFileAttrs};
use cove_control_plane::orgs::{audit, scope};
use cove_control_plane::ServiceError;
use futures::StreamExt;
use serde::Deserialize;

use super::parse_body;
use crate::error::RestError;
use crate::model::volumes::{VolumeEntryStat, VolumeEntryType};
use crate::E2b;

/// The content routes, behind the volume-token check.
pub(super) fn routes(e2b: E2b) -> Router<E2b> {
    Router::new()
        .route(
            "/volumecontent/{id}/path",
            get(stat).delete(remove).patch(set_attrs),
        )
        .route("/volumecontent/{id}/dir", get(list).post(mkdir))
        .route(
            "/volumecontent/{id}/file",
            get(read)
                .put(write)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            e2b,
            require_volume_token,
        ))
}

/// `Authorization: Bearer <token>` must be the content token of the volume in the path; the
/// request is then served as that volume's org.
async fn require_volume_token(
    State(e2b): State<E2b>,
    Path(params): Path<Vec<(String, String)>>,
    req: Request,
    next: Next,
) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return RestError::new(
            StatusCode::UNAUTHORIZED,
            "missing Authorization: Bearer <volume token>",
        )
        .into_response();
    };
    let id = params
        .iter()
        .find(|(k, _)| k == "id")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    let caller = match e2b.cp.authenticate_volume_token(id, token).await {
        Ok(caller) => caller,
        Err(ServiceError::Unauthorized(_)) => {
            return RestError::new(StatusCode::UNAUTHORIZED, "invalid volume token").into_response()
        }
        Err(e) => return RestError::from(e).into_response(),
    };
    if !audit::audited(req.method().as_str()) {
        return scope::scoped(caller, next.run(req)).await;
    }
    let action = format!(
        "{} e2b:/volumecontent/{{id}}{}",
        req.method(),
        tail(req.uri().path())
    );
    let resource = Some(id.to_string());
    let resp = scope::scoped(caller.clone(), next.run(req)).await;
    let status = resp.status().as_u16();
    e2b.cp
        .record_audit(audit::AuditRecord {
            caller,
            action,
            resource,
            status,
            outcome: audit::outcome(status, None),
            request_id: None,
        })
        .await;
    resp
}

/// `/path`, `/dir` or `/file` of a content route's path.
fn tail(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[i..])
}

/// `path` (and nothing else we need) of the query.
#[derive(Debug, Deserialize)]
struct PathArg {
    path: String,
}

/// `GET /dir` query.
#[derive(Debug, Deserialize)]
struct ListArgs {
    path: String,
    depth: Option<u32>,
}

/// `PUT /file` query (its `force` changes nothing: a write always replaces and makes parents).
#[derive(Debug, Deserialize)]
struct WriteArgs {
    path: String,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
}

/// `POST /dir` query.
#[derive(Debug, Deserialize)]
struct MakeArgs {
    path: String,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
    force: Option<bool>,
}

/// `PATCH /path` body.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AttrsBody {
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, RestError> {
    q.map(|Query(q)| q).map_err(|e| {
        RestError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid query: {}", e.body_text()),
        )
    })
}

/// `VolumeEntryStat` of a volume's file.
fn entry(i: &FileInfo) -> VolumeEntryStat {
    let entry_type = match i.file_type {
        FileType::File => VolumeEntryType::File,
        FileType::Dir => VolumeEntryType::Directory,
        FileType::Symlink => VolumeEntryType::Symlink,
        FileType::Other => VolumeEntryType::Unknown,
    };
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| super::rfc3339(t.unwrap_or(i.mtime));
    VolumeEntryStat {
        name: i.name.clone(),
        entry_type,
        path: i.path.clone(),
        size: i.size,
        mode: i.mode,
        uid: i.uid.unwrap_or_default(),
        gid: i.gid.unwrap_or_default(),
        atime: time(i.atime),
        mtime: super::rfc3339(i.mtime),
        ctime: time(i.ctime),
        target: i.symlink_target.clone(),
    }
}

/// `GET /volumecontent/{id}/path`.
async fn stat(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    q: Result<Query<PathArg>, QueryRejection>,
) -> Result<Response, RestError> {
    let q = query(q)?;
    let info = e2b.cp.stat_volume_file(&id, q.path).await?;
    Ok(axum::Json(entry(&info)).into_response())
}

/// `DELETE /volumecontent/{id}/path`.
async fn remove(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    q: Result<Query<PathArg>, QueryRejection>,
) -> Result<Response, RestError> {
    let q = query(q)?;
    e2b.cp.remove_volume_file(&id, q.path).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PATCH /volumecontent/{id}/path`.
async fn set_attrs(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    q: Result<Query<PathArg>, QueryRejection>,
    body: Bytes,
) -> Result<Response, RestError> {
    let q = query(q)?;
    let b: AttrsBody = parse_body(&body)?;
    let info = e2b
        .cp
        .set_volume_file_attrs(
            &id,
            q.path,
            VolumeFileAttrs {
                uid: b.uid,
                gid: b.gid,
                mode: b.mode,
            },
        )
        .await?;
    Ok(axum::Json(entry(&info)).into_response())
}

/// `GET /volumecontent/{id}/dir`.
async fn list(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    q: Result<Query<ListArgs>, QueryRejection>,
) -> Result<Response, RestError> {
    let q = query(q)?;
    let listed = e2b
        .cp
        .list_volume_files(
            &id,
            Some(q.path),
            Some(
                q.depth
                    .unwrap_or(1)
                    .clamp(1, cove_api_types::MAX_LIST_DEPTH),
            ),
        )
        .await?;
    let out: Vec<VolumeEntryStat> = listed.entries.iter().map(entry).collect();
    Ok(axum::Json(out).into_response())
}

/// `POST /volumecontent/{id}/dir`.
async fn mkdir(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    q: Result<Query<MakeArgs>, QueryRejection>,
) -> Result<Response, RestError> {
    let q = query(q)?;
    let info = e2b
        .cp
        .make_volume_dir(
            &id,
            MakeVolumeDirRequest {
                path: q.path,
                parents: Some(q.force.unwrap_or(false)),
                uid: q.uid,
                gid: q.gid,
                mode: q.mode,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(entry(&info))).into_response())
}

/// `GET /volumecontent/{id}/file`.
async fn read(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    q: Result<Query<PathArg>, QueryRejection>,
) -> Result<Response, RestError> {
    let q = query(q)?;
    let (_info, stream) = e2b.cp.read_volume_file(&id, q.path).await?;
    let mut resp = Body::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

/// `PUT /volumecontent/{id}/file`: the body streamed to the file.
async fn write(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    headers: HeaderMap,
    q: Result<Query<WriteArgs>, QueryRejection>,
    body: Body,
) -> Result<Response, RestError> {
    let q = query(q)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let stream = body
        .into_data_stream()
        .map(|r| r.map_err(std::io::Error::other))
        .boxed();
    let info = e2b
        .cp
        .write_volume_file(
            &id,
            q.path,
            VolumeFileAttrs {
                uid: q.uid,
                gid: q.gid,
                mode: q.mode,
            },
            declared,
            stream,
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(entry(&info))).into_response())
}
