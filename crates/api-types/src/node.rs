//! Nodes: the hosts that run sandboxes (`GET /v1/nodes`, drain, ready).

use serde::{Deserialize, Serialize};

pub use cove_domain::NodeState;

/// A node as the control plane sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Node {
    /// Node name (unique; `local` for the server's own node).
    pub name: String,
    /// Where its node agent is served (`in-process` for the server's own node).
    pub address: String,
    /// `ready`, `draining`, `quarantined` or `lost`.
    pub state: NodeState,
    /// Why it is quarantined or lost.
    pub reason: Option<String>,
    /// Its runtime (`runc`, `qemu`, `gvisor`).
    pub runtime: String,
    /// CPUs it offers.
    pub cpus: u32,
    /// Memory of the host, bytes.
    pub memory_bytes: u64,
    /// Memory available now, bytes (at its last heartbeat).
    pub memory_available_bytes: u64,
    /// Sandboxes placed on it.
    pub sandboxes: u32,
    /// Releases it holds (`template/number`).
    pub releases: Vec<String>,
    /// Milliseconds since its last heartbeat (0 for the server's own node).
    pub last_heartbeat_ms: u64,
}

/// `GET /v1/nodes` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeList {
    /// Every node, by name.
    pub nodes: Vec<Node>,
}
