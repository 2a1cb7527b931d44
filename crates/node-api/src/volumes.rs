//! Persistent volumes on a node: one fixed-size filesystem image per volume, mounted once on
//! the node and bound into each sandbox that mounts it ([`crate::SandboxLaunch::volumes`]).
//!
//! Every method has a default that answers [`NodeError::Unsupported`]: a node that keeps no
//! volumes (a remote node in this version, a fake) says so instead of doing nothing.

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
}

/// Space of a volume's filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsage {
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes still free for new data.
    pub free_bytes: u64,
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

    /// Removes volume `id` and its data. The caller ensures no sandbox mounts it. None is
    /// fine.
    async fn delete_volume(&self, _id: &str) -> Result<(), NodeError> {
        Err(unsupported())
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
    /// missing parent directories; owned by uid and gid 1000 (`user` of the built-in
    /// templates), mode 0644. Errors: `NoSpace` when it does not fit (nothing is left),
    /// `WrongType` when a parent is not a directory.
    async fn write_volume_file(
        &self,
        _id: &str,
        _path: String,
        _body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        Err(unsupported())
    }

    /// The entries of a directory of volume `id`, by name. Errors: `FileNotFound`,
    /// `WrongType` for a file.
    async fn list_volume_dir(&self, _id: &str, _path: String) -> Result<Vec<FileInfo>, NodeError> {
        Err(unsupported())
    }
}
