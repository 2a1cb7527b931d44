//! `/v1/pools` handlers.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::PutPoolRequest;

use super::extract::ApiJson;
use crate::{ControlPlane, ServiceError};

pub(super) async fn list(
    State(cp): State<ControlPlane>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.list_pools().await?))
}

pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.get_pool(&name).await?))
}

pub(super) async fn put(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<PutPoolRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.put_pool(&name, req).await?))
}

/// Deletes the pool and drains it: `204`.
pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ServiceError> {
    cp.delete_pool(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
