//! What a test can make the fake node do wrong, and what it records: the kinds of call
//! ([`Call`]), injected faults ([`Fault`]: fail, delay, hang; before or after the call's
//! effect), and the call log.

use std::time::Duration;

use cove_node_api::NodeError;

/// One kind of node call (one method of the node-api traits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Call {
    /// `NodeReleases::build_release`.
    BuildRelease,
    /// `NodeReleases::remove_release`.
    RemoveRelease,
    /// `NodeReleases::remove_stored_release` (its target is the digest).
    RemoveStoredRelease,
    /// `NodeLifecycle::start_sandbox`.
    Start,
    /// `NodeLifecycle::adopt_sandbox`.
    Adopt,
    /// `NodeLifecycle::inspect_sandbox`.
    Inspect,
    /// `NodeLifecycle::check_agent`.
    CheckAgent,
    /// `NodeLifecycle::repair_sandbox`.
    Repair,
    /// `NodeLifecycle::pause_sandbox`.
    Pause,
    /// `NodeLifecycle::resume_sandbox`.
    Resume,
    /// `NodeLifecycle::suspend_sandbox`.
    Suspend,
    /// `NodeLifecycle::wake_sandbox`.
    Wake,
    /// `NodeLifecycle::release_sandbox`.
    Release,
    /// `NodeLifecycle::destroy_sandbox`.
    Destroy,
    /// `NodeLifecycle::list_sandboxes`.
    ListSandboxes,
    /// `NodeLifecycle::has_snapshot`.
    HasSnapshot,
    /// `NodeLifecycle::delete_snapshot`.
    DeleteSnapshot,
    /// `NodeLifecycle::list_snapshots`.
    ListSnapshots,
    /// `NodeLifecycle::sweep_snapshots`.
    SweepSnapshots,
    /// `NodeCheckpoints::checkpoint_sandbox`.
    Checkpoint,
    /// `NodeCheckpoints::restore_checkpoint`.
    RestoreCheckpoint,
    /// `NodeCheckpoints::export_checkpoint`.
    ExportCheckpoint,
    /// `NodeCheckpoints::import_checkpoint`.
    ImportCheckpoint,
    /// `NodeCheckpoints::delete_checkpoint`.
    DeleteCheckpoint,
    /// `NodeCommands::spawn`.
    Spawn,
    /// `NodeCommands::command`.
    Command,
    /// `NodeCommands::commands`.
    Commands,
    /// `NodeCommands::signal`.
    Signal,
    /// `NodeCommands::kill`.
    Kill,
    /// `NodeCommands::attach`.
    Attach,
    /// `NodeCommands::stdin_write`.
    StdinWrite,
    /// `NodeCommands::stdin_close`.
    StdinClose,
    /// `NodeCommands::resize`.
    Resize,
    /// `NodeCommands::forget`.
    Forget,
    /// `NodeFiles::write_file`.
    WriteFile,
    /// `NodeFiles::read_file`.
    ReadFile,
    /// `NodeFiles::stat`.
    Stat,
    /// `NodeFiles::list_dir`.
    ListDir,
    /// `NodeFiles::make_dir`.
    MakeDir,
    /// `NodeFiles::remove`.
    Remove,
    /// `NodeFiles::rename`.
    Rename,
    /// `NodeFiles::watch`.
    Watch,
    /// `NodeMetrics::capacity`.
    Capacity,
    /// `NodeMetrics::sandbox_metrics`.
    SandboxMetrics,
    /// `NodeNetwork::rearm_secrets`.
    RearmSecrets,
    /// `NodeVolumes::attach_volumes`.
    AttachVolumes,
    /// `NodeVolumes::download_volume` (its target is the volume id).
    DownloadVolume,
    /// `NodeVolumes::upload_volume` (its target is the volume id).
    UploadVolume,
}

/// What an injected fault does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Return this error.
    Fail(NodeError),
    /// Wait this long (tokio time, so `tokio::time::pause` controls it); a call that takes a
    /// cancel token returns [`NodeError::Cancelled`] if it fires first.
    Delay(Duration),
    /// Block until [`crate::FakeNode::release`] is called for this kind of call (then carry
    /// on as if nothing happened), or, for a call that takes a cancel token, until it fires
    /// ([`NodeError::Cancelled`]). A call without a token hangs until released or dropped.
    Hang,
}

/// When a fault strikes relative to the call's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before the call changes anything (a failure leaves the node as it was).
    Before,
    /// After the call's effect is done (a failure or hang hides a change that happened).
    After,
}

/// A fault for the next call(s) of one [`Call`] kind, set with [`crate::FakeNode::inject`].
/// Faults of one kind are used in the order they were injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What it does.
    pub action: Action,
    /// Before or after the effect.
    pub stage: Stage,
    /// For how many calls (`None`: every call from now on).
    pub times: Option<u32>,
    /// Only for calls on this sandbox (`None`: any).
    pub sandbox_id: Option<String>,
}

impl Fault {
    /// The next call fails with `error` before doing anything.
    pub fn fail(error: NodeError) -> Fault {
        Fault::of(Action::Fail(error))
    }

    /// The next call waits `d` before doing anything.
    pub fn delay(d: Duration) -> Fault {
        Fault::of(Action::Delay(d))
    }

    /// The next call hangs before doing anything (see [`Action::Hang`]).
    pub fn hang() -> Fault {
        Fault::of(Action::Hang)
    }

    fn of(action: Action) -> Fault {
        Fault {
            action,
            stage: Stage::Before,
            times: Some(1),
            sandbox_id: None,
        }
    }

    /// Strikes after the call's effect instead of before it.
    pub fn after_effect(mut self) -> Fault {
        self.stage = Stage::After;
        self
    }

    /// Applies to the next `n` calls.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }

    /// Applies to every call from now on.
    pub fn always(mut self) -> Fault {
        self.times = None;
        self
    }

    /// Applies only to calls on sandbox `id`.
    pub fn on(mut self, id: &str) -> Fault {
        self.sandbox_id = Some(id.to_string());
        self
    }

    pub(crate) fn matches(&self, sandbox_id: &str) -> bool {
        self.sandbox_id.as_deref().is_none_or(|s| s == sandbox_id)
    }
}

/// One recorded call: its kind and the sandbox it was about (the template for release calls,
/// empty for calls about no sandbox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// Kind of call.
    pub call: Call,
    /// Sandbox id (or template name, or empty).
    pub target: String,
}
