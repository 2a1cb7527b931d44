//! Which node keeps a volume. On a single server, its in-process node. On a cluster, the node
//! chosen when the volume was made ([`cove_cluster::Placement::place_volume`]), recorded with
//! the volume in the store, which is the one place that says where a volume is: every call on
//! the volume goes to that node, and a sandbox that mounts volumes runs only there (it is
//! placed there at create, wake and restore, and cannot wake elsewhere). A volume whose node
//! is lost answers `503 unavailable` and stays recorded; nothing of it is deleted.

use std::sync::Arc;

use cove_domain::{InvalidInput, NodeState};
use cove_node_api::{NodeApi, NodeError};
use cove_store::VolumeRecord;

use crate::{ControlPlane, ServiceError};

/// How a volume's node is named in messages.
fn node_name(v: &VolumeRecord) -> &str {
    v.node.as_deref().unwrap_or("(the server's own)")
}

impl ControlPlane {
    /// The node for a new volume of `size_mib` MiB, and its name as the volume records it
    /// (`None`: the server's own node). Errors: `unsupported` when no node of the cluster
    /// keeps volumes, `unavailable` when none that does can take it now.
    pub(super) async fn node_for_new_volume(
        &self,
        size_mib: u64,
    ) -> Result<(Option<String>, Arc<dyn NodeApi>), ServiceError> {
        match self.placement().place_volume(size_mib).await {
            Ok(p) => Ok((p.node, p.api)),
            Err(NodeError::Unsupported(m)) => Err(ServiceError::Unsupported(m)),
            Err(e) => Err(ServiceError::Unavailable(format!(
                "no node can keep the volume now: {e}"
            ))),
        }
    }

    /// The node that keeps volume `v`. Errors: `unavailable` when it is lost or not joined.
    pub(crate) async fn volume_node(
        &self,
        v: &VolumeRecord,
    ) -> Result<Arc<dyn NodeApi>, ServiceError> {
        self.placement()
            .volume_node(v.node.as_deref())
            .await
            .map_err(|e| {
                ServiceError::Unavailable(format!(
                    "volume {} is kept on node {}, which cannot be reached: {e}",
                    v.name,
                    node_name(v)
                ))
            })
    }

    /// Whether some node keeps volumes (on a single server, its node; on a cluster, a node that
    /// is not lost).
    pub(crate) fn volumes_kept(&self) -> bool {
        self.placement().volumes_kept()
    }

    /// Checks that the volumes of one sandbox (`field` names each in errors) can be mounted
    /// together now: they are kept on one node and that node takes sandboxes (`ready`; a
    /// single server's one node always does). Errors: `invalid_argument` naming the volumes and their nodes when they are
    /// on different nodes; `unavailable` naming the node and its state when it is not ready
    /// (a sandbox that mounts them runs only there).
    pub(crate) fn check_volumes_node(
        &self,
        volumes: &[(String, VolumeRecord)],
    ) -> Result<(), ServiceError> {
        // A detached object volume is on no node yet: it goes where the others are.
        let volumes: Vec<&(String, VolumeRecord)> = volumes
            .iter()
            .filter(|(_, v)| !super::objects::detached(v))
            .collect();
        let Some((_, first)) = volumes.first() else {
            return Ok(());
        };
        for (field, v) in &volumes[1..] {
            if v.node != first.node {
                return Err(InvalidInput::new(
                    field.clone(),
                    format!(
                        "volume {} is kept on node {} and volume {} on node {}: a sandbox \
                         mounts volumes of one node only",
                        v.name,
                        node_name(v),
                        first.name,
                        node_name(first)
                    ),
                )
                .into());
            }
        }
        let names: Vec<&str> = volumes.iter().map(|(_, v)| v.name.as_str()).collect();
        let why = match self.placement().volume_node_state(first.node.as_deref()) {
            Some((_, NodeState::Ready)) => return Ok(()),
            Some((node, state)) => format!("node {node}, which is {state}"),
            None => format!("node {}, which is not joined", node_name(first)),
        };
        let what = match names[..] {
            [one] => format!("volume {one} is"),
            _ => format!("volumes {} are", names.join(", ")),
        };
        Err(ServiceError::Unavailable(format!(
            "{what} kept on {why}: a sandbox that mounts volumes runs only on their node"
        )))
    }
}
