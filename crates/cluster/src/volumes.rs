//! Volumes on a cluster. A volume is an image on one node and never moves: the control plane
//! records that node with the volume (the store is the one place that says where a volume
//! is) and addresses every call on the volume to it through [`Placement::volume_node`](crate::Placement::volume_node); a
//! sandbox that mounts volumes is placed only on their node ([`Cluster::place`] narrows the
//! candidates to it), at create, at wake and at a restore of a checkpoint alike.
//!
//! A volume's node is named by its node name, or `None` for the server's own in-process node
//! (the `local` member, which is not shared between replicas).

use std::sync::Arc;

use cove_domain::NodeState;
use cove_node_api::{LaunchVolume, NodeApi, NodeError};
use tracing::warn;

use super::{scheduler, Cluster, State};

/// The node chosen for a new volume.
pub struct VolumePlace {
    /// Its name as the volume records it (`None`: the server's own node).
    pub node: Option<String>,
    /// The node.
    pub api: Arc<dyn NodeApi>,
}

impl Cluster {
    /// Chooses the node that keeps a new volume of `size_mib` MiB ([`scheduler::place_volume`]:
    /// a ready node of the cluster's runtime that keeps volumes, with the disk for it, the most
    /// free disk first). With a shared registry, reads it again when none fits here.
    ///
    /// # Errors
    /// `Unsupported` when no node that is not lost keeps volumes at all (a VM runtime's);
    /// `NoNodeAvailable` naming the rule that left none.
    pub(crate) async fn place_volume(&self, size_mib: u64) -> Result<VolumePlace, NodeError> {
        match self.place_volume_here(size_mib) {
            Err(NodeError::NoNodeAvailable(_)) if self.shared.is_some() => {
                if let Err(e) = self.sync_fresh().await {
                    warn!(error = %e, "cannot read the shared node registry");
                }
                self.place_volume_here(size_mib)
            }
            other => other,
        }
    }

    fn place_volume_here(&self, size_mib: u64) -> Result<VolumePlace, NodeError> {
        let st = self.lock();
        let members: Vec<_> = st.nodes.iter().collect();
        let candidates: Vec<scheduler::VolumeCandidate<'_>> = members
            .iter()
            .map(|(name, m)| scheduler::VolumeCandidate {
                name,
                state: m.state,
                runtime: &m.report.capabilities.runtime,
                volumes: m.report.capabilities.volumes,
                disk_available_bytes: m.report.capacity.disk_available_bytes,
                sandboxes: st.placement.values().filter(|p| p.node == **name).count() as u32,
            })
            .collect();
        match scheduler::place_volume(&candidates, &self.cfg.runtime, size_mib) {
            Ok(i) => {
                let (name, m) = members[i];
                Ok(VolumePlace {
                    node: (!m.local).then(|| name.clone()),
                    api: m.api.clone(),
                })
            }
            Err(scheduler::NoPlacement::NoVolumes)
                if !st
                    .nodes
                    .values()
                    .any(|m| m.state != NodeState::Lost && m.report.capabilities.volumes) =>
            {
                Err(NodeError::Unsupported(
                    "no node of this cluster keeps volumes (runc nodes do; VM runtimes do not \
                     in this version)"
                        .into(),
                ))
            }
            Err(e) => Err(NodeError::NoNodeAvailable(format!(
                "{e} (a volume of {size_mib} MiB)"
            ))),
        }
    }

    /// The node that keeps a volume recorded on `node` (`None`: the server's own node), for
    /// any call on the volume. A draining or quarantined node still serves its volumes.
    ///
    /// # Errors
    /// `NodeUnreachable` when that node is lost or not joined (with a shared registry, after
    /// reading it again).
    pub(crate) async fn volume_node(
        &self,
        node: Option<&str>,
    ) -> Result<Arc<dyn NodeApi>, NodeError> {
        if self.shared.is_some() && self.volume_member(node).is_none() {
            if let Err(e) = self.sync().await {
                warn!(error = %e, "cannot read the shared node registry");
            }
        }
        let name = self.volume_member(node).ok_or_else(|| {
            NodeError::NodeUnreachable(match node {
                Some(n) => format!("node {n} is not joined"),
                None => "the server's own node is not part of this cluster".into(),
            })
        })?;
        self.api_of_node(&name)
    }

    /// The state of the node that keeps a volume recorded on `node`, with its name as the
    /// cluster knows it (`None`: not joined).
    pub(crate) fn volume_node_state(&self, node: Option<&str>) -> Option<(String, NodeState)> {
        let name = self.volume_member(node)?;
        let state = self.lock().nodes.get(&name)?.state;
        Some((name, state))
    }

    /// The member a volume recorded on `node` is on: that name when it is joined, the local
    /// member for `None`.
    fn volume_member(&self, node: Option<&str>) -> Option<String> {
        member_of(&self.lock(), node)
    }

    /// The one node that keeps every volume of a launch (`None` without volumes), which the
    /// sandbox must be placed on.
    ///
    /// # Errors
    /// `NoNodeAvailable` when a volume's node is not joined; `InvalidArgument` when the
    /// volumes are on different nodes (the control plane refuses that earlier).
    pub(super) fn volumes_node(
        st: &State,
        volumes: &[LaunchVolume],
    ) -> Result<Option<String>, NodeError> {
        let mut pinned: Option<String> = None;
        for v in volumes {
            let name = member_of(st, v.node.as_deref()).ok_or_else(|| {
                NodeError::NoNodeAvailable(format!(
                    "volume {} is kept on node {}, which is not joined",
                    v.id,
                    v.node.as_deref().unwrap_or("(the server's own)")
                ))
            })?;
            match &pinned {
                Some(p) if *p != name => {
                    return Err(NodeError::InvalidArgument {
                        field: "volumes".into(),
                        message: format!(
                            "the volumes are kept on different nodes ({p} and {name}); a \
                             sandbox mounts volumes of one node only"
                        ),
                    })
                }
                Some(_) => {}
                None => pinned = Some(name),
            }
        }
        Ok(pinned)
    }
}

/// Why a sandbox that mounts volumes kept on `node` (in `state`) cannot be placed there:
/// the first placement rule that node fails.
pub(super) fn pinned_refusal(node: &str, state: NodeState, e: scheduler::NoPlacement) -> NodeError {
    use scheduler::NoPlacement::*;
    let why = match e {
        NoReadyNode => format!("is {state}"),
        NoRuntime => "does not run this runtime".into(),
        NoRelease => "does not hold the release".into(),
        NoVolumes => "does not keep volumes".into(),
        NoRoom => "has no room for the sandbox".into(),
    };
    NodeError::NoNodeAvailable(format!(
        "node {node} keeps the sandbox's volumes and {why}; a sandbox that mounts volumes runs \
         only on their node"
    ))
}

fn member_of(st: &State, node: Option<&str>) -> Option<String> {
    match node {
        Some(n) => st.nodes.contains_key(n).then(|| n.to_string()),
        None => st
            .nodes
            .iter()
            .find(|(_, m)| m.local)
            .map(|(n, _)| n.clone()),
    }
}
