//! Sandboxes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Operation;

/// Lifecycle state of a sandbox (DESIGN.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Being created; commands are refused until `running`.
    Creating,
    /// Processes run; commands and files are served.
    Running,
    /// Processes frozen, memory resident on the node.
    Paused,
    /// Being saved to the snapshot store.
    Suspending,
    /// Saved; no node resources held.
    Suspended,
    /// Being restored from its snapshot.
    Waking,
    /// Being deleted.
    Deleting,
    /// Deleted (kept in listings only when asked for).
    Deleted,
    /// Failed; `state_reason` says why.
    Failed,
}

impl SandboxState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Suspending => "suspending",
            SandboxState::Suspended => "suspended",
            SandboxState::Waking => "waking",
            SandboxState::Deleting => "deleting",
            SandboxState::Deleted => "deleted",
            SandboxState::Failed => "failed",
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "creating" => SandboxState::Creating,
            "running" => SandboxState::Running,
            "paused" => SandboxState::Paused,
            "suspending" => SandboxState::Suspending,
            "suspended" => SandboxState::Suspended,
            "waking" => SandboxState::Waking,
            "deleting" => SandboxState::Deleting,
            "deleted" => SandboxState::Deleted,
            "failed" => SandboxState::Failed,
            _ => return None,
        })
    }
}

/// Resources of a sandbox. Defaults: 1 vCPU, 512 MiB memory, 1024 processes, no disk of its
/// own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU limit in vCPUs (1–16).
    pub vcpus: u32,
    /// Memory limit in MiB (64–65536).
    pub memory_mib: u64,
    /// Process limit (16–65536).
    pub pids_max: u64,
    /// Size in MiB of the sandbox's own disk, which holds every file it writes (64–1048576).
    /// When it is full, writes in the sandbox fail with "No space left on device" and file
    /// uploads with `507 no_space`, while the node and other sandboxes are unaffected. Absent:
    /// the sandbox writes to the node's disk without a size limit of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            vcpus: 1,
            memory_mib: 512,
            pids_max: 1024,
            disk_mib: None,
        }
    }
}

/// Optional resource overrides in a create request; unset fields take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesRequest {
    /// vCPUs (1–16).
    pub vcpus: Option<u32>,
    /// Memory in MiB (64–65536).
    pub memory_mib: Option<u64>,
    /// Process limit (16–65536).
    pub pids_max: Option<u64>,
    /// Size in MiB of a disk of the sandbox's own (64–1048576); see [`Resources::disk_mib`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
}

/// `POST /v1/sandboxes` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// Template name (default `base`).
    #[serde(default)]
    pub template: Option<String>,
    /// Release number of the template (default: its latest ready release).
    #[serde(default)]
    pub release: Option<u32>,
    /// Resource limits.
    #[serde(default)]
    pub resources: Option<ResourcesRequest>,
    /// Environment for every command of the sandbox (a command's own env overrides it).
    /// Names match `[A-Za-z_][A-Za-z0-9_]*`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels (at most 64 keys, 256 bytes per key, 4096 bytes per value).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Default working directory of commands (default: the template's, `/home/user` in `base`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Default user of commands (default: the template's, `user` in `base`).
    #[serde(default)]
    pub user: Option<String>,
    /// Suspend the sandbox after this many seconds without command activity or API access
    /// (default 21600 = 6 h; 0 = never). A command that is still running counts as activity.
    #[serde(default)]
    pub idle_timeout_s: Option<u64>,
    /// Delete the sandbox this many seconds after its creation, whatever its state (default:
    /// never).
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

/// A sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sandbox {
    /// Id (`sb-` + 16 lowercase letters/digits); also its hostname.
    pub id: String,
    /// Template name.
    pub template: String,
    /// Release number it runs.
    pub release: u32,
    /// Current state.
    pub state: SandboxState,
    /// Why it is `failed` (or other detail of the state).
    pub state_reason: Option<String>,
    /// Runtime isolating it (`runc`).
    pub runtime: String,
    /// Resource limits.
    pub resources: Resources,
    /// Sandbox-wide environment.
    pub env: BTreeMap<String, String>,
    /// Labels.
    pub metadata: BTreeMap<String, String>,
    /// Default working directory of commands.
    pub cwd: String,
    /// Default user of commands.
    pub user: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last state change.
    pub updated_at: DateTime<Utc>,
    /// Seconds without activity after which the sandbox is suspended (0 = never).
    #[serde(default)]
    pub idle_timeout_s: u64,
    /// Seconds after creation at which the sandbox is deleted (`None` = never).
    #[serde(default)]
    pub ttl_s: Option<u64>,
    /// Last command activity or API access (flushed from memory every few seconds, so it may lag
    /// by that much).
    #[serde(default)]
    pub last_activity_at: Option<DateTime<Utc>>,
    /// After a `wake`: whether process memory was restored (`false` on runc, where waking
    /// restarts the sandbox from its saved files and the commands from before the suspend are
    /// gone). `None` until the sandbox is first woken.
    #[serde(default)]
    pub memory_restored: Option<bool>,
}

/// `202` answer of `POST /v1/sandboxes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateSandboxResponse {
    /// The sandbox (state `creating`).
    pub sandbox: Sandbox,
    /// The create operation to poll.
    pub operation: Operation,
}

/// `GET /v1/sandboxes` answer. Ordered by creation time, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxList {
    /// One page of sandboxes.
    pub sandboxes: Vec<Sandbox>,
    /// Pass as `?cursor=` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}
