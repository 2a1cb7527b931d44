//! `/v1/templates` handlers.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::BuildReleaseRequest;

use super::extract::ApiJson;
use crate::{ControlPlane, ServiceError};

pub(super) async fn list(
    State(cp): State<ControlPlane>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.list_templates().await?))
}

pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.get_template(&name).await?))
}

pub(super) async fn build(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<BuildReleaseRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok((
        StatusCode::ACCEPTED,
        Json(cp.build_release(&name, req).await?),
    ))
}
