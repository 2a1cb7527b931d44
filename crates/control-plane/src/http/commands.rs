//! `/v1/sandboxes/{id}/commands` handlers.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{CommandState, CreateCommandRequest, KillRequest, SignalRequest};
use serde::Deserialize;

use super::extract::{idempotency_key, parse_wait, ApiJson, ApiQuery};
use crate::{ControlPlane, ServiceError};

pub(super) async fn create(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateCommandRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    let key = idempotency_key(&headers)?;
    Ok((
        StatusCode::CREATED,
        Json(cp.create_command_idempotent(&id, req, key).await?),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<CommandState>,
}

pub(super) async fn list(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.list_commands(&id, q.state).await?))
}

pub(super) async fn forget(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<impl IntoResponse, ServiceError> {
    cp.forget_command(&id, &cid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputQuery {
    wait: Option<String>,
    max_bytes: Option<u64>,
}

pub(super) async fn output(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<OutputQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    let wait = q.wait.as_deref().map(parse_wait).transpose()?;
    Ok(Json(cp.command_output(&id, &cid, wait, q.max_bytes).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GetQuery {
    wait: Option<String>,
}

pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<GetQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    let wait = q.wait.as_deref().map(parse_wait).transpose()?;
    Ok(Json(cp.get_command(&id, &cid, wait).await?))
}

pub(super) async fn signal(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiJson(req): ApiJson<SignalRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.signal_command(&id, &cid, &req.signal).await?))
}

pub(super) async fn kill(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiJson(req): ApiJson<KillRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.kill_command(&id, &cid, req.grace_ms).await?))
}

pub(super) async fn attachment(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok((
        StatusCode::CREATED,
        Json(cp.new_attachment(&id, &cid).await?),
    ))
}
