//! Nodes: list them, stop placement on one (drain), let one take sandboxes again (ready).
//! A server with one in-process node lists it as `local` and cannot drain it.

use cove_api_types::{Node, NodeList, NodeState};

use crate::{ControlPlane, ServiceError};
use cove_cluster::{ClusterError, NodeSummary};

fn view(s: NodeSummary) -> Node {
    Node {
        name: s.name,
        address: s.address,
        state: s.state,
        reason: s.reason,
        runtime: s.capabilities.runtime,
        cpus: s.capacity.cpus,
        memory_bytes: s.capacity.memory_bytes,
        memory_available_bytes: s.capacity.memory_available_bytes,
        sandboxes: s.sandboxes,
        releases: s
            .releases
            .iter()
            .map(|r| format!("{}/{}", r.template, r.number))
            .collect(),
        last_heartbeat_ms: s.last_heartbeat_ms,
    }
}

impl ControlPlane {
    /// Every node, by name.
    ///
    /// # Errors
    /// `Internal` when the single node's capacity cannot be read.
    pub async fn list_nodes(&self) -> Result<NodeList, ServiceError> {
        crate::orgs::require_admin()?;
        let nodes = self
            .placement()
            .list_nodes()
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?;
        Ok(NodeList {
            nodes: nodes.into_iter().map(view).collect(),
        })
    }

    /// Sets a node `draining` (no new placement) or `ready` (placement again, ending a
    /// quarantine).
    ///
    /// # Errors
    /// `NodeNotFound`; `FailedPrecondition` for a lost node, or on a server with one
    /// in-process node; `Invalid` for a state other than `draining` or `ready`.
    pub async fn set_node_state(&self, name: &str, state: NodeState) -> Result<Node, ServiceError> {
        crate::orgs::require_admin()?;
        if !matches!(state, NodeState::Draining | NodeState::Ready) {
            return Err(ServiceError::Invalid(cove_domain::InvalidInput::new(
                "state",
                "a node can be set draining or ready",
            )));
        }
        let summary = self
            .placement()
            .set_node_state(name, state)
            .await
            .map_err(|e| match e {
                ClusterError::NodeNotFound(n) => ServiceError::NodeNotFound(n),
                e @ ClusterError::NodeLost(_) => ServiceError::FailedPrecondition(e.to_string()),
                ClusterError::OneNode => ServiceError::FailedPrecondition(
                    "this server runs one in-process node; start it with --join-token to manage \
                     nodes"
                        .into(),
                ),
                ClusterError::Store(e) => e.into(),
            })?;
        Ok(view(summary))
    }
}
