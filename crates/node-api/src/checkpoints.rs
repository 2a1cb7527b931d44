//! Checkpoints on the node: a running sandbox's state saved to the snapshot store under a
//! checkpoint id while the sandbox keeps running, and restored into a sandbox (its own, for a
//! rollback, or a new one, for a fork or a create from the checkpoint).

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use bytes::Bytes;

use crate::{ByteStream, NodeError, SandboxLaunch, WakeInfo};

/// Version of the checkpoint archive format ([`NodeCheckpoints::export_checkpoint`]).
pub const ARCHIVE_VERSION: u32 = 1;

/// Name of the archive's first entry: the caller's description of the checkpoint (JSON).
pub const ARCHIVE_HEADER: &str = "cove-checkpoint.json";

/// Most bytes of the archive's header entry.
pub const ARCHIVE_HEADER_MAX_BYTES: u64 = 64 << 10;

/// What an import stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImportedCheckpoint {
    /// The archive's header entry ([`ARCHIVE_HEADER`]), as it was (at most
    /// [`ARCHIVE_HEADER_MAX_BYTES`]); the caller parses it.
    pub header: Bytes,
    /// The runtime that took the checkpoint (this node's).
    pub runtime: String,
    /// Bytes of file content.
    pub file_bytes: u64,
    /// Whether it holds process memory.
    pub memory: bool,
}

/// The result of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointInfo {
    /// Bytes of file content saved.
    pub file_bytes: u64,
    /// Whether process memory was saved.
    pub memory: bool,
    /// How long the sandbox's processes were frozen, in milliseconds.
    pub pause_ms: u64,
}

/// Checkpoints of sandboxes on the node.
#[async_trait]
pub trait NodeCheckpoints: Send + Sync + 'static {
    /// Saves the state of sandbox `id` (running or paused) as checkpoint `checkpoint_id`: its
    /// processes are frozen while the runtime's artifacts are written, then thawed (a paused
    /// sandbox stays paused). On failure or cancellation nothing of the checkpoint is kept and
    /// the sandbox runs on. Errors: `SandboxNotFound`, `Cancelled`, `Runtime`/`Internal`.
    async fn checkpoint_sandbox(
        &self,
        id: &str,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<CheckpointInfo, NodeError>;

    /// Replaces whatever the node has of sandbox `launch.id` (its processes, files, network)
    /// with checkpoint `checkpoint_id` and starts it: a rollback when the id is the
    /// checkpoint's sandbox, a fork or create otherwise. On failure nothing of the sandbox is
    /// left on the node (a rolled-back sandbox is then gone from the node too); the checkpoint
    /// is kept. Errors: `InvalidArgument` of field `checkpoint` when the snapshot store has no
    /// complete checkpoint of that id (or one of another runtime), `ReleaseNotFound`,
    /// `Cancelled`, `Runtime`/`Internal`.
    async fn restore_checkpoint(
        &self,
        launch: SandboxLaunch,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError>;

    /// Checkpoint `checkpoint_id` as one archive (format [`ARCHIVE_VERSION`]): an
    /// uncompressed tar of `cove-checkpoint.json` (`header`, as given), `snapshot.json` (the
    /// snapshot's manifest) and `artifacts/<name>` per artifact, in that order. A failure
    /// mid-stream ends the stream with an error. Errors: `InvalidArgument` of field
    /// `checkpoint` when the snapshot store has no complete checkpoint of that id.
    async fn export_checkpoint(
        &self,
        checkpoint_id: &str,
        header: Bytes,
    ) -> Result<ByteStream, NodeError>;

    /// Stores the archive `body` (as [`NodeCheckpoints::export_checkpoint`] makes them) as
    /// checkpoint `checkpoint_id`. The archive is staged and checked whole before anything
    /// is kept: exactly the three kinds of entries in order, regular files only, a manifest of
    /// this node's runtime naming its artifacts, each artifact accepted by the runtime (no
    /// path out of the sandbox, no devices). Errors: `InvalidArgument` of field `archive`
    /// naming what is refused, `TooLarge` past `max_bytes`, `NoSpace`, `Cancelled`.
    async fn import_checkpoint(
        &self,
        checkpoint_id: &str,
        body: ByteStream,
        max_bytes: u64,
        cancel: CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError>;

    /// Removes checkpoint `checkpoint_id` from the snapshot store; a missing one is fine.
    async fn delete_checkpoint(&self, checkpoint_id: &str) -> Result<(), NodeError>;
}
