//! Checkpoints: saved states of a running sandbox, to roll back to, fork from or create from.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{CheckpointState, CreateSandboxResponse, Operation, Resources};

/// A saved state of a sandbox: its files (and, on runtimes that can, its memory) in the
/// snapshot store. A checkpoint outlives its sandbox: it goes only when deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpoint {
    /// Id (`ck-` + 16 lowercase letters/digits).
    pub id: String,
    /// The org it belongs to.
    #[serde(default = "crate::default_org")]
    pub org: String,
    /// The sandbox it was taken of (for an imported one: on the server that exported it).
    pub sandbox_id: String,
    /// Optional label given at creation (at most 128 bytes).
    pub name: Option<String>,
    /// Current state.
    pub state: CheckpointState,
    /// Why it failed.
    pub state_reason: Option<String>,
    /// Template of the sandbox.
    pub template: String,
    /// Release of the sandbox (a sandbox made from the checkpoint runs the same).
    pub release: u32,
    /// Resource limits of the sandbox (a sandbox made from the checkpoint has the same).
    pub resources: Resources,
    /// Sandbox-wide environment at the time of the checkpoint.
    pub env: BTreeMap<String, String>,
    /// Default working directory of commands.
    pub cwd: String,
    /// Default user of commands.
    pub user: String,
    /// Runtime that took it (`runc`, `qemu`); only that runtime can restore it.
    pub runtime: String,
    /// Whether it holds process memory (`false` on runc: restoring restarts the processes).
    pub memory: bool,
    /// Bytes of file content saved (0 until `ready`).
    pub file_bytes: u64,
    /// How long the sandbox's processes were frozen while the checkpoint was saved, in
    /// milliseconds (`None` until `ready`).
    pub pause_ms: Option<u64>,
    /// The operation that saved it (`checkpoint_sandbox`; `None` for an imported one).
    pub operation_id: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// `POST /v1/sandboxes/{id}/checkpoints` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckpointRequest {
    /// Optional label (1 to 128 bytes, no control characters).
    #[serde(default)]
    pub name: Option<String>,
}

/// `202` answer of `POST /v1/sandboxes/{id}/checkpoints`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateCheckpointResponse {
    /// The checkpoint (state `creating`).
    pub checkpoint: Checkpoint,
    /// The operation saving it.
    pub operation: Operation,
}

/// `GET /v1/sandboxes/{id}/checkpoints` and `GET /v1/checkpoints` answer, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointList {
    /// The checkpoints.
    pub checkpoints: Vec<Checkpoint>,
}

/// `POST /v1/sandboxes/{id}/rollback` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// Id of a `ready` checkpoint of this sandbox.
    pub checkpoint: String,
    /// Seconds until the operation is failed with `deadline_exceeded` (default 1800).
    #[serde(default)]
    pub deadline_s: Option<u64>,
}

/// `POST /v1/sandboxes/{id}/fork` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many sandboxes to create (1 to 16).
    pub count: u32,
    /// Labels of every fork (as on create).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// `202` answer of `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForkResponse {
    /// The fresh checkpoint the forks start from.
    pub checkpoint: Checkpoint,
    /// The operation saving the checkpoint.
    pub operation: Operation,
    /// The forks (state `creating`), each with its create operation, which waits for the
    /// checkpoint.
    pub sandboxes: Vec<CreateSandboxResponse>,
}

/// The header entry (`cove-checkpoint.json`) of a checkpoint archive
/// (`GET /v1/checkpoints/{cid}/archive`): an uncompressed tar of this header, `snapshot.json`
/// (the snapshot's manifest) and `artifacts/<name>` per runtime artifact (runc: `fs.tar`, the
/// sandbox's own files), in that order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArchiveHeader {
    /// Always `cove-checkpoint`.
    pub format: String,
    /// Format version (1).
    pub version: u32,
    /// The checkpoint as the exporting server had it.
    pub checkpoint: Checkpoint,
}

/// Value of [`CheckpointArchiveHeader::format`].
pub const CHECKPOINT_ARCHIVE_FORMAT: &str = "cove-checkpoint";
