//! `/v1/sandboxes/{id}/expiry` handlers: when a live sandbox expires, and what its expiry does.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::SetExpiryRequest;
use cove_control_plane::ControlPlane;

use super::extract::ApiJson;
use crate::render::ApiError;

/// `PUT /v1/sandboxes/{id}/expiry` `{expires_at | in_s, on_expiry?}`.
#[utoipa::path(
    put,
    path = "/v1/sandboxes/{id}/expiry",
    tag = "sandboxes",
    description = "Set when the sandbox expires (`expires_at`, or `in_s` seconds from now; a time past expires it at once) and, optionally, what its expiry does (`delete` or `suspend`). The expiry controller then deletes or suspends it, recording the reason `expired` (or `ttl` for the expiry its create's `ttl_s` set).",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::SetExpiryRequest,
    responses((status = 200, body = cove_api_types::Sandbox, description = "The sandbox with its new expiry")),
)]
pub(super) async fn set(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<SetExpiryRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_expiry(&id, req).await?))
}

/// `DELETE /v1/sandboxes/{id}/expiry`.
#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}/expiry",
    tag = "sandboxes",
    description = "The sandbox expires no more (its TTL included).",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::Sandbox, description = "The sandbox, without an expiry")),
)]
pub(super) async fn clear(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.clear_expiry(&id).await?))
}
