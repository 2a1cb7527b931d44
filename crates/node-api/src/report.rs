//! What a node reports about itself when it joins a control plane and in every heartbeat.

use serde::{Deserialize, Serialize};

use crate::{NodeCapabilities, NodeCapacity, ReleaseRef};

/// A node's report: what it can do, what it has room for, what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Runtime, boundary and snapshot store of the node.
    pub capabilities: NodeCapabilities,
    /// CPUs, memory and sandboxes now.
    pub capacity: NodeCapacity,
    /// Releases whose root filesystems the node holds (its release cache).
    pub releases: Vec<ReleaseRef>,
    /// Ids of every sandbox the node holds anything of (as `list_sandboxes`).
    pub sandboxes: Vec<String>,
}

impl NodeReport {
    /// Reads a node's report from the node itself.
    ///
    /// # Errors
    /// The first failing call's error (`capacity`, `cached_releases`, `list_sandboxes`).
    pub async fn read(node: &dyn crate::NodeApi) -> Result<NodeReport, crate::NodeError> {
        Ok(NodeReport {
            capabilities: node.capabilities(),
            capacity: node.capacity().await?,
            releases: node.cached_releases().await?,
            sandboxes: node.list_sandboxes().await?,
        })
    }
}
