//! `POST /v1/sandboxes/{id}/{pause|resume|suspend|wake}` and `GET /v1/capabilities`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::LifecycleRequest;

use super::extract::{idempotency_key, ApiJson};
use crate::{ControlPlane, LifecycleVerb, ServiceError};

async fn call(
    cp: ControlPlane,
    id: String,
    verb: LifecycleVerb,
    headers: HeaderMap,
    req: LifecycleRequest,
) -> Result<impl IntoResponse, ServiceError> {
    let key = idempotency_key(&headers)?;
    let op = cp.lifecycle(&id, verb, req, key).await?;
    Ok((StatusCode::ACCEPTED, Json(op)))
}

pub(super) async fn pause(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    call(cp, id, LifecycleVerb::Pause, headers, req).await
}

pub(super) async fn resume(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    call(cp, id, LifecycleVerb::Resume, headers, req).await
}

pub(super) async fn suspend(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    call(cp, id, LifecycleVerb::Suspend, headers, req).await
}

pub(super) async fn wake(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<LifecycleRequest>,
) -> Result<impl IntoResponse, ServiceError> {
    call(cp, id, LifecycleVerb::Wake, headers, req).await
}

pub(super) async fn capabilities(State(cp): State<ControlPlane>) -> impl IntoResponse {
    Json(cp.capabilities())
}
