//! Sandboxes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Operation, Resources, ResourcesRequest, SandboxState};

/// `POST /v1/sandboxes` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Sandbox {
    /// Id (`sb-` + 16 lowercase letters/digits); also its hostname.
    pub id: String,
    /// Template name.
    pub template: String,
    /// Release number it runs.
    pub release: u32,
    /// Content digest of that release (`sha256:…`; absent for releases built before digests).
    #[serde(default)]
    pub release_digest: Option<String>,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateSandboxResponse {
    /// The sandbox (state `creating`).
    pub sandbox: Sandbox,
    /// The create operation to poll.
    pub operation: Operation,
}

/// `GET /v1/sandboxes` answer. Ordered by creation time, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxList {
    /// One page of sandboxes.
    pub sandboxes: Vec<Sandbox>,
    /// Pass as `?cursor=` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}
