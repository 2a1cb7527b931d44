//! `/v1/orgs` and `/v1/audit` handlers: orgs, their API keys and quotas (admin token), and the
//! audit log.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{CreateApiKeyRequest, CreateOrgRequest, Quotas, UpdateOrgRequest};
use cove_control_plane::ControlPlane;
use serde::Deserialize;

use super::extract::{ApiJson, ApiQuery};
use crate::render::ApiError;

#[utoipa::path(
    post,
    path = "/v1/orgs",
    tag = "orgs",
    description = "Create an org (admin token only), with quotas (default: unlimited), features turned off for it (default: none) and checkpoint retention (default: kept until deleted).",
    request_body = cove_api_types::CreateOrgRequest,
    responses((status = 201, body = cove_api_types::Org, description = "The org")),
)]
pub(super) async fn create(
    State(cp): State<ControlPlane>,
    ApiJson(req): ApiJson<CreateOrgRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(cp.create_org(req).await?)))
}

#[utoipa::path(
    get,
    path = "/v1/orgs",
    tag = "orgs",
    description = "List orgs (admin token only).",
    responses((status = 200, body = cove_api_types::OrgList, description = "The orgs")),
)]
pub(super) async fn list(State(cp): State<ControlPlane>) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_orgs().await?))
}

#[utoipa::path(
    get,
    path = "/v1/orgs/{org}",
    tag = "orgs",
    description = "Get an org, its quotas and what it holds now toward each (`usage`; the admin token any org, a key its own).",
    params(("org" = String, Path, description = "Org id")),
    responses((status = 200, body = cove_api_types::Org, description = "The org")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.get_org(&org).await?))
}

#[utoipa::path(
    patch,
    path = "/v1/orgs/{org}",
    tag = "orgs",
    description = "Change an org's settings (admin token only): each field given (quotas, disabled_features, checkpoint_retention) replaces the org's, absent ones stay. A feature turned off answers 403 feature_disabled to that org only.",
    params(("org" = String, Path, description = "Org id")),
    request_body = cove_api_types::UpdateOrgRequest,
    responses((status = 200, body = cove_api_types::Org, description = "The org")),
)]
pub(super) async fn update(
    State(cp): State<ControlPlane>,
    Path(org): Path<String>,
    ApiJson(req): ApiJson<UpdateOrgRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.update_org(&org, req).await?))
}

#[utoipa::path(
    put,
    path = "/v1/orgs/{org}/quotas",
    tag = "orgs",
    description = "Replace an org's quotas (admin token only); an absent limit is unlimited.",
    params(("org" = String, Path, description = "Org id")),
    request_body = cove_api_types::Quotas,
    responses((status = 200, body = cove_api_types::Org, description = "The org")),
)]
pub(super) async fn set_quotas(
    State(cp): State<ControlPlane>,
    Path(org): Path<String>,
    ApiJson(q): ApiJson<Quotas>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_org_quotas(&org, q).await?))
}

#[utoipa::path(
    post,
    path = "/v1/orgs/{org}/keys",
    tag = "orgs",
    description = "Create an API key of the org (admin token only). The secret is in this answer only; the server keeps its SHA-256 hash.",
    params(("org" = String, Path, description = "Org id")),
    request_body = cove_api_types::CreateApiKeyRequest,
    responses((status = 201, body = cove_api_types::CreatedApiKey, description = "The key and its secret")),
)]
pub(super) async fn create_key(
    State(cp): State<ControlPlane>,
    Path(org): Path<String>,
    ApiJson(req): ApiJson<CreateApiKeyRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(cp.create_api_key(&org, req).await?),
    ))
}

#[utoipa::path(
    get,
    path = "/v1/orgs/{org}/keys",
    tag = "orgs",
    description = "List the org's API keys, revoked ones too, without secrets (admin token only).",
    params(("org" = String, Path, description = "Org id")),
    responses((status = 200, body = cove_api_types::ApiKeyList, description = "The keys")),
)]
pub(super) async fn list_keys(
    State(cp): State<ControlPlane>,
    Path(org): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_api_keys(&org).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/orgs/{org}/keys/{key}",
    tag = "orgs",
    description = "Revoke an API key (admin token only): it answers 401 from then on.",
    params(("org" = String, Path, description = "Org id"), ("key" = String, Path, description = "Key id")),
    responses((status = 200, body = cove_api_types::ApiKey, description = "The revoked key")),
)]
pub(super) async fn revoke_key(
    State(cp): State<ControlPlane>,
    Path((org, key)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.revoke_api_key(&org, &key).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    /// Records after this seq (default 0: from the oldest kept).
    after: Option<u64>,
    /// Page size (default and most 500).
    limit: Option<u32>,
    /// Only this org's records (the admin token only; a key always sees its own org's).
    org: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "orgs",
    description = "Audit records of state-changing requests, oldest first, after `?after=` (pass the answer's `next_after` for the next page). The admin token sees every org's, a key its own org's.",
    params(AuditQuery),
    responses((status = 200, body = cove_api_types::AuditPage, description = "A page of records")),
)]
pub(super) async fn audit(
    State(cp): State<ControlPlane>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(
        cp.list_audit(q.after.unwrap_or(0), q.limit, q.org).await?,
    ))
}
