//! `/v1/nodes` handlers.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::Json;
use cove_api_types::NodeState;
use cove_control_plane::ControlPlane;

use crate::render::ApiError;

#[utoipa::path(
    get,
    path = "/v1/nodes",
    tag = "nodes",
    description = "List the nodes: state (`ready`, `draining`, `quarantined`, `lost`) and why, runtime, capacity, sandboxes placed and releases held, time since the last heartbeat.",
    responses((status = 200, body = cove_api_types::NodeList, description = "The nodes")),
)]
pub(super) async fn list(State(cp): State<ControlPlane>) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.list_nodes().await?))
}

#[utoipa::path(
    post,
    path = "/v1/nodes/{name}/drain",
    tag = "nodes",
    description = "Stop placing sandboxes on a node; its sandboxes keep running. 409 `failed_precondition` for a lost node or a server with one in-process node.",
    params(("name" = String, Path, description = "Node name")),
    responses((status = 200, body = cove_api_types::Node, description = "The node, draining")),
)]
pub(super) async fn drain(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_node_state(&name, NodeState::Draining).await?))
}

#[utoipa::path(
    post,
    path = "/v1/nodes/{name}/ready",
    tag = "nodes",
    description = "Let a drained or quarantined node take sandboxes again.",
    params(("name" = String, Path, description = "Node name")),
    responses((status = 200, body = cove_api_types::Node, description = "The node, ready")),
)]
pub(super) async fn ready(
    State(cp): State<ControlPlane>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_node_state(&name, NodeState::Ready).await?))
}
