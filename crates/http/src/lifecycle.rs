//! `POST /v1/sandboxes/{id}/{pause|resume|suspend|wake}` and `GET /v1/capabilities`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::LifecycleRequest;
use cove_control_plane::{ControlPlane, LifecycleVerb};

use super::extract::{idempotency_key, ApiJson};
use crate::render::ApiError;

async fn call(
    cp: ControlPlane,
    id: String,
    verb: LifecycleVerb,
    headers: HeaderMap,
    req: LifecycleRequest,
) -> Result<impl IntoResponse, ApiError> {
    let key = idempotency_key(&headers)?;
    let op = cp.lifecycle(&id, verb, req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/pause",
    tag = "lifecycle",
    description = "Freeze a running sandbox.",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::LifecycleRequest,
    responses((status = 202, body = cove_api_types::Operation, description = "The operation")),
)]
pub(super) async fn pause(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ApiError> {
    call(cp, id, LifecycleVerb::Pause, headers, req).await
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/resume",
    tag = "lifecycle",
    description = "Thaw a paused sandbox.",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::LifecycleRequest,
    responses((status = 202, body = cove_api_types::Operation, description = "The operation")),
)]
pub(super) async fn resume(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ApiError> {
    call(cp, id, LifecycleVerb::Resume, headers, req).await
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/suspend",
    tag = "lifecycle",
    description = "Save a sandbox to the snapshot store and release its node resources.",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::LifecycleRequest,
    responses((status = 202, body = cove_api_types::Operation, description = "The operation")),
)]
pub(super) async fn suspend(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ApiError> {
    call(cp, id, LifecycleVerb::Suspend, headers, req).await
}

#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/wake",
    tag = "lifecycle",
    description = "Bring a paused or suspended sandbox back to running.",
    params(("id" = String, Path, description = "Sandbox id"), ("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::LifecycleRequest,
    responses((status = 202, body = cove_api_types::Operation, description = "The operation")),
)]
pub(super) async fn wake(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ApiError> {
    call(cp, id, LifecycleVerb::Wake, headers, req).await
}

#[utoipa::path(
    get,
    path = "/v1/capabilities",
    tag = "lifecycle",
    description = "What this server's runtime can do.",
    responses((status = 200, body = cove_api_types::RuntimeCapabilities, description = "The capabilities")),
)]
pub(super) async fn capabilities(State(cp): State<ControlPlane>) -> impl IntoResponse {
    Json(cp.capabilities())
}
