//! `/v1/sandboxes` handlers.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{CreateSandboxRequest, EgressPolicy, SandboxState};
use cove_control_plane::ControlPlane;
use cove_domain::InvalidInput;
use serde::Deserialize;

use super::extract::{idempotency_key, ApiJson, ApiQuery};
use crate::render::ApiError;

#[utoipa::path(
    post,
    path = "/v1/sandboxes",
    tag = "sandboxes",
    description = "Create a sandbox; it starts in the background (poll the operation).",
    params(("Idempotency-Key" = Option<String>, Header, description = "Same key and body: the same operation; same key, other body: 409 idempotency_mismatch")),
    request_body = cove_api_types::CreateSandboxRequest,
    responses((status = 202, body = cove_api_types::CreateSandboxResponse, description = "The sandbox (`creating`) and its create operation")),
)]
pub(super) async fn create(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateSandboxRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let key = idempotency_key(&headers)?;
    let resp = cp.create_sandbox(req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

/// Prefix of the list filters on metadata: `?metadata.KEY=VALUE` (repeatable; all must match).
const METADATA_FILTER: &str = "metadata.";

/// `GET /v1/sandboxes?state=&template=&metadata.KEY=VALUE&limit=&cursor=`. The query is read
/// as pairs because metadata keys are the caller's; any other key is `invalid_argument`.
#[utoipa::path(
    get,
    path = "/v1/sandboxes",
    tag = "sandboxes",
    description = "List sandboxes, newest first, one page at a time. Filter on metadata with `?metadata.KEY=VALUE` (repeatable; all must match).",
    params(("state" = Option<cove_api_types::SandboxState>, Query, description = "Only this state"), ("template" = Option<String>, Query, description = "Only this template"), ("limit" = Option<u32>, Query, description = "Page size, 1 to 500 (default 100)"), ("cursor" = Option<String>, Query, description = "`next_cursor` of the page before")),
    responses((status = 200, body = cove_api_types::SandboxList, description = "One page")),
)]
pub(super) async fn list(
    State(cp): State<ControlPlane>,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
) -> Result<impl IntoResponse, ApiError> {
    let (mut state, mut template, mut limit, mut cursor) = (None, None, None, None);
    let mut metadata = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "state" => {
                state = Some(SandboxState::parse(&value).ok_or_else(|| {
                    InvalidInput::new("state", format!("unknown state {value:?}"))
                })?)
            }
            "template" => template = Some(value),
            "limit" => {
                limit = Some(value.parse::<u32>().map_err(|_| {
                    InvalidInput::new("limit", format!("must be a number, not {value:?}"))
                })?)
            }
            "cursor" => cursor = Some(value),
            k => match k.strip_prefix(METADATA_FILTER) {
                Some(name) if !name.is_empty() => metadata.push((name.to_string(), value)),
                _ => {
                    return Err(InvalidInput::new(
                        "query",
                        format!(
                        "unknown parameter {key:?} (state, template, metadata.KEY, limit, cursor)"
                    ),
                    )
                    .into())
                }
            },
        }
    }
    Ok(Json(
        cp.list_sandboxes(state, template, metadata, limit, cursor)
            .await?,
    ))
}

#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}",
    tag = "sandboxes",
    description = "Get a sandbox.",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::Sandbox, description = "The sandbox")),
)]
pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let sandbox = cp.get_sandbox(&id).await?;
    cp.touch(&sandbox.id);
    Ok(Json(sandbox))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteQuery {
    /// Seconds the delete may take before it fails with `deadline_exceeded` (default 30 min).
    deadline_s: Option<u64>,
}

#[utoipa::path(
    delete,
    path = "/v1/sandboxes/{id}",
    tag = "sandboxes",
    description = "Delete a sandbox and everything it had (an operation).",
    params(("id" = String, Path, description = "Sandbox id"), DeleteQuery),
    responses((status = 202, body = cove_api_types::Operation, description = "The delete operation")),
)]
pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let op = cp.delete_sandbox(&id, q.deadline_s).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

/// `GET /v1/sandboxes/{id}/metrics`.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/metrics",
    tag = "sandboxes",
    description = "CPU, memory and disk use of a running or paused sandbox, now and over the last 10 minutes.",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::SandboxMetrics, description = "Its usage")),
)]
pub(super) async fn metrics(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.sandbox_metrics(&id).await?))
}

/// `GET /v1/sandboxes/{id}/network`: policy and counters.
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/network",
    tag = "sandboxes",
    description = "The sandbox's egress policy, whether its node's gateway enforces it now, its address and the gateway's traffic counters.",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::SandboxNetwork, description = "Its network")),
)]
pub(super) async fn network(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.sandbox_network(&id).await?))
}

/// `PUT /v1/sandboxes/{id}/network` `{internet, allow, deny}`: replaces the policy.
#[utoipa::path(
    put,
    path = "/v1/sandboxes/{id}/network",
    tag = "sandboxes",
    description = "Replace the sandbox's egress policy; the next connection follows it (a suspended sandbox gets it when it wakes).",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::EgressPolicy,
    responses((status = 200, body = cove_api_types::SandboxNetwork, description = "Its network with the new policy")),
)]
pub(super) async fn set_network(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(policy): ApiJson<EgressPolicy>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_sandbox_network(&id, policy).await?))
}
