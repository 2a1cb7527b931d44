//! The contract between the control plane and a node agent, whatever the transport (in-process
//! today; gRPC across hosts later). The control plane owns desired state and operations; the node
//! owns what runs: sandboxes, their guest agents, release root filesystems.
//!
//! The contract speaks its own words ([`types`]): no guest-protocol type appears in it, errors
//! are typed by what went wrong ([`NodeError`]), every payload is owned and serialisable, and
//! every stream is a `Stream<Item = Result<_, NodeError>>`, so a gRPC service can be written
//! straight from these traits.

use std::collections::BTreeMap;
use std::io;

use bytes::Bytes;
use cove_domain::{EgressPolicy, Resources};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

mod builds;
mod checkpoints;
mod commands;
mod files;
mod lifecycle;
mod metrics;
mod network;
mod releases;
mod report;
mod volumes;

pub use builds::{
    exposed_port, BuildParent, BuildStage, BuildStep, BuiltFileRelease, FileBuild, FileStep,
    ReadyCheck, ReleaseDefaults, StepProgram, DEFAULT_PATH,
};
pub use checkpoints::{
    CheckpointInfo, ImportedCheckpoint, NodeCheckpoints, ARCHIVE_HEADER, ARCHIVE_HEADER_MAX_BYTES,
    ARCHIVE_VERSION,
};
pub use commands::NodeCommands;
pub use files::NodeFiles;
pub use lifecycle::{
    AgentHealth, NodeCapabilities, NodeLifecycle, RepairInfo, SuspendInfo, WakeInfo,
};
pub use metrics::{MetricsSample, NodeCapacity, NodeMetrics, SandboxMetrics, HISTORY_SAMPLES};
pub use network::{
    LaunchSecret, NetworkCounters, NetworkDenied, NodeNetwork, PortRequest, PortResponse,
    SandboxNetworkInfo,
};
pub use releases::{NodeReleases, ReleaseRef};
pub use report::NodeReport;
pub use volumes::{LaunchVolume, NodeVolumes, VolumeEntry, VolumeEntryAttrs, VolumeUsage};

pub mod types;
pub mod words;

pub use types::{
    CommandInfo, FileEvent, FileEventKind, FileInfo, FileType, OutputStream, Program, PtySize,
    SandboxPath, SetXattrsRequest, SpawnRequest, WatchRequest, WriteFileRequest, XattrsRequest,
};

/// What the node needs to start a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLaunch {
    /// Sandbox id (also its hostname).
    pub id: String,
    /// Template name.
    pub template: String,
    /// Release number.
    pub release: u32,
    /// The release's content digest when the node may fetch it from the snapshot store
    /// (`releases/<hex>/`) if it does not hold it (releases built from a file); the node checks
    /// the fetched tree against it ([`NodeError::ReleaseCorrupt`] on a mismatch). `None`: the
    /// node must hold the release.
    #[serde(default)]
    pub release_digest: Option<String>,
    /// Limits, as validated by the control plane; the runtime maps them as they are.
    pub resources: Resources,
    /// Its egress policy (enforced by the node's gateway when the node has a sandbox network).
    #[serde(default)]
    pub network: EgressPolicy,
    /// Secrets substituted by the gateway (name → value and hosts); the sandbox sees only
    /// placeholders. Never logged (see [`LaunchSecret`]'s `Debug`).
    #[serde(default)]
    pub secrets: BTreeMap<String, LaunchSecret>,
    /// Turns secret substitution on even without `secrets`: the sandbox trusts its gateway CA
    /// from its boot, so secrets can be handed in while it runs
    /// ([`NodeNetwork::rearm_secrets`]; a warm pool member claimed by a create with secrets).
    /// Ignored on a node without sandbox networks. Older nodes ignore it (a claim's re-arm then
    /// fails and the member is not handed out).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub arm_secrets: bool,
    /// Volumes to mount, in order (the node keeps them: [`NodeVolumes`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<LaunchVolume>,
}

/// A sandbox as the node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeSandboxState {
    /// Its processes run and its guest agent answers.
    Running,
    /// Frozen.
    Paused,
    /// Present on the node but its init is gone or its agent does not answer.
    Stopped,
}

/// One event of a release build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BuildEvent {
    /// A line of the build log.
    Log(String),
    /// Progress, 0–100, and the current phase.
    Progress {
        /// Percent done.
        percent: u8,
        /// Phase name.
        phase: String,
    },
}

/// Result of a finished release build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuiltRelease {
    /// Size of the root filesystem in bytes.
    pub size_bytes: u64,
    /// Whether it came from the node's build cache.
    pub from_cache: bool,
    /// Content digest over the root filesystem and the template's defaults: `sha256:` + 64
    /// hex digits (manifest v1, see the node agent's `template::digest`).
    pub digest: String,
}

/// Defaults and identity of a built-in template recipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecipeInfo {
    /// Template name.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// Default user of commands.
    pub user: String,
    /// Default working directory.
    pub workdir: String,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// Hash of everything that affects the build's output.
    pub recipe_hash: String,
}

/// One event of a command's output stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttachEvent {
    /// Bytes from stdout or stderr at `offset` of the combined output.
    Output {
        /// Offset of the first byte.
        offset: u64,
        /// Source stream.
        stream: OutputStream,
        /// The bytes.
        data: Bytes,
    },
    /// Bytes `[offset, offset + len)` of a long output were dropped (its middle); the stream
    /// continues at `offset + len`.
    Gap {
        /// Offset of the first dropped byte.
        offset: u64,
        /// Number of dropped bytes.
        len: u64,
    },
    /// The command ended and every byte was sent.
    Exited(CommandInfo),
    /// Without `follow`: every byte kept so far was sent while the command still runs.
    End,
}

/// Errors a node returns, typed by what went wrong so the control plane maps each to one API
/// code without knowing which call it made. Messages name sandbox paths and ids only; host
/// detail appears only in the 5xx kinds (`Runtime`, `Build`, `Internal`), which are logged,
/// never shown to clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum NodeError {
    /// The node has no such sandbox (not created here, or already removed).
    #[error("sandbox {0} is not on this node")]
    SandboxNotFound(String),
    /// The sandbox has no such command (never started, or forgotten).
    #[error("command {0} not found")]
    CommandNotFound(String),
    /// No such file or directory in the sandbox.
    #[error("{0}")]
    FileNotFound(String),
    /// No such template recipe or release on the node.
    #[error("{0}")]
    ReleaseNotFound(String),
    /// A request field the sandbox refused (a missing `cwd`, an unknown `user`, a bad path).
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The request field (`cwd`, `user`, `path`, ...).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A path exists but is the wrong type (a file where a directory is needed, ...).
    #[error("{field}: {message}")]
    WrongType {
        /// The request field the path came from (`path`, `from`, `cwd`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A file or directory is already there.
    #[error("{0}")]
    AlreadyExists(String),
    /// The sandbox user may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// Not applicable in the current state (stdin closed, command still running).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The sandbox's disk is full.
    #[error("{0}")]
    NoSpace(String),
    /// The data exceeds the request's limit.
    #[error("{0}")]
    TooLarge(String),
    /// The process could not be started (fork failed, a limit was reached).
    #[error("could not start the process: {0}")]
    SpawnFailed(String),
    /// The sandbox's guest agent cannot be reached (stopped, crashed, frozen).
    #[error("sandbox agent unavailable: {0}")]
    AgentUnavailable(String),
    /// The runtime failed (details for the log, not for clients).
    #[error("runtime: {0}")]
    Runtime(String),
    /// A release build failed.
    #[error("build failed: {0}")]
    Build(String),
    /// The work was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// Nothing answers HTTP on that port of the sandbox (connection refused, closed, or not
    /// HTTP).
    #[error("{0}")]
    PortClosed(String),
    /// The node cannot do this (its runtime or configuration lacks the feature: a sandbox
    /// network on the qemu runtime, a network policy with networking off).
    #[error("{0}")]
    Unsupported(String),
    /// The sandbox's snapshot is damaged: its manifest or an artifact cannot be read back.
    #[error("{0}")]
    SnapshotCorrupt(String),
    /// A release fetched from the snapshot store does not match its digest (or cannot be
    /// read back); nothing of it is kept on the node.
    #[error("{0}")]
    ReleaseCorrupt(String),
    /// `FROM oci-archive:` on a node whose operator set no OCI import directory
    /// (`--oci-import-dir`), so it imports no image archive.
    #[error(
        "this server has no OCI import directory: FROM oci-archive: is off (an operator turns \
         it on with --oci-import-dir DIR)"
    )]
    OciImportDisabled,
    /// Anything else on the node (details for the log, not for clients).
    #[error("node: {0}")]
    Internal(String),
    /// The node itself cannot be reached (a remote node agent that does not answer, or one
    /// the control plane has marked lost).
    #[error("node unreachable: {0}")]
    NodeUnreachable(String),
    /// No node can take the sandbox now (none ready, none with room, the runtime or the
    /// release).
    #[error("no node available: {0}")]
    NoNodeAvailable(String),
}

/// A byte stream of file or request data.
pub type ByteStream = BoxStream<'static, Result<Bytes, io::Error>>;

/// The node agent as the control plane sees it: every part of the contract. Every method is
/// safe to call concurrently; lifecycle calls for one sandbox are serialised by the caller (one
/// operation at a time).
pub trait NodeApi:
    NodeReleases
    + NodeLifecycle
    + NodeCheckpoints
    + NodeCommands
    + NodeFiles
    + NodeMetrics
    + NodeNetwork
    + NodeVolumes
{
}

impl<T> NodeApi for T where
    T: NodeReleases
        + NodeLifecycle
        + NodeCheckpoints
        + NodeCommands
        + NodeFiles
        + NodeMetrics
        + NodeNetwork
        + NodeVolumes
{
}
