//! `POST/GET /v1/sandboxes/{id}/checkpoints`, `GET /v1/checkpoints[/{cid}]`,
//! `DELETE /v1/checkpoints/{cid}`, `POST /v1/sandboxes/{id}/rollback`,
//! `POST /v1/sandboxes/{id}/fork`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{CreateCheckpointRequest, ForkRequest, RollbackRequest};
use cove_control_plane::ControlPlane;
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;

use super::extract::{idempotency_key, ApiJson, ApiQuery};
use crate::render::ApiError;

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/checkpoints",
    tag = "checkpoints",
    description = "Save the sandbox's state (files; memory where the runtime can) as a checkpoint \
        while it keeps running (its processes are frozen briefly: `pause_ms`). 403 \
        `feature_disabled` when checkpoints are off.",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::CreateCheckpointRequest,
    responses((status = 202, body = cove_api_types::CreateCheckpointResponse, description = "The checkpoint (`creating`) and the operation saving it")),
)]
pub(super) async fn create(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateCheckpointRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let key = idempotency_key(&headers)?;
    let resp = cp.create_checkpoint(&id, req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/checkpoints",
    tag = "checkpoints",
    description = "The sandbox's checkpoints, newest first (also after the sandbox was deleted).",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::CheckpointList, description = "The checkpoints")),
)]
pub(super) async fn list_of_sandbox(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_checkpoints(Some(&id)).await?))
}

#[utoipa::path(
    get,
    path = "/v1/checkpoints",
    tag = "checkpoints",
    description = "Every checkpoint, newest first.",
    responses((status = 200, body = cove_api_types::CheckpointList, description = "The checkpoints")),
)]
pub(super) async fn list(State(cp): State<ControlPlane>) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_checkpoints(None).await?))
}

#[utoipa::path(
    get,
    path = "/v1/checkpoints/{cid}",
    tag = "checkpoints",
    description = "One checkpoint.",
    params(("cid" = String, Path, description = "Checkpoint id")),
    responses((status = 200, body = cove_api_types::Checkpoint, description = "The checkpoint")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.checkpoint(&cid).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/checkpoints/{cid}",
    tag = "checkpoints",
    description = "Delete a checkpoint (not while it is being saved: 409 failed_precondition).",
    params(("cid" = String, Path, description = "Checkpoint id")),
    responses((status = 204, description = "Deleted")),
)]
pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    cp.delete_checkpoint(&cid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/rollback",
    tag = "checkpoints",
    description = "Return the sandbox to one of its `ready` checkpoints. On runc its processes \
        restart: every command of the sandbox ends.",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::RollbackRequest,
    responses((status = 202, body = cove_api_types::Operation, description = "The rollback operation")),
)]
pub(super) async fn rollback(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<RollbackRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let key = idempotency_key(&headers)?;
    let op = cp.rollback(&id, req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/fork",
    tag = "checkpoints",
    description = "Create `count` sandboxes from a fresh checkpoint of this one. Each fork has its \
        own id, hostname and address; on runc its processes start afresh over the parent's files.",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::ForkRequest,
    responses((status = 202, body = cove_api_types::ForkResponse, description = "The checkpoint, its operation, and each fork with its create operation")),
)]
pub(super) async fn fork(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<ForkRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let resp = cp.fork(&id, req).await?;
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

#[utoipa::path(
    get,
    path = "/v1/checkpoints/{cid}/archive",
    tag = "checkpoints",
    description = "Download a `ready` checkpoint as one archive (an uncompressed tar, format \
        version 1: `cove-checkpoint.json` (`CheckpointArchiveHeader`), `snapshot.json`, \
        `artifacts/<name>`). 403 `feature_disabled` when export is off.",
    params(("cid" = String, Path, description = "Checkpoint id")),
    responses((status = 200, content_type = "application/x-tar", description = "The archive")),
)]
pub(super) async fn archive(
    State(cp): State<ControlPlane>,
    Path(cid): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (c, body) = cp.export_checkpoint(&cid).await?;
    let mut resp = Body::from_stream(body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{}.tar\"", c.id)) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

/// `POST /v1/checkpoints/import?name=` query.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ImportQuery {
    /// Name of the new checkpoint (default: the exported one's).
    #[serde(default)]
    name: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v1/checkpoints/import",
    tag = "checkpoints",
    description = "Upload a checkpoint archive (as `GET /v1/checkpoints/{cid}/archive` makes \
        them); it becomes a new `ready` checkpoint to create sandboxes from. The archive is \
        checked whole before anything is kept: 400 `invalid_argument` (field `archive`) for \
        another format or version, an entry out of the sandbox (`..`, absolute, through or to \
        a symlink or hard link out), a device, or another runtime's checkpoint.",
    params(ImportQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "The archive"),
    responses((status = 201, body = cove_api_types::Checkpoint, description = "The new checkpoint")),
)]
pub(super) async fn import(
    State(cp): State<ControlPlane>,
    ApiQuery(q): ApiQuery<ImportQuery>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let stream = body
        .into_data_stream()
        .map_err(std::io::Error::other)
        .boxed();
    let c = cp.import_checkpoint(stream, q.name).await?;
    Ok((StatusCode::CREATED, Json(c)))
}
