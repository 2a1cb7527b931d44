//! `/v1/pools` handlers.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::PutPoolRequest;
use cove_control_plane::ControlPlane;

use super::extract::ApiJson;
use crate::render::ApiError;

#[utoipa::path(
    get,
    path = "/v1/pools",
    tag = "pools",
    description = "List warm pools with their sizes (ready, starting) and hits and misses.",
    responses((status = 200, body = cove_api_types::PoolList, description = "The pools")),
)]
pub(super) async fn list(State(cp): State<ControlPlane>) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_pools().await?))
}

#[utoipa::path(
    get,
    path = "/v1/pools/{name}",
    tag = "pools",
    description = "Get a warm pool.",
    params(("name" = String, Path, description = "Pool name")),
    responses((status = 200, body = cove_api_types::Pool, description = "The pool")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.get_pool(&name).await?))
}

#[utoipa::path(
    put,
    path = "/v1/pools/{name}",
    tag = "pools",
    description = "Create or replace a warm pool: the controller keeps `min_ready` members booted, never more than `max` and none past a quota of the pool's org (members count toward its quotas); a matching create claims one. `429 quota_exceeded` when `min_ready` members alone exceed a quota.",
    params(("name" = String, Path, description = "Pool name")),
    request_body = cove_api_types::PutPoolRequest,
    responses((status = 200, body = cove_api_types::Pool, description = "The pool")),
)]
pub(super) async fn put(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<PutPoolRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.put_pool(&name, req).await?))
}

/// Deletes the pool and drains it: `204`.
#[utoipa::path(
    delete,
    path = "/v1/pools/{name}",
    tag = "pools",
    description = "Delete a warm pool and its ready members.",
    params(("name" = String, Path, description = "Pool name")),
    responses((status = 204, description = "Deleted")),
)]
pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    cp.delete_pool(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
