//! `/v1/sandboxes/{id}/commands` handlers.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{CommandState, CreateCommandRequest, KillRequest, SignalRequest};
use cove_control_plane::ControlPlane;
use serde::Deserialize;

use super::extract::{idempotency_key, parse_wait, ApiJson, ApiQuery};
use crate::render::ApiError;

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/commands",
    tag = "commands",
    description = "Start a command; its output and stdin are on the data plane (the attachment).",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same command with a new attachment token (the old one stops working); other body: 409 idempotency_mismatch; after the sandbox's processes restarted: 409 guest_restarted")),
    request_body = cove_api_types::CreateCommandRequest,
    responses((status = 201, body = cove_api_types::CreateCommandResponse, description = "The command and its attachment")),
)]
pub(super) async fn create(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateCommandRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let key = idempotency_key(&headers)?;
    Ok((
        StatusCode::CREATED,
        Json(cp.create_command_idempotent(&id, req, key).await?),
    ))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Only commands in this state (default: all kept).
    state: Option<CommandState>,
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/commands",
    tag = "commands",
    description = "List a sandbox's commands.",
    params(("id" = String, Path, description = "Sandbox id"), ListQuery),
    responses((status = 200, body = cove_api_types::CommandList, description = "The commands")),
)]
pub(super) async fn list(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_commands(&id, q.state).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}/commands/{cid}",
    tag = "commands",
    description = "Forget an ended command and its output.",
    params(("id" = String, Path, description = "Sandbox id"), ("cid" = String, Path, description = "Command id")),
    responses((status = 204, description = "Forgotten")),
)]
pub(super) async fn forget(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    cp.forget_command(&id, &cid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputQuery {
    /// Wait for the command to end first: `30s`, `500ms`, `2m` or a number of seconds.
    wait: Option<String>,
    /// Most bytes of output to answer, head and tail kept (default 1 MiB, at most 16 MiB).
    max_bytes: Option<u64>,
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/commands/{cid}/output",
    tag = "commands",
    description = "A command's output so far (or, with `?wait=`, once it ended), head and tail kept.",
    params(("id" = String, Path, description = "Sandbox id"), ("cid" = String, Path, description = "Command id"), OutputQuery),
    responses((status = 200, body = cove_api_types::CommandOutput, description = "The output")),
)]
pub(super) async fn output(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<OutputQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let wait = q.wait.as_deref().map(parse_wait).transpose()?;
    Ok(Json(cp.command_output(&id, &cid, wait, q.max_bytes).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct GetQuery {
    /// Wait for the command to end first: `30s`, `500ms`, `2m` or a number of seconds.
    wait: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/commands/{cid}",
    tag = "commands",
    description = "Get a command (`?wait=30s`: until it ends or the wait passes).",
    params(("id" = String, Path, description = "Sandbox id"), ("cid" = String, Path, description = "Command id"), GetQuery),
    responses((status = 200, body = cove_api_types::Command, description = "The command")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<GetQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let wait = q.wait.as_deref().map(parse_wait).transpose()?;
    Ok(Json(cp.get_command(&id, &cid, wait).await?))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/commands/{cid}/signal",
    tag = "commands",
    description = "Send a signal to a command.",
    params(("id" = String, Path, description = "Sandbox id"), ("cid" = String, Path, description = "Command id")),
    request_body = cove_api_types::SignalRequest,
    responses((status = 200, body = cove_api_types::Command, description = "The command")),
)]
pub(super) async fn signal(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiJson(req): ApiJson<SignalRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.signal_command(&id, &cid, &req.signal).await?))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/commands/{cid}/kill",
    tag = "commands",
    description = "Kill a command's whole process tree (SIGTERM, then SIGKILL after `grace_ms`).",
    params(("id" = String, Path, description = "Sandbox id"), ("cid" = String, Path, description = "Command id")),
    request_body = cove_api_types::KillRequest,
    responses((status = 200, body = cove_api_types::Command, description = "The command")),
)]
pub(super) async fn kill(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
    ApiJson(req): ApiJson<KillRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.kill_command(&id, &cid, req.grace_ms).await?))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/commands/{cid}/attachment",
    tag = "commands",
    description = "A new attachment token for a command (the old one is revoked).",
    params(("id" = String, Path, description = "Sandbox id"), ("cid" = String, Path, description = "Command id")),
    responses((status = 201, body = cove_api_types::Attachment, description = "The attachment")),
)]
pub(super) async fn attachment(
    State(cp): State<ControlPlane>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(cp.new_attachment(&id, &cid).await?),
    ))
}
