//! `/v1/templates` handlers.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{BuildReleaseRequest, CreateTemplateQuery};
use cove_control_plane::{ControlPlane, ServiceError, TemplateFileBuild};

use super::extract::{ApiJson, ApiQuery};
use crate::render::ApiError;

#[utoipa::path(
    get,
    path = "/v1/templates",
    tag = "templates",
    description = "List templates with their releases.",
    responses((status = 200, body = cove_api_types::TemplateList, description = "The templates")),
)]
pub(super) async fn list(State(cp): State<ControlPlane>) -> Result<impl IntoResponse, ApiError> {
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
) -> Result<impl IntoResponse, ApiError> {
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
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::ACCEPTED,
        Json(cp.build_release(&name, req).await?),
    ))
}

/// Largest build context `POST /v1/templates` takes, in bytes (256 MiB).
pub const MAX_CONTEXT_BYTES: usize = 256 << 20;

#[utoipa::path(
    post,
    path = "/v1/templates",
    tag = "templates",
    description = "Create a template from a template file (a Dockerfile subset: FROM, RUN, COPY/ADD, ENV, WORKDIR, USER, ARG, START, READY) and build its next release (an operation; its log, with each step and its output, streams from `/v1/operations/{id}/logs`). The body is the build context, a tar archive (at most 256 MiB) holding the file. A bad file is a 400 naming its line.",
    params(CreateTemplateQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "The build context"),
    responses((status = 202, body = cove_api_types::BuildReleaseResponse, description = "The release being built and its operation")),
)]
pub(super) async fn create(
    State(cp): State<ControlPlane>,
    ApiQuery(q): ApiQuery<CreateTemplateQuery>,
    body: axum::body::Body,
) -> Result<impl IntoResponse, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_CONTEXT_BYTES);
    let context = http_body_util::BodyExt::collect(limited)
        .await
        .map_err(|_| {
            ServiceError::TooLarge(format!(
                "the build context is over {MAX_CONTEXT_BYTES} bytes or was cut off"
            ))
        })?
        .to_bytes();
    Ok((
        StatusCode::ACCEPTED,
        Json(cp.create_template_from_file(build_of(q), context).await?),
    ))
}

/// The build a `POST /v1/templates` query asks for.
fn build_of(q: CreateTemplateQuery) -> TemplateFileBuild {
    let CreateTemplateQuery {
        name,
        file,
        no_cache,
        network,
        build_args,
    } = q;
    TemplateFileBuild {
        name,
        file,
        no_cache,
        network,
        build_args,
    }
}

#[utoipa::path(
    delete,
    path = "/v1/templates/{name}",
    tag = "templates",
    description = "Delete a template built from a file and all its releases (409 while a sandbox or warm pool uses one; built-in templates cannot be deleted).",
    params(("name" = String, Path, description = "Template name")),
    responses((status = 204, description = "Deleted")),
)]
pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    cp.delete_template(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    delete,
    path = "/v1/templates/{name}/releases/{number}",
    tag = "templates",
    description = "Delete one release: its files go and its number is never reused (409 while a sandbox or warm pool uses it, or while it builds).",
    params(("name" = String, Path, description = "Template name"), ("number" = u32, Path, description = "Release number")),
    responses((status = 204, description = "Deleted")),
)]
pub(super) async fn delete_release(
    State(cp): State<ControlPlane>,
    Path((name, number)): Path<(String, u32)>,
) -> Result<impl IntoResponse, ApiError> {
    cp.delete_release(&name, number).await?;
    Ok(StatusCode::NO_CONTENT)
}
