//! `/v1/templates` handlers.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::BuildReleaseRequest;

use super::extract::ApiJson;
use crate::{ControlPlane, ServiceError};

#[utoipa::path(
    get,
    path = "/v1/templates",
    tag = "templates",
    description = "List templates with their releases.",
    responses((status = 200, body = cove_api_types::TemplateList, description = "The templates")),
)]
pub(super) async fn list(
    State(cp): State<ControlPlane>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.list_templates().await?))
}

#[utoipa::path(
    get,
    path = "/v1/templates/{name}",
    tag = "templates",
    description = "Get a template.",
    params(("name" = String, Path, description = "Template name")),
    responses((status = 200, body = cove_api_types::Template, description = "The template")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ServiceError> {
    Ok(Json(cp.get_template(&name).await?))
}

#[utoipa::path(
    post,
    path = "/v1/templates/{name}/releases",
    tag = "templates",
    description = "Build a new release of a template (an operation; its log streams from `/v1/operations/{id}/logs`).",
    params(("name" = String, Path, description = "Template name")),
    request_body = cove_api_types::BuildReleaseRequest,
    responses((status = 202, body = cove_api_types::BuildReleaseResponse, description = "The release being built and its operation")),
)]
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
