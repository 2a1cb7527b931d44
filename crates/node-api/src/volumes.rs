//! Persistent volumes on a node: one fixed-size filesystem image per volume, mounted once on
//! the node and bound into each sandbox that mounts it ([`crate::SandboxLaunch::volumes`]).
//!
//! Every method has a default that answers [`NodeError::Unsupported`]: a node that keeps no
//! volumes (a VM runtime's) says so instead of doing nothing.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::{ByteStream, FileInfo, NodeError};

/// One volume a sandbox mounts, as the node needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchVolume {
    /// The volume's node-side id (`vol-…`).
    pub id: String,
    /// Where it appears in the sandbox (absolute, normalised, validated by the control plane).
    pub path: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// The node that keeps the volume (`None`: the control plane's in-process node). A cluster
    /// places the sandbox there, since a volume never leaves its node; a node ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Space of a volume's filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsage {
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes still free for new data.
    pub free_bytes: u64,
}

/// One entry of a volume, as its files API without a sandbox answers it: [`FileInfo`]
/// (`lstat`, never following a final symlink) with the numeric owner and every timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntry {
    /// Name, path in the volume (from its root, `/`-led), type, size, mode, mtime, link target.
    pub info: FileInfo,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Last access, Unix milliseconds (UTC).
    pub atime_ms: i64,
    /// Last status change, Unix milliseconds (UTC).
    pub ctime_ms: i64,
}

/// Owner and permission bits to set on a volume entry; `None` keeps what is there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntryAttrs {
    /// New owner uid.
    pub uid: Option<u32>,
    /// New owner gid.
    pub gid: Option<u32>,
    /// New permission bits (at most `0o7777`).
    pub mode: Option<u32>,
}

fn unsupported() -> NodeError {
    NodeError::Unsupported("this node keeps no volumes".into())
}

/// Volumes on the node. Paths are relative to the volume's root (a leading `/` is allowed)
/// and resolved inside it: `..` and symlinks never lead out.
#[async_trait]
pub trait NodeVolumes: Send + Sync + 'static {
    /// Makes volume `id` of `size_mib` MiB (an empty filesystem). Errors: `AlreadyExists`
    /// when the node has it, `NoSpace` when the node's disk cannot hold its metadata.
    async fn create_volume(&self, _id: &str, _size_mib: u64) -> Result<(), NodeError> {
        Err(unsupported())
    }

    /// Removes volume `id` and its data (for an object volume, its stored generations too).
    /// The caller ensures no sandbox mounts it. None is fine.
    async fn delete_volume(&self, _id: &str) -> Result<(), NodeError> {
        Err(unsupported())
    }

    /// Fetches generation `generation` of object volume `id` from the snapshot store into
    /// this node's disk (generation 0: never uploaded, so an empty filesystem of `size_mib`
    /// MiB is made instead), so it can be mounted here. A copy already on the node is
    /// replaced. A failed fetch changes nothing on the node. Errors: `NoSpace`
    /// when the node's disk cannot hold it, `FileNotFound` when that generation is not in the
    /// store, `Internal` for a store failure.
    async fn download_volume(
        &self,
        _id: &str,
        _size_mib: u64,
        _generation: u64,
    ) -> Result<(), NodeError> {
        Err(unsupported())
    }

    /// Uploads this node's copy of object volume `id` to the snapshot store as generation
    /// `generation` (unmounted and flushed first; the whole image, sparse regions skipped),
    /// keeping the copy. The caller ensures no sandbox mounts it. Returns the bytes stored.
    /// Errors: `FileNotFound` when the node has no copy, `Internal` for a store failure.
    async fn upload_volume(&self, _id: &str, _generation: u64) -> Result<u64, NodeError> {
        Err(unsupported())
    }

    /// Drops this node's copy of object volume `id` (unmounting it) and every stored
    /// generation of it but `keep`. The caller ensures no sandbox mounts it. None is fine.
    async fn release_volume(&self, _id: &str, _keep: u64) -> Result<(), NodeError> {
        Err(unsupported())
    }

    /// Mounts `volumes` (on this node) into running sandbox `sandbox_id` at their paths, as a
    /// start with them would have (a warm pool member claimed by a create that mounts
    /// volumes). Volumes mounted before a failure stay: the caller deletes a sandbox it cannot
    /// give all its volumes. Errors: `Unsupported` when the runtime cannot (gVisor, VMs),
    /// `SandboxNotFound` when it does not run here, `FileNotFound` for a volume the node does
    /// not have, `Runtime` for a path refused in the sandbox's tree (a link or a
    /// non-directory on the way).
    async fn attach_volumes(
        &self,
        _sandbox_id: &str,
        _volumes: Vec<crate::LaunchVolume>,
    ) -> Result<(), NodeError> {
        Err(NodeError::Unsupported(
            "this node cannot attach volumes to a running sandbox".into(),
        ))
    }

    /// How full volume `id` is. Errors: `FileNotFound` when the node has no such volume.
    async fn volume_usage(&self, _id: &str) -> Result<VolumeUsage, NodeError> {
        Err(unsupported())
    }

    /// Reads a regular file of volume `id`: its metadata, then its bytes. Errors:
    /// `FileNotFound`, `WrongType` for a directory.
    async fn read_volume_file(
        &self,
        _id: &str,
        _path: String,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        Err(unsupported())
    }

    /// Writes a file of volume `id` atomically (temporary file, fsync, rename), creating
    /// missing parent directories (owned by uid and gid 1000, mode 0755); the file gets
    /// `attrs` (default: uid and gid 1000, `user` of the built-in templates, mode 0644).
    /// Errors: `NoSpace` when it does not fit (nothing is left), `WrongType` when a parent is
    /// not a directory or the path is a directory.
    async fn write_volume_file(
        &self,
        _id: &str,
        _path: String,
        _attrs: VolumeEntryAttrs,
        _body: ByteStream,
    ) -> Result<VolumeEntry, NodeError> {
        Err(unsupported())
    }

    /// The entries of a directory of volume `id`, by name; with `depth` > 1 each directory's
    /// entries follow it, down to `depth` levels (symlinks are listed, never descended into).
    /// Errors: `FileNotFound`, `WrongType` for a file.
    async fn list_volume_dir(
        &self,
        _id: &str,
        _path: String,
        _depth: u32,
    ) -> Result<Vec<VolumeEntry>, NodeError> {
        Err(unsupported())
    }

    /// Describes a path of volume `id` (`lstat`: a final symlink is described, not followed).
    /// Errors: `FileNotFound`.
    async fn stat_volume_path(&self, _id: &str, _path: String) -> Result<VolumeEntry, NodeError> {
        Err(unsupported())
    }

    /// Removes a path of volume `id`: a file or symlink (the link only), or a directory with
    /// everything below it. The root cannot be removed (`InvalidArgument`). Errors:
    /// `FileNotFound`.
    async fn remove_volume_path(&self, _id: &str, _path: String) -> Result<(), NodeError> {
        Err(unsupported())
    }

    /// Makes a directory of volume `id` with `attrs` (default owner uid and gid 1000, mode
    /// 0755). With `parents`, missing parents are made too (same owner, mode 0755) and an
    /// existing directory is fine; without, a missing parent is `FileNotFound` and an existing
    /// path `AlreadyExists`. Errors: `WrongType` when a parent is not a directory, `NoSpace`.
    async fn make_volume_dir(
        &self,
        _id: &str,
        _path: String,
        _parents: bool,
        _attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        Err(unsupported())
    }

    /// Sets the owner and permission bits of a path of volume `id` (a final symlink: its
    /// owner only, a mode on it is `InvalidArgument`). Errors: `FileNotFound`.
    async fn set_volume_attrs(
        &self,
        _id: &str,
        _path: String,
        _attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        Err(unsupported())
    }
}
