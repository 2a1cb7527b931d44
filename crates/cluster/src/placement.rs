//! [`Placement`]: where sandboxes and volumes live, as the control plane's services ask it.
//! Every node call goes through one [`NodeApi`] (which routes it); what the services need
//! beyond that is here: the nodes to list and drain, the node that keeps a volume, and the
//! registry's loss and change signals for the controller. A [`Cluster`] answers for several
//! nodes; a single server is a cluster of one, [`OneNode`], over its in-process node.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cove_domain::NodeState;
use cove_node_api::{NodeApi, NodeError};
use cove_store::StoreError;
use tracing::warn;

use super::{Cluster, ClusterError, NodeSummary, VolumePlace};

/// Name of a single server's one node.
pub const LOCAL_NODE: &str = "local";

/// Where sandboxes and volumes live: the nodes behind the services' [`NodeApi`].
#[async_trait]
pub trait Placement: Send + Sync + 'static {
    /// Every node, by name (a shared registry is read again first; a failed read is logged).
    ///
    /// # Errors
    /// The node's, when a single node's capacity cannot be read.
    async fn list_nodes(&self) -> Result<Vec<NodeSummary>, NodeError>;

    /// Sets a node `draining` (no new placement) or `ready` (placement again, ending a
    /// quarantine), for every replica sharing the registry.
    ///
    /// # Errors
    /// `NodeNotFound`; `NodeLost`; `OneNode` when the nodes cannot be managed (a single
    /// server's); `Store` when the shared registry cannot be read.
    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
    ) -> Result<NodeSummary, ClusterError>;

    /// How often the registry shared with other replicas is read again ([`Self::sync`];
    /// `None`: there is none to read).
    fn sync_every(&self) -> Option<Duration>;

    /// Reads the registry shared with other replicas again (nothing when there is none).
    ///
    /// # Errors
    /// The store's.
    async fn sync(&self) -> Result<(), StoreError>;

    /// Marks every node without a heartbeat for the timeout `lost`, records that for other
    /// replicas, and returns their names. Their running sandboxes then read as gone (reason
    /// `node_lost`) to reconciliation; suspended ones are untouched.
    async fn expire_lost(&self) -> Vec<String>;

    /// Whether a node was lost, or came back with sandboxes placed nowhere, since the last
    /// call (the controller then reconciles at once).
    fn take_changed(&self) -> bool;

    /// Asks for another reconciliation at the controller's next pass (one left a lost node's
    /// sandbox unsettled).
    fn mark_changed(&self);

    /// The name of the lost node `sandbox_id` was placed on, if it was placed on one.
    fn on_lost_node(&self, sandbox_id: &str) -> Option<String>;

    /// `Ok` when volumes are offered at all; the message says why not. A cluster offers them
    /// whatever nodes are there now (a create finds a node that keeps volumes or says why not).
    fn offers_volumes(&self) -> Result<(), String>;

    /// Whether some node keeps volumes now (one that is not lost).
    fn volumes_kept(&self) -> bool;

    /// Chooses the node that keeps a new volume of `size_mib` MiB.
    ///
    /// # Errors
    /// `Unsupported` when no node keeps volumes; `NoNodeAvailable` naming why none fits.
    async fn place_volume(&self, size_mib: u64) -> Result<VolumePlace, NodeError>;

    /// The node that keeps a volume recorded on `node` (`None`: the server's own node).
    ///
    /// # Errors
    /// `NodeUnreachable` when that node is lost or not joined.
    async fn volume_node(&self, node: Option<&str>) -> Result<Arc<dyn NodeApi>, NodeError>;

    /// The name and state of the node that keeps a volume recorded on `node` (`None`: it is
    /// not joined).
    fn volume_node_state(&self, node: Option<&str>) -> Option<(String, NodeState)>;
}

#[async_trait]
impl Placement for Cluster {
    async fn list_nodes(&self) -> Result<Vec<NodeSummary>, NodeError> {
        // Nodes that joined other replicas, as the shared registry has them now.
        if let Err(e) = Cluster::sync(self).await {
            warn!(error = %e, "cannot read the shared node registry");
        }
        Ok(self.nodes())
    }

    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
    ) -> Result<NodeSummary, ClusterError> {
        Cluster::sync(self).await.map_err(ClusterError::Store)?;
        let summary = self.set_state(name, state)?;
        self.record_states(&[name.to_string()]).await;
        Ok(summary)
    }

    fn sync_every(&self) -> Option<Duration> {
        Some(self.cfg.heartbeat_interval.min(Duration::from_secs(1)))
    }

    async fn sync(&self) -> Result<(), StoreError> {
        Cluster::sync(self).await
    }

    async fn expire_lost(&self) -> Vec<String> {
        let lost = self.expire();
        self.record_states(&lost).await;
        lost
    }

    fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::SeqCst)
    }

    fn mark_changed(&self) {
        self.changed.store(true, Ordering::SeqCst);
    }

    fn on_lost_node(&self, sandbox_id: &str) -> Option<String> {
        Cluster::on_lost_node(self, sandbox_id)
    }

    fn offers_volumes(&self) -> Result<(), String> {
        Ok(())
    }

    fn volumes_kept(&self) -> bool {
        self.nodes()
            .iter()
            .any(|n| n.state != NodeState::Lost && n.capabilities.volumes)
    }

    async fn place_volume(&self, size_mib: u64) -> Result<VolumePlace, NodeError> {
        Cluster::place_volume(self, size_mib).await
    }

    async fn volume_node(&self, node: Option<&str>) -> Result<Arc<dyn NodeApi>, NodeError> {
        Cluster::volume_node(self, node).await
    }

    fn volume_node_state(&self, node: Option<&str>) -> Option<(String, NodeState)> {
        Cluster::volume_node_state(self, node)
    }
}

/// A single server's placement: a cluster of one, its in-process node ([`LOCAL_NODE`]),
/// always ready, never lost, holding every sandbox and every volume. Its state cannot be
/// set.
pub struct OneNode {
    node: Arc<dyn NodeApi>,
}

impl OneNode {
    /// The placement of a server whose only node is `node`.
    pub fn new(node: Arc<dyn NodeApi>) -> Self {
        OneNode { node }
    }
}

#[async_trait]
impl Placement for OneNode {
    async fn list_nodes(&self) -> Result<Vec<NodeSummary>, NodeError> {
        let capacity = self.node.capacity().await?;
        let releases = self.node.cached_releases().await.unwrap_or_default();
        Ok(vec![NodeSummary {
            name: LOCAL_NODE.into(),
            address: "in-process".into(),
            state: NodeState::Ready,
            reason: None,
            capabilities: self.node.capabilities(),
            capacity,
            releases,
            sandboxes: capacity.sandboxes,
            last_heartbeat_ms: 0,
        }])
    }

    async fn set_node_state(
        &self,
        name: &str,
        _state: NodeState,
    ) -> Result<NodeSummary, ClusterError> {
        if name != LOCAL_NODE {
            return Err(ClusterError::NodeNotFound(name.to_string()));
        }
        Err(ClusterError::OneNode)
    }

    fn sync_every(&self) -> Option<Duration> {
        None
    }

    async fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn expire_lost(&self) -> Vec<String> {
        Vec::new()
    }

    fn take_changed(&self) -> bool {
        false
    }

    fn mark_changed(&self) {}

    fn on_lost_node(&self, _sandbox_id: &str) -> Option<String> {
        None
    }

    fn offers_volumes(&self) -> Result<(), String> {
        let caps = self.node.capabilities();
        if !caps.volumes {
            return Err(format!(
                "volumes are not supported on the {} runtime in this version (runc only)",
                caps.runtime
            ));
        }
        Ok(())
    }

    fn volumes_kept(&self) -> bool {
        self.node.capabilities().volumes
    }

    async fn place_volume(&self, _size_mib: u64) -> Result<VolumePlace, NodeError> {
        Ok(VolumePlace {
            node: None,
            api: self.node.clone(),
        })
    }

    async fn volume_node(&self, _node: Option<&str>) -> Result<Arc<dyn NodeApi>, NodeError> {
        Ok(self.node.clone())
    }

    fn volume_node_state(&self, _node: Option<&str>) -> Option<(String, NodeState)> {
        Some((LOCAL_NODE.to_string(), NodeState::Ready))
    }
}
