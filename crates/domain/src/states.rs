//! States and kinds with their wire strings (DESIGN.md §1–2): sandboxes, operations, commands,
//! and lifecycle events. Each table is the only place its strings are written.

crate::wire_enum! {
    /// Lifecycle state of a sandbox (DESIGN.md §2).
    pub enum SandboxState {
        /// Being created; commands are refused until `running`.
        Creating = "creating",
        /// Processes run; commands and files are served.
        Running = "running",
        /// Processes frozen, memory resident on the node.
        Paused = "paused",
        /// Its guest agent died or stopped answering; `state_reason` says why. The node
        /// repairs it (its files are kept) and it returns to `running`, or ends `failed`.
        Degraded = "degraded",
        /// Being saved to the snapshot store.
        Suspending = "suspending",
        /// Saved; no node resources held.
        Suspended = "suspended",
        /// Being restored from its snapshot.
        Waking = "waking",
        /// Being deleted.
        Deleting = "deleting",
        /// Deleted (kept in listings only when asked for).
        Deleted = "deleted",
        /// Failed; `state_reason` says why.
        Failed = "failed",
    }
}

crate::wire_enum! {
    /// What an operation does.
    pub enum OperationKind {
        /// Create and start a sandbox.
        CreateSandbox = "create_sandbox",
        /// Delete a sandbox and everything it had.
        DeleteSandbox = "delete_sandbox",
        /// Build a new release of a template.
        BuildRelease = "build_release",
        /// Freeze a running sandbox.
        PauseSandbox = "pause_sandbox",
        /// Thaw a paused sandbox.
        ResumeSandbox = "resume_sandbox",
        /// Save a sandbox to the snapshot store and release its node resources.
        SuspendSandbox = "suspend_sandbox",
        /// Restore a suspended sandbox and start it.
        WakeSandbox = "wake_sandbox",
        /// Save a running sandbox's state as a checkpoint while it keeps running.
        CheckpointSandbox = "checkpoint_sandbox",
        /// Return a sandbox to one of its checkpoints.
        RollbackSandbox = "rollback_sandbox",
    }
}

crate::wire_enum! {
    /// State of a checkpoint: `creating` while its operation saves it, then `ready` or
    /// `failed`.
    pub enum CheckpointState {
        /// Being saved.
        Creating = "creating",
        /// Complete in the snapshot store; usable for rollback, fork and create.
        Ready = "ready",
        /// Saving failed (`state_reason` says why); nothing of it is kept.
        Failed = "failed",
    }
}

crate::wire_enum! {
    /// State of an operation. `succeeded`, `failed` and `cancelled` are final.
    pub enum OperationState {
        /// Accepted, not started.
        Pending = "pending",
        /// In progress.
        Running = "running",
        /// Done.
        Succeeded = "succeeded",
        /// Ended with an error (see `error`).
        Failed = "failed",
        /// Cancelled before it finished.
        Cancelled = "cancelled",
    }
}

impl OperationState {
    /// Whether the operation has ended.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            OperationState::Succeeded | OperationState::Failed | OperationState::Cancelled
        )
    }
}

crate::wire_enum! {
    /// State of a command.
    pub enum CommandState {
        /// Its process runs.
        Running = "running",
        /// It ended (`exit_code` or `signal` says how).
        Exited = "exited",
    }
}

crate::wire_enum! {
    /// What a lifecycle event says happened to a sandbox. Wire names are dotted
    /// (`sandbox.created`, ...).
    pub enum EventType {
        /// Accepted; being created.
        SandboxCreated = "sandbox.created",
        /// Created and running.
        SandboxRunning = "sandbox.running",
        /// Frozen by a pause.
        SandboxPaused = "sandbox.paused",
        /// Thawed by a resume.
        SandboxResumed = "sandbox.resumed",
        /// Saved to the snapshot store; no node resources held.
        SandboxSuspended = "sandbox.suspended",
        /// Restored from its snapshot and running again.
        SandboxWoken = "sandbox.woken",
        /// Deleted.
        SandboxDeleted = "sandbox.deleted",
        /// Failed (`reason` says why).
        SandboxFailed = "sandbox.failed",
        /// Its guest agent died or stopped answering (`reason` says why); being repaired.
        SandboxDegraded = "sandbox.degraded",
        /// Repaired after `sandbox.degraded`: its guest agent answers again (`reason` says
        /// how: processes restarted on its own files).
        SandboxRepaired = "sandbox.repaired",
        /// Its gateway refused a connection or DNS question (`destination` names it; repeats
        /// toward one destination are recorded at most every few seconds).
        NetworkDenied = "network.denied",
    }
}

crate::wire_enum! {
    /// State of a node as the control plane sees it (placement goes only to `ready` nodes).
    pub enum NodeState {
        /// Heartbeats arrive; new sandboxes may be placed on it.
        Ready = "ready",
        /// An operator stopped placement on it (`cove node drain`); its sandboxes keep running.
        Draining = "draining",
        /// Several creates failed on it in a row; no placement until an operator makes it
        /// ready again.
        Quarantined = "quarantined",
        /// No heartbeat within the timeout: its running sandboxes are `failed (node_lost)`.
        Lost = "lost",
    }
}

crate::wire_enum! {
    /// What happens to a sandbox when its `expires_at` passes.
    #[derive(Default)]
    pub enum OnExpiry {
        /// It is deleted.
        #[default]
        Delete = "delete",
        /// It is suspended (and expires no more until its expiry is set again).
        Suspend = "suspend",
        /// It is paused: its processes frozen, memory held on its node, until a resume (and
        /// it expires no more until its expiry is set again). E2B's timeout pause where the
        /// runtime's suspend does not keep memory.
        Pause = "pause",
    }
}
