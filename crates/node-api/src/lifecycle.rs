//! Sandbox lifecycle on the node: start, adopt after a restart, pause, resume, suspend to the
//! snapshot store, wake from it, destroy, list.

use crate::{NodeError, NodeSandboxState, SandboxLaunch};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// What the node's runtime and snapshot store can do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeCapabilities {
    /// Runtime name (`runc`, `qemu`).
    pub runtime: String,
    /// Isolation boundary (`container` or `vm`).
    pub boundary: String,
    /// Pause freezes processes in memory.
    pub pause: bool,
    /// Suspend saves process memory (false: wake restarts the sandbox from its files).
    pub suspend_memory: bool,
    /// Kind of snapshot store (`file` or `s3`).
    pub snapshot_store: String,
    /// Sandboxes get a network behind the node's egress gateway (false: loopback only, and
    /// only the default egress policy is accepted).
    #[serde(default)]
    pub network: bool,
    /// Each sandbox's root is an unprivileged host id range of its own (a user namespace);
    /// false for VMs, whose boundary is the VM.
    #[serde(default)]
    pub user_namespaces: bool,
    /// Persistent volumes can be made and mounted on this node (runc; false for a VM runtime
    /// in this version).
    #[serde(default)]
    pub volumes: bool,
    /// Volumes can be attached to a running sandbox ([`crate::NodeVolumes::attach_volumes`]:
    /// runc; a warm pool member takes a create's volumes at its claim). Older nodes: false.
    #[serde(default)]
    pub attach_volumes: bool,
}

/// The result of a suspend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SuspendInfo {
    /// Bytes of file content saved.
    pub file_bytes: u64,
}

/// The result of a wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WakeInfo {
    /// Whether process memory was restored (false: processes were restarted).
    pub memory_restored: bool,
    /// Bytes of file content restored.
    pub file_bytes: u64,
}

/// What a guest agent check found ([`NodeLifecycle::check_agent`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AgentHealth {
    /// The agent answered a ping in time (or the sandbox is paused: a frozen agent is not
    /// checked).
    Ok,
    /// The agent's process lives but did not answer in time (hung, or very busy): a caller
    /// decides after a few misses in a row. `reason` names no host path.
    Unresponsive {
        /// What was found: the ping timed out.
        reason: String,
    },
    /// The agent is gone: the sandbox's init exited, its container vanished (its files are
    /// there), or its socket refuses connections. `reason` names no host path.
    Dead {
        /// What was found.
        reason: String,
    },
}

impl AgentHealth {
    /// The reason of an unhealthy answer (`None` for [`AgentHealth::Ok`]).
    pub fn reason(&self) -> Option<&str> {
        match self {
            AgentHealth::Ok => None,
            AgentHealth::Unresponsive { reason } | AgentHealth::Dead { reason } => Some(reason),
        }
    }
}

/// The result of a repair ([`NodeLifecycle::repair_sandbox`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepairInfo {
    /// Whether the sandbox's processes were restarted (on runc and qemu the guest agent is
    /// the sandbox's init, so a repair restarts the sandbox on its own files; commands that
    /// ran are gone). False when only the agent restarted and other processes kept running.
    pub processes_restarted: bool,
}

/// Sandbox lifecycle on the node.
#[async_trait]
pub trait NodeLifecycle: Send + Sync + 'static {
    /// Starts a sandbox and returns once its guest agent answers. On failure nothing is left.
    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError>;

    /// Re-attaches to a sandbox that kept running while the node agent restarted. Returns its
    /// state, or `None` when the node has no trace of it.
    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError>;

    /// The runtime's view of a sandbox, without touching its guest agent (`None`: no
    /// container). For periodic reconciliation.
    async fn inspect_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError>;

    /// Why a sandbox that stopped by itself stopped (a guest kernel panic, its VM process
    /// dying), when the runtime knows; `None` otherwise.
    async fn failure_reason(&self, _id: &str) -> Option<String> {
        None
    }

    /// Pings the guest agent of a running sandbox, waiting at most `timeout`. A paused
    /// sandbox is [`AgentHealth::Ok`] (not checked); one whose init exited, whose container
    /// vanished or whose agent refuses connections is [`AgentHealth::Dead`]; one whose agent
    /// does not answer in time is [`AgentHealth::Unresponsive`].
    /// Errors: `SandboxNotFound` when the node has nothing of it (no container, no directory);
    /// `FailedPrecondition` when the sandbox itself stopped with a [`Self::failure_reason`]
    /// (no agent to repair: reconciliation fails it with that reason).
    async fn check_agent(
        &self,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<AgentHealth, NodeError>;

    /// Repairs a sandbox whose guest agent died or hangs, keeping its files: restarts the
    /// agent inside the still-running sandbox where the runtime can, else stops what is left
    /// of the sandbox and starts it again from its own disk (its network and counters stay).
    /// Returns once the agent answers. Errors: `SandboxNotFound` when its files are gone
    /// (nothing to repair from); any other error leaves the files in place for another try.
    async fn repair_sandbox(&self, launch: SandboxLaunch) -> Result<RepairInfo, NodeError>;

    /// Freezes every process of a running sandbox (commands, files and connections survive).
    /// Pausing a paused sandbox succeeds.
    async fn pause_sandbox(&self, id: &str) -> Result<(), NodeError>;

    /// Thaws a paused sandbox. Resuming a running sandbox succeeds.
    async fn resume_sandbox(&self, id: &str) -> Result<(), NodeError>;

    /// Saves the sandbox's files to the snapshot store (freezing it meanwhile), then releases
    /// every node resource it holds (processes, mounts, cgroups, sockets, its directory). On
    /// failure or cancellation before the snapshot is complete, the sandbox is left as it was
    /// (running or paused) and no snapshot is kept.
    async fn suspend_sandbox(
        &self,
        id: &str,
        cancel: CancellationToken,
    ) -> Result<SuspendInfo, NodeError>;

    /// Restores a suspended sandbox's files from the snapshot store and starts it. On failure
    /// or cancellation nothing is left on the node and the snapshot is kept. The caller deletes
    /// the snapshot once it has recorded the sandbox as running.
    async fn wake_sandbox(
        &self,
        launch: SandboxLaunch,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError>;

    /// Releases every node resource of a sandbox but keeps its snapshot (the end of a suspend
    /// whose snapshot is complete). Idempotent.
    async fn release_sandbox(&self, id: &str) -> Result<(), NodeError>;

    /// Stops a sandbox and removes everything it had on the node and in the snapshot store.
    /// Idempotent.
    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError>;

    /// Ids of every sandbox the node holds anything of: a runtime container or a directory
    /// (for reconciliation).
    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError>;

    /// Whether a complete snapshot of the sandbox exists.
    async fn has_snapshot(&self, id: &str) -> Result<bool, NodeError>;

    /// Deletes a sandbox's snapshot; none is fine.
    async fn delete_snapshot(&self, id: &str) -> Result<(), NodeError>;

    /// Ids of the sandboxes that have a snapshot (for reconciliation).
    async fn list_snapshots(&self) -> Result<Vec<String>, NodeError>;

    /// Removes what interrupted snapshot uploads left behind; returns how many pieces. Call
    /// only when no suspend runs (at start-up).
    async fn sweep_snapshots(&self) -> Result<u64, NodeError>;

    /// What the runtime and snapshot store can do.
    fn capabilities(&self) -> NodeCapabilities;
}
