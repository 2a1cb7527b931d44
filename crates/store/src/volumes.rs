//! Volume rows: a volume's name in its org, its size, its node-side id and the node that keeps
//! it. The bytes live in an image on that node (for an object volume, also in the snapshot
//! store, see [`VolumeObject`]); which sandboxes mount a volume is read from the sandboxes'
//! `volumes` column (a JSON list of mounts).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::VolumeMount;

use crate::StoreError;

/// A stored volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    /// Node-side id (`vol-…`): names the image on the node.
    pub id: String,
    /// The org it belongs to.
    pub org: String,
    /// Name, unique in the org.
    pub name: String,
    /// Size in MiB.
    pub size_mib: u64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Name of the node that keeps its image (a node joined over the network); `None` for a
    /// volume of the server's own in-process node (and every volume made before nodes were
    /// recorded, which were all the in-process node's).
    pub node: Option<String>,
    /// For a volume kept in the snapshot store (`storage: "object"`), its generation and
    /// whether a node holds it now; `None` for a volume of one node's disk.
    pub object: Option<VolumeObject>,
}

/// Where an object volume is: its durable copy in the snapshot store, and the node (the
/// record's `node`) that holds it while `attached`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeObject {
    /// The generation of its last upload (`volumes/<id>/<generation>` in the snapshot store);
    /// 0 when never uploaded (an empty filesystem).
    pub generation: u64,
    /// Whether a node holds it (its image is on that node, newer than the stored copy while
    /// written to); detached, its record's `node` is `None` and any node may fetch it.
    pub attached: bool,
}

/// Volume rows.
#[async_trait]
pub trait VolumeStore: Send + Sync {
    /// Inserts volume `v`. A name taken in its org (or a taken id) is
    /// [`StoreError::Conflict`].
    async fn insert_volume(&self, v: &VolumeRecord) -> Result<(), StoreError>;

    /// Volume `name` of `org`; [`StoreError::NotFound`] when there is none.
    async fn get_volume(&self, org: &str, name: &str) -> Result<VolumeRecord, StoreError>;

    /// The volumes of `org` (every org's when `None`), by org and name.
    async fn list_volumes(&self, org: Option<&str>) -> Result<Vec<VolumeRecord>, StoreError>;

    /// Ids of the sandboxes of `org` that are not `deleted` and mount volume `name`, oldest
    /// first.
    async fn volume_users(&self, org: &str, name: &str) -> Result<Vec<String>, StoreError>;

    /// Records where object volume `id` is: `generation`, attached to `node` (`Some(None)`:
    /// the server's own node) or detached (`None`), but only while its generation is still
    /// `expected` (an upload flips it once). Errors: [`StoreError::Conflict`] when the
    /// generation moved on, [`StoreError::NotFound`] when there is no such object volume.
    async fn set_volume_attachment(
        &self,
        id: &str,
        expected: u64,
        generation: u64,
        node: Option<Option<&str>>,
    ) -> Result<(), StoreError>;

    /// Detaches every object volume attached to `node` (a node declared lost): they keep their
    /// last uploaded generation. Returns how many.
    async fn detach_node_volumes(&self, node: &str) -> Result<u64, StoreError>;

    /// Removes volume `name` of `org`. Returns whether it existed.
    async fn delete_volume(&self, org: &str, name: &str) -> Result<bool, StoreError>;
}

/// The `volumes` column of a sandbox (JSON) back to its mounts.
pub(crate) fn json_mounts(s: &str) -> Result<Vec<VolumeMount>, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A sandbox's mounts as its `volumes` column.
pub(crate) fn mounts_json(m: &[VolumeMount]) -> Result<String, StoreError> {
    serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()))
}
