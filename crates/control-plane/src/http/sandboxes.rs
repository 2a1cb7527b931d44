//! `/v1/sandboxes` handlers.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::{CreateSandboxRequest, SandboxState};
use cove_domain::InvalidInput;
use serde::Deserialize;

use super::extract::{idempotency_key, ApiJson, ApiQuery};
use crate::{ControlPlane, ServiceError};

pub(super) async fn create(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateSandboxRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    let key = idempotency_key(&headers)?;
    let resp = cp.create_sandbox(req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<String>,
    template: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

pub(super) async fn list(
    State(cp): State<ControlPlane>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(
            SandboxState::parse(s)
                .ok_or_else(|| InvalidInput::new("state", format!("unknown state {s:?}")))?,
        ),
    };
    Ok(Json(
        cp.list_sandboxes(state, q.template, q.limit, q.cursor)
            .await?,
    ))
}

pub(super) async fn get_one(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ServiceError> {
    let sandbox = cp.get_sandbox(&id).await?;
    cp.touch(&sandbox.id);
    Ok(Json(sandbox))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteQuery {
    deadline_s: Option<u64>,
}

pub(super) async fn delete(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<impl IntoResponse, ServiceError> {
    let op = cp.delete_sandbox(&id, q.deadline_s).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}
