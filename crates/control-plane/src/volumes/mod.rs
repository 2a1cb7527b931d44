//! Persistent volumes: create, list, get, delete ([`ControlPlane::create_volume`], ...), the
//! checks of `volumes` on a sandbox create ([`ControlPlane::check_volume_mounts`]), what a
//! node needs to mount them ([`ControlPlane::launch_volumes`]), their files without a sandbox
//! (`files.rs`), the content tokens that reach one volume's files (`tokens.rs`), and which node
//! keeps each (`nodes.rs`), and how object volumes move between nodes through the snapshot
//! store (`objects.rs`).
//!
//! A volume is an ext4 image on one node, offered on the runc runtime: the server's own node,
//! or on a cluster a node chosen when the volume is made (a ready runc node with the most free
//! disk) and recorded with it. Volumes are node-local: every call on a volume goes to its node,
//! and a sandbox that mounts volumes is pinned to their node (all its volumes must be on one
//! node; it is created, woken and restored there, never elsewhere). While that node is lost the
//! volume's calls answer `503 unavailable` and nothing of it is deleted. A node without volumes
//! (`qemu`) refuses them with `400 unsupported`. A volume belongs to the caller's org; another
//! org's volume is reported exactly as a missing one.
//!
//! A volume made with `storage: "object"` is the same image, but its durable copy is kept in
//! the snapshot store and it follows its sandboxes: it is attached to one node while used and
//! detached (uploaded) when the last sandbox that mounts it is deleted or suspended, so a
//! sandbox that mounts it may wake on another node (`objects.rs`).
//!
//! A volume delete and a create (or fork) that mounts volumes of the same org exclude each
//! other from their check to their write ([`ControlPlane::lock_volumes`]): this process's
//! `volumes_lock` and the store lock `volumes:<org>`, which on PostgreSQL every replica
//! shares, so no replica records a mount of a volume another is deleting.

mod files;
mod nodes;
mod objects;
mod tokens;

use std::collections::HashSet;

use chrono::Utc;
use cove_api_types::{CreateVolumeRequest, Volume, VolumeList, VolumeMount, VolumeStorage};
use cove_domain::{ids, volumes, InvalidInput};
use cove_node_api::LaunchVolume;
use cove_store::{StoreError, StoreLock, VolumeObject, VolumeRecord};
use tracing::{info, warn};

use crate::features::Feature;
use crate::orgs::scope;
use crate::{ControlPlane, ServiceError};

/// Held while a volume delete, or a create that mounts volumes, checks and writes: see
/// [`ControlPlane::lock_volumes`].
pub(crate) struct VolumesHeld<'a> {
    _local: tokio::sync::MutexGuard<'a, ()>,
    _store: StoreLock,
}

impl ControlPlane {
    /// Takes this process's `volumes_lock` (object volumes move under it), then the store lock
    /// of `org`'s volumes, which every replica on the store shares. Always in that order.
    pub(crate) async fn lock_volumes(&self, org: &str) -> Result<VolumesHeld<'_>, ServiceError> {
        let local = self.inner.volumes_lock.lock().await;
        let store = self.store().lock(&format!("volumes:{org}")).await?;
        Ok(VolumesHeld {
            _local: local,
            _store: store,
        })
    }

    /// `Ok` when this server offers volumes to the caller's org: [`Self::volumes_offered`]
    /// and the feature is on for the org (else `403 feature_disabled`).
    pub(crate) async fn require_volumes(&self) -> Result<(), ServiceError> {
        self.volumes_offered()?;
        self.require_feature(Feature::Volumes, &scope::acting_org()?)
            .await
    }

    /// `Ok` when this server offers volumes: the feature is on (else `403
    /// feature_disabled`), and a single server's node can mount them (runc; else `400
    /// unsupported`). On a cluster they are offered whatever nodes are there now: a create
    /// finds a node that keeps volumes or says why not.
    pub(crate) fn volumes_offered(&self) -> Result<(), ServiceError> {
        self.inner.cfg.features.require(Feature::Volumes)?;
        self.placement()
            .offers_volumes()
            .map_err(ServiceError::Unsupported)
    }

    /// The stored volume `name` of the caller's org (`volume_not_found` otherwise).
    pub(crate) async fn volume_record(&self, name: &str) -> Result<VolumeRecord, ServiceError> {
        volumes::name("name", name).map_err(|_| ServiceError::VolumeNotFound(name.into()))?;
        if !tokens::token_reaches(name)? {
            return Err(ServiceError::VolumeNotFound(name.into()));
        }
        match self.store().get_volume(&scope::acting_org()?, name).await {
            Ok(v) => Ok(v),
            Err(StoreError::NotFound) => Err(ServiceError::VolumeNotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes a volume in the caller's org: a fresh, empty filesystem of `size_mib` MiB on the
    /// node (on a cluster, the node `nodes.rs` chooses, recorded with it). With `storage:
    /// "object"` it is attached to that node, at generation 0 (nothing uploaded yet). Errors:
    /// `invalid_argument` (name, size), `volume_exists`, `unsupported` (on a cluster without a
    /// node that keeps volumes), `feature_disabled`,
    /// `no_space` when the node's disk cannot hold it, `unavailable` when no node that keeps
    /// volumes can take it now.
    pub async fn create_volume(&self, req: CreateVolumeRequest) -> Result<Volume, ServiceError> {
        self.require_volumes().await?;
        volumes::name("name", &req.name)?;
        volumes::size_mib("size_mib", req.size_mib)?;
        let org = scope::acting_org()?;
        // Held until the volume is recorded.
        let ask = crate::orgs::quotas::Ask::Volume {
            size_mib: req.size_mib,
        };
        let _quota = self.admit(&org, ask).await?;
        let (node, api) = self.node_for_new_volume(req.size_mib).await?;
        let record = VolumeRecord {
            id: ids::new_volume_id(),
            org,
            name: req.name.clone(),
            size_mib: req.size_mib,
            created_at: Utc::now(),
            node,
            object: (req.storage == VolumeStorage::Object).then_some(VolumeObject {
                generation: 0,
                attached: true,
            }),
        };
        // Files calls wait until the node has made it (else one could mount a blank image).
        let no_files_calls = self.inner.volume_files_lock.write().await;
        match self.store().insert_volume(&record).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => return Err(ServiceError::VolumeExists(req.name)),
            Err(e) => return Err(e.into()),
        }
        if let Err(e) = api.create_volume(&record.id, record.size_mib).await {
            warn!(volume_id = %record.id, error = %e, "cannot make the volume on the node");
            if let Err(e) = self.store().delete_volume(&record.org, &record.name).await {
                warn!(volume_id = %record.id, error = %e, "cannot forget a volume not made");
            }
            return Err(match e {
                // The node's own disk, not the volume, is full.
                e @ cove_node_api::NodeError::NoSpace(_) => crate::error::from_node(e, ""),
                e => files::volume_err(e, &record.name),
            });
        }
        drop(no_files_calls);
        info!(
            volume_id = %record.id,
            org = %record.org,
            name = %record.name,
            node = record.node.as_deref().unwrap_or(""),
            "volume created"
        );
        self.describe(record).await
    }

    /// The caller's org's volumes, by name.
    pub async fn list_volumes(&self) -> Result<VolumeList, ServiceError> {
        self.require_volumes().await?;
        let org = scope::listing_org()?;
        let mut out = Vec::new();
        for v in self.store().list_volumes(org.as_deref()).await? {
            out.push(self.describe(v).await?);
        }
        Ok(VolumeList { volumes: out })
    }

    /// One volume of the caller's org, with its use and the sandboxes that mount it.
    pub async fn get_volume(&self, name: &str) -> Result<Volume, ServiceError> {
        self.require_volumes().await?;
        let v = self.volume_record(name).await?;
        self.describe(v).await
    }

    /// Deletes a volume and its data. Errors: `volume_in_use` while a sandbox (not deleted)
    /// mounts it, naming them; `volume_not_found`; `unavailable` while its node is lost (the
    /// volume stays recorded).
    pub async fn delete_volume(&self, name: &str) -> Result<(), ServiceError> {
        self.require_volumes().await?;
        let _held = self.lock_volumes(&scope::acting_org()?).await?;
        let v = self.volume_record(name).await?;
        let users = self.store().volume_users(&v.org, &v.name).await?;
        if !users.is_empty() {
            return Err(ServiceError::VolumeInUse(format!(
                "volume {} is mounted by {} (delete them first)",
                v.name,
                users.join(", ")
            )));
        }
        let _no_files_calls = self.inner.volume_files_lock.write().await;
        let node = if objects::detached(&v) {
            // Any node reaches the snapshot store that keeps it.
            self.node_for_new_volume(0).await?.1
        } else {
            self.volume_node(&v).await?
        };
        node.delete_volume(&v.id)
            .await
            .map_err(|e| files::volume_err(e, &v.name))?;
        self.store().delete_volume(&v.org, &v.name).await?;
        info!(volume_id = %v.id, org = %v.org, name = %v.name, "volume deleted");
        Ok(())
    }

    async fn describe(&self, v: VolumeRecord) -> Result<Volume, ServiceError> {
        // A detached object volume is on no node: its use is not known.
        let used_bytes = if objects::detached(&v) {
            None
        } else {
            let usage = match self.volume_node(&v).await {
                Ok(node) => node.volume_usage(&v.id).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match usage {
                Ok(u) => Some(u.used_bytes),
                Err(e) => {
                    warn!(volume_id = %v.id, error = %e, "cannot read a volume's use");
                    None
                }
            }
        };
        let mounted_by = self.store().volume_users(&v.org, &v.name).await?;
        Ok(Volume {
            name: v.name,
            org: v.org,
            size_mib: v.size_mib,
            storage: if v.object.is_some() {
                VolumeStorage::Object
            } else {
                VolumeStorage::Local
            },
            used_bytes,
            created_at: v.created_at,
            mounted_by,
            node: v.node,
        })
    }

    /// Checks the `volumes` of a create: the feature and the server offer them, at most
    /// [`volumes::MAX_MOUNTS`], each path valid, no path and no volume twice, every volume in
    /// the caller's org, its object volumes attached to one node ([`Self::attach_volumes`]),
    /// and on a cluster every volume on one node that takes sandboxes now (`invalid_argument`,
    /// `unavailable`: see [`Self::check_volumes_node`]). Returns a guard to hold until the
    /// sandbox is recorded, so a volume delete cannot slip in between (`None` without
    /// volumes).
    pub(crate) async fn check_volume_mounts(
        &self,
        mounts: &[VolumeMount],
    ) -> Result<Option<VolumesHeld<'_>>, ServiceError> {
        if mounts.is_empty() {
            return Ok(None);
        }
        self.require_volumes().await?;
        if mounts.len() > volumes::MAX_MOUNTS {
            return Err(InvalidInput::new(
                "volumes",
                format!("at most {} volumes per sandbox", volumes::MAX_MOUNTS),
            )
            .into());
        }
        let mut paths = HashSet::new();
        let mut names = HashSet::new();
        for (i, m) in mounts.iter().enumerate() {
            volumes::name(&format!("volumes[{i}].name"), &m.name)?;
            volumes::mount_path(&format!("volumes[{i}].path"), &m.path)?;
            if !paths.insert(m.path.as_str()) {
                return Err(InvalidInput::new(
                    format!("volumes[{i}].path"),
                    format!("{} is mounted twice", m.path),
                )
                .into());
            }
            if !names.insert(m.name.as_str()) {
                return Err(InvalidInput::new(
                    format!("volumes[{i}].name"),
                    format!("volume {} is mounted twice", m.name),
                )
                .into());
            }
        }
        let held = self.lock_volumes(&scope::acting_org()?).await?;
        let mut records = Vec::with_capacity(mounts.len());
        for m in mounts {
            records.push(self.volume_record(&m.name).await?);
        }
        let mut records = named(records);
        // Object volumes first move to (or stay on) one node, then all must be on one that
        // takes sandboxes.
        self.attach_volumes(&mut records).await?;
        self.check_volumes_node(&records)?;
        Ok(Some(held))
    }

    /// The stored volumes a sandbox of `org` mounts, in mount order. Errors: `internal` when a
    /// mounted volume is gone (a delete refuses while it is mounted).
    async fn mounted_volumes(
        &self,
        org: &str,
        mounts: &[VolumeMount],
    ) -> Result<Vec<VolumeRecord>, ServiceError> {
        let mut out = Vec::with_capacity(mounts.len());
        for m in mounts {
            match self.store().get_volume(org, &m.name).await {
                Ok(v) => out.push(v),
                Err(StoreError::NotFound) => {
                    return Err(ServiceError::Internal(format!(
                        "volume {} of org {org} is mounted but gone",
                        m.name
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Checks that the volumes a fork mounts (its parent's, of `org`) can be mounted now
    /// (detached object volumes attached first): on a cluster, their node takes sandboxes
    /// (`unavailable` otherwise; a fork runs only on the volumes' node, as its parent does).
    /// The caller holds [`Self::lock_volumes`].
    pub(crate) async fn check_fork_volumes(
        &self,
        org: &str,
        mounts: &[VolumeMount],
    ) -> Result<(), ServiceError> {
        let mut records = named(self.mounted_volumes(org, mounts).await?);
        self.attach_volumes(&mut records).await?;
        self.check_volumes_node(&records)
    }

    /// What the node needs to mount the volumes of a sandbox of `org` (with the node that
    /// keeps each, where a cluster places the sandbox), attaching detached object volumes
    /// first (a wake after a suspend). Errors: `internal` when a mounted volume is gone (a
    /// delete refuses while it is mounted); those of [`Self::attach_volumes`].
    pub(crate) async fn launch_volumes(
        &self,
        org: &str,
        mounts: &[VolumeMount],
    ) -> Result<Vec<LaunchVolume>, ServiceError> {
        let mut records = self.mounted_volumes(org, mounts).await?;
        if records.iter().any(objects::detached) {
            let _held = self.inner.volumes_lock.lock().await;
            let mut fresh = named(self.mounted_volumes(org, mounts).await?);
            self.attach_volumes(&mut fresh).await?;
            records = fresh.into_iter().map(|(_, v)| v).collect();
        }
        Ok(mounts
            .iter()
            .zip(records)
            .map(|(m, v)| LaunchVolume {
                id: v.id,
                path: m.path.clone(),
                read_only: m.read_only,
                node: v.node,
            })
            .collect())
    }
}

/// Each of a sandbox's volumes with the request field that names it (`volumes[i].name`), as
/// the placement errors quote it.
fn named(records: Vec<VolumeRecord>) -> Vec<(String, VolumeRecord)> {
    (0..records.len())
        .map(|i| format!("volumes[{i}].name"))
        .zip(records)
        .collect()
}
