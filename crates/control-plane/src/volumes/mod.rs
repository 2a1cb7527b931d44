//! Persistent volumes: create, list, get, delete ([`ControlPlane::create_volume`], ...), the
//! checks of `volumes` on a sandbox create ([`ControlPlane::check_volume_mounts`]), what a
//! node needs to mount them ([`ControlPlane::launch_volumes`]), and their files without a
//! sandbox (`files.rs`), and the content tokens that reach one volume's files (`tokens.rs`).
//!
//! A volume is a node-local ext4 image in this version: it is offered on the runc runtime of a
//! server with its one in-process node. Elsewhere (`qemu`, or nodes joined over the network)
//! every volume call answers `400 unsupported` saying so. A volume belongs to the caller's org;
//! another org's volume is reported exactly as a missing one.

mod files;
mod tokens;

use std::collections::HashSet;

use chrono::Utc;
use cove_api_types::{CreateVolumeRequest, Volume, VolumeList, VolumeMount, VolumeStorage};
use cove_domain::{ids, volumes, InvalidInput};
use cove_node_api::LaunchVolume;
use cove_store::{StoreError, VolumeRecord};
use tracing::{info, warn};

pub use files::{VolumeFileQuery, VolumeListQuery, VolumeWriteQuery};

use crate::features::Feature;
use crate::orgs::scope;
use crate::{ControlPlane, ServiceError};

impl ControlPlane {
    /// `Ok` when this server offers volumes to the caller's org: [`Self::volumes_offered`]
    /// and the feature is on for the org (else `403 feature_disabled`).
    pub(crate) async fn require_volumes(&self) -> Result<(), ServiceError> {
        self.volumes_offered()?;
        self.require_feature(Feature::Volumes, &scope::acting_org())
            .await
    }

    /// `Ok` when this server offers volumes: the feature is on (else `403
    /// feature_disabled`), the node is in-process (else `400 unsupported`) and its runtime can
    /// mount them (runc; else `400 unsupported`).
    pub(crate) fn volumes_offered(&self) -> Result<(), ServiceError> {
        self.inner.cfg.features.require(Feature::Volumes)?;
        if self.inner.cluster.is_some() {
            return Err(ServiceError::Unsupported(
                "volumes are node-local disks in this version, and this control plane runs \
                 sandboxes on nodes joined over the network"
                    .into(),
            ));
        }
        let caps = self.node().capabilities();
        if !caps.volumes {
            return Err(ServiceError::Unsupported(format!(
                "volumes are not supported on the {} runtime in this version (runc only)",
                caps.runtime
            )));
        }
        Ok(())
    }

    /// The stored volume `name` of the caller's org (`volume_not_found` otherwise).
    pub(crate) async fn volume_record(&self, name: &str) -> Result<VolumeRecord, ServiceError> {
        volumes::name("name", name).map_err(|_| ServiceError::VolumeNotFound(name.into()))?;
        if !tokens::token_reaches(name) {
            return Err(ServiceError::VolumeNotFound(name.into()));
        }
        match self.store().get_volume(&scope::acting_org(), name).await {
            Ok(v) => Ok(v),
            Err(StoreError::NotFound) => Err(ServiceError::VolumeNotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes a volume in the caller's org: a fresh, empty filesystem of `size_mib` MiB on the
    /// node. Errors: `invalid_argument` (name, size), `volume_exists`, `unsupported` (also
    /// for `storage: "object"`),
    /// `feature_disabled`, `no_space` when the node's disk cannot hold it.
    pub async fn create_volume(&self, req: CreateVolumeRequest) -> Result<Volume, ServiceError> {
        self.require_volumes().await?;
        volumes::name("name", &req.name)?;
        volumes::size_mib("size_mib", req.size_mib)?;
        if req.storage == VolumeStorage::Object {
            return Err(ServiceError::Unsupported(
                "storage \"object\" is not supported in this version: volumes are ext4 disks \
                 of the server's own node (use storage \"local\")"
                    .into(),
            ));
        }
        let record = VolumeRecord {
            id: ids::new_volume_id(),
            org: scope::acting_org(),
            name: req.name.clone(),
            size_mib: req.size_mib,
            created_at: Utc::now(),
        };
        // Files calls wait until the node has made it (else one could mount a blank image).
        let no_files_calls = self.inner.volume_files_lock.write().await;
        match self.store().insert_volume(&record).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => return Err(ServiceError::VolumeExists(req.name)),
            Err(e) => return Err(e.into()),
        }
        if let Err(e) = self.node().create_volume(&record.id, record.size_mib).await {
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
        info!(volume_id = %record.id, org = %record.org, name = %record.name, "volume created");
        self.describe(record).await
    }

    /// The caller's org's volumes, by name.
    pub async fn list_volumes(&self) -> Result<VolumeList, ServiceError> {
        self.require_volumes().await?;
        let org = scope::listing_org();
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
    /// mounts it, naming them; `volume_not_found`.
    pub async fn delete_volume(&self, name: &str) -> Result<(), ServiceError> {
        self.require_volumes().await?;
        let _held = self.inner.volumes_lock.lock().await;
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
        self.node()
            .delete_volume(&v.id)
            .await
            .map_err(|e| files::volume_err(e, &v.name))?;
        self.store().delete_volume(&v.org, &v.name).await?;
        info!(volume_id = %v.id, org = %v.org, name = %v.name, "volume deleted");
        Ok(())
    }

    async fn describe(&self, v: VolumeRecord) -> Result<Volume, ServiceError> {
        let used_bytes = match self.node().volume_usage(&v.id).await {
            Ok(u) => Some(u.used_bytes),
            Err(e) => {
                warn!(volume_id = %v.id, error = %e, "cannot read a volume's use");
                None
            }
        };
        let mounted_by = self.store().volume_users(&v.org, &v.name).await?;
        Ok(Volume {
            name: v.name,
            org: v.org,
            size_mib: v.size_mib,
            storage: VolumeStorage::Local,
            used_bytes,
            created_at: v.created_at,
            mounted_by,
        })
    }

    /// Checks the `volumes` of a create: the feature and the server offer them, at most
    /// [`volumes::MAX_MOUNTS`], each path valid, no path and no volume twice, every volume in
    /// the caller's org. Returns a guard to hold until the sandbox is recorded, so a volume
    /// delete cannot slip in between (`None` without volumes).
    pub(crate) async fn check_volume_mounts(
        &self,
        mounts: &[VolumeMount],
    ) -> Result<Option<tokio::sync::MutexGuard<'_, ()>>, ServiceError> {
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
        let held = self.inner.volumes_lock.lock().await;
        for m in mounts {
            self.volume_record(&m.name).await?;
        }
        Ok(Some(held))
    }

    /// What the node needs to mount the volumes of a sandbox of `org`. Errors: `internal`
    /// when a mounted volume is gone (a delete refuses while it is mounted).
    pub(crate) async fn launch_volumes(
        &self,
        org: &str,
        mounts: &[VolumeMount],
    ) -> Result<Vec<LaunchVolume>, ServiceError> {
        let mut out = Vec::with_capacity(mounts.len());
        for m in mounts {
            let v = match self.store().get_volume(org, &m.name).await {
                Ok(v) => v,
                Err(StoreError::NotFound) => {
                    return Err(ServiceError::Internal(format!(
                        "volume {} of org {org} is mounted but gone",
                        m.name
                    )))
                }
                Err(e) => return Err(e.into()),
            };
            out.push(LaunchVolume {
                id: v.id,
                path: m.path.clone(),
                read_only: m.read_only,
            });
        }
        Ok(out)
    }
}
