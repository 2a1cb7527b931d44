//! Object volumes (`storage: "object"`): a volume whose durable copy is in the snapshot store
//! (`volumes/<id>/<generation>`), attached to at most one node at a time.
//!
//! - **Attached** (the record's `node` holds it): while a sandbox that mounts it is not
//!   suspended, deleted or failed, and after a files call reached it. Sandboxes that mount it
//!   are pinned to that node, as with a local volume.
//! - **Detached**: after the last sandbox that held it is deleted or suspended, its node
//!   uploads it as the next generation, the store flips the generation (a compare-and-set),
//!   and the node drops its copy and the older generation ([`ControlPlane::release_object_volumes`]).
//!   A create, wake or fork that mounts it, or a files call, attaches it again: to the node of
//!   the other volumes of the sandbox, else to the node a new volume would be made on; that
//!   node downloads it first ([`ControlPlane::attach_volumes`]).
//! - An attached volume that no sandbox holds, on a node that no longer takes sandboxes
//!   (draining, quarantined), is detached first and attached where the sandbox goes.
//! - A node declared lost loses its attachments ([`ControlPlane::detach_lost_node_volumes`]):
//!   its object volumes fall back to their last uploaded generation (what was written since
//!   is lost).
//!
//! Every move happens under `volumes_lock`, which callers hold.

use std::sync::Arc;

use cove_api_types::VolumeMount;
use cove_domain::{NodeState, SandboxState};
use cove_node_api::NodeApi;
use cove_store::{StoreError, VolumeObject, VolumeRecord};
use tracing::{info, warn};

use super::files::volume_err;
use crate::{ControlPlane, ServiceError};

/// Whether `v` is an object volume that no node holds.
pub(super) fn detached(v: &VolumeRecord) -> bool {
    v.object.is_some_and(|o| !o.attached)
}

/// States of a sandbox that hold the volumes it mounts attached to its node.
fn holds(state: SandboxState) -> bool {
    !matches!(
        state,
        SandboxState::Suspended | SandboxState::Deleted | SandboxState::Failed
    )
}

impl ControlPlane {
    /// Attaches every detached object volume of `records` (one sandbox's volumes, or one
    /// volume for a files call) to one node: the node of an attached volume among them, else
    /// the node a new volume of the largest size would be made on. Moves an attached object
    /// volume that no sandbox holds off a node that takes no sandboxes first. The caller
    /// holds `volumes_lock`. Errors: `unsupported`/`unavailable` when no node can take them,
    /// the download's error (nothing is left attached).
    pub(crate) async fn attach_volumes(
        &self,
        records: &mut [(String, VolumeRecord)],
    ) -> Result<(), ServiceError> {
        for (_, v) in records.iter_mut() {
            if v.object.is_some_and(|o| o.attached)
                && !self.node_takes_sandboxes(v)
                && !self.volume_held(v).await?
            {
                self.detach_volume(v).await?;
            }
        }
        if !records.iter().any(|(_, v)| detached(v)) {
            return Ok(());
        }
        let target: (Option<String>, Arc<dyn NodeApi>) =
            match records.iter().find(|(_, v)| !detached(v)) {
                Some((_, v)) => (v.node.clone(), self.volume_node(v).await?),
                None => {
                    let size = records.iter().map(|(_, v)| v.size_mib).max();
                    self.node_for_new_volume(size.unwrap_or(0)).await?
                }
            };
        for (_, v) in records.iter_mut().filter(|(_, v)| detached(v)) {
            self.attach_volume(v, &target).await?;
        }
        Ok(())
    }

    async fn attach_volume(
        &self,
        v: &mut VolumeRecord,
        (node, api): &(Option<String>, Arc<dyn NodeApi>),
    ) -> Result<(), ServiceError> {
        let Some(o) = v.object else {
            return Ok(());
        };
        api.download_volume(&v.id, v.size_mib, o.generation)
            .await
            .map_err(|e| match e {
                e @ cove_node_api::NodeError::NoSpace(_) => crate::error::from_node(e, ""),
                e => volume_err(e, &v.name),
            })?;
        let recorded = self
            .store()
            .set_volume_attachment(&v.id, o.generation, o.generation, Some(node.as_deref()))
            .await;
        if let Err(e) = recorded {
            if let Err(e) = api.release_volume(&v.id, o.generation).await {
                warn!(volume_id = %v.id, error = %e, "cannot drop a copy not recorded");
            }
            return Err(e.into());
        }
        v.node = node.clone();
        v.object = Some(VolumeObject {
            attached: true,
            ..o
        });
        info!(
            volume_id = %v.id,
            node = node.as_deref().unwrap_or(""),
            generation = o.generation,
            "object volume attached"
        );
        Ok(())
    }

    /// Uploads attached object volume `v` from its node as the next generation, records it
    /// detached, and has the node drop its copy and the older generation. The caller holds
    /// `volumes_lock` and has checked that no sandbox holds it. A failure leaves it attached.
    async fn detach_volume(&self, v: &mut VolumeRecord) -> Result<(), ServiceError> {
        let Some(o) = v.object.filter(|o| o.attached) else {
            return Ok(());
        };
        let api = self.volume_node(v).await?;
        let next = o.generation + 1;
        let bytes = api
            .upload_volume(&v.id, next)
            .await
            .map_err(|e| volume_err(e, &v.name))?;
        self.store()
            .set_volume_attachment(&v.id, o.generation, next, None)
            .await?;
        let node = v.node.take();
        v.object = Some(VolumeObject {
            generation: next,
            attached: false,
        });
        if let Err(e) = api.release_volume(&v.id, next).await {
            warn!(volume_id = %v.id, error = %e, "cannot drop a detached volume's old copies");
        }
        info!(
            volume_id = %v.id,
            node = node.as_deref().unwrap_or(""),
            generation = next,
            stored_bytes = bytes,
            "object volume detached"
        );
        Ok(())
    }

    /// Whether a sandbox that mounts `v` holds it attached (one not suspended, deleted or
    /// failed).
    async fn volume_held(&self, v: &VolumeRecord) -> Result<bool, ServiceError> {
        for id in self.store().volume_users(&v.org, &v.name).await? {
            match self.store().get_sandbox(&id).await {
                Ok(s) if holds(s.state) => return Ok(true),
                Ok(_) | Err(StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    /// Whether the node that holds `v` takes sandboxes now (always on a single server).
    fn node_takes_sandboxes(&self, v: &VolumeRecord) -> bool {
        matches!(
            self.placement().volume_node_state(v.node.as_deref()),
            Some((_, NodeState::Ready))
        )
    }

    /// After a sandbox of `org` that mounts `mounts` was deleted or suspended (or failed to
    /// wake): detaches each of its object volumes that no sandbox holds any more (uploading
    /// it). Failures are logged; such a volume stays attached to its node.
    pub(crate) async fn release_object_volumes(&self, org: &str, mounts: &[VolumeMount]) {
        if mounts.is_empty() {
            return;
        }
        let _held = self.inner.volumes_lock.lock().await;
        for m in mounts {
            let mut v = match self.store().get_volume(org, &m.name).await {
                Ok(v) => v,
                Err(e) => {
                    warn!(org, volume = %m.name, error = %e, "cannot read a released volume");
                    continue;
                }
            };
            if !v.object.is_some_and(|o| o.attached) {
                continue;
            }
            let detached = async {
                if self.volume_held(&v).await? {
                    return Ok(());
                }
                self.detach_volume(&mut v).await
            }
            .await;
            if let Err(e) = detached {
                warn!(volume_id = %v.id, error = %e, "cannot detach an object volume");
            }
        }
    }

    /// After node `node` was declared lost: its object volumes are detached, back at their
    /// last uploaded generation.
    pub(crate) async fn detach_lost_node_volumes(&self, node: &str) {
        let _held = self.inner.volumes_lock.lock().await;
        match self.store().detach_node_volumes(node).await {
            Ok(0) => {}
            Ok(n) => warn!(node, volumes = n, "object volumes of a lost node detached"),
            Err(e) => warn!(node, error = %e, "cannot detach a lost node's object volumes"),
        }
    }

    /// The node to serve a files call on volume `v` (attaching a detached object volume to
    /// a node first: it stays attached there). Errors as [`Self::volume_node`] and
    /// [`Self::attach_volumes`].
    pub(crate) async fn files_node(
        &self,
        v: &VolumeRecord,
    ) -> Result<Arc<dyn NodeApi>, ServiceError> {
        if !detached(v) {
            return self.volume_node(v).await;
        }
        let _held = self.inner.volumes_lock.lock().await;
        let fresh = self.store().get_volume(&v.org, &v.name).await?;
        let mut one = [("name".to_string(), fresh)];
        self.attach_volumes(&mut one).await?;
        self.volume_node(&one[0].1).await
    }
}
