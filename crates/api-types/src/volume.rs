//! Persistent volumes: filesystems of a fixed size that sandboxes mount at create, on one
//! node's disk (`local`) or kept in the snapshot store (`object`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `POST /v1/volumes` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeRequest {
    /// Name, unique in the org: 1 to 63 of `[a-z0-9_-]`, starting with a letter or digit.
    pub name: String,
    /// Size in MiB (16 to 1048576). Writes past it fail with `ENOSPC` in a sandbox and `507
    /// insufficient_storage` through the files API; ext4's own metadata takes a little of it.
    pub size_mib: u64,
    /// Where the volume's data lives (default `local`): `object` keeps it in the server's
    /// snapshot store so it follows its sandboxes between nodes.
    #[serde(default)]
    pub storage: VolumeStorage,
}

/// Where a volume's data lives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeStorage {
    /// An ext4 image on the disk of the node that made it; sandboxes mounting it run on that
    /// node.
    #[default]
    Local,
    /// Kept in the snapshot store and attached to one node at a time: while a sandbox that
    /// mounts it is running or paused it is on that sandbox's node (the others that mount it
    /// run there too); when the last is deleted or suspended the node uploads it and it is on
    /// no node, and the next sandbox (a create, a wake, possibly on another node) or files
    /// call fetches it onto its node first. A node lost while holding it loses what was
    /// written since its last upload.
    Object,
}

/// A volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Volume {
    /// Name (unique in its org).
    pub name: String,
    /// The org it belongs to.
    pub org: String,
    /// Size in MiB.
    pub size_mib: u64,
    /// Where its data lives.
    #[serde(default)]
    pub storage: VolumeStorage,
    /// Bytes its filesystem uses now (`None` when the node cannot tell, and for an `object`
    /// volume on no node).
    #[serde(default)]
    pub used_bytes: Option<u64>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Ids of the sandboxes (not deleted) that mount it; it cannot be deleted while any does.
    #[serde(default)]
    pub mounted_by: Vec<String>,
    /// The node that keeps it, on a control plane with nodes joined over the network (absent
    /// for the server's own node, and for an `object` volume on no node). The sandboxes that
    /// mount it run on that node only (an `object` volume that no sandbox holds moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `GET /v1/volumes` answer, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeList {
    /// The org's volumes.
    pub volumes: Vec<Volume>,
}

/// One volume a sandbox mounts (`volumes` of `POST /v1/sandboxes`, and of a sandbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    /// Volume name (of the caller's org).
    pub name: String,
    /// Where it appears in the sandbox: an absolute, normalised path, not `/`, `/etc` nor at
    /// or below `/proc`, `/sys`, `/dev`.
    pub path: String,
    /// Mounted read-only (writes fail with `EROFS`); default read-write.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// `POST /v1/volumes/{name}/files:mkdir` body: make a directory of a volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MakeVolumeDirRequest {
    /// Directory to make, from the volume's root (`..` stops at the root).
    pub path: String,
    /// Make missing parents too, and accept a directory already there (`mkdir -p`; the
    /// default). `false`: a missing parent is `404 file_not_found`, an existing path `409
    /// already_exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parents: Option<bool>,
    /// Owner uid of what is made (default 1000, `user` of the built-in templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Owner gid of what is made (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Permission bits of the directory (default 0o755 = 493; at most 0o7777).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// `PATCH /v1/volumes/{name}/files?path=` body: set the owner and permission bits of a
/// volume's file or directory; what is absent is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeFileAttrs {
    /// New owner uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// New owner gid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// New permission bits (at most 0o7777; a symlink has none: `400`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}
