//! The contract between the control plane and a node agent, whatever the transport (in-process
//! today; gRPC across hosts later). The control plane owns desired state and operations; the node
//! owns what runs: sandboxes, their guest agents, release root filesystems.
//!
//! Command and file payloads reuse the guest protocol's types, since the node passes them through
//! to the guest agent after validating them.

use std::collections::BTreeMap;
use std::io;

use bytes::Bytes;
use futures::stream::BoxStream;

mod commands;
mod files;
mod lifecycle;
mod releases;

pub use commands::NodeCommands;
pub use files::NodeFiles;
pub use lifecycle::{NodeCapabilities, NodeLifecycle, SuspendInfo, WakeInfo};
pub use releases::NodeReleases;

pub use cove_guest_protocol::PtySize;
pub use cove_guest_protocol::{
    CommandInfo, CommandState, ErrorCode as GuestErrorCode, FileInfo, FileType, GuestPath, Program,
    SpawnRequest, Stream as OutputStream, WriteFileRequest,
};
pub use cove_guest_protocol::{FileEvent, FileEventKind, WatchRequest};

/// What the node needs to start a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxLaunch {
    /// Sandbox id (also its hostname).
    pub id: String,
    /// Template name.
    pub template: String,
    /// Release number.
    pub release: u32,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory limit in MiB.
    pub memory_mib: u64,
    /// Process limit.
    pub pids_max: u64,
    /// Size in MiB of the sandbox's own disk for its files (`None` = the node's disk).
    pub disk_mib: Option<u64>,
}

/// A sandbox as the node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeSandboxState {
    /// Its processes run and its guest agent answers.
    Running,
    /// Frozen.
    Paused,
    /// Present on the node but its init is gone or its agent does not answer.
    Stopped,
}

/// One event of a release build.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltRelease {
    /// Size of the root filesystem in bytes.
    pub size_bytes: u64,
    /// Whether it came from the node's build cache.
    pub from_cache: bool,
}

/// Defaults and identity of a built-in template recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq)]
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

/// Errors a node returns.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node has no such sandbox (not created here, or already removed).
    #[error("sandbox {0} is not on this node")]
    SandboxNotFound(String),
    /// No such template recipe or release on the node.
    #[error("{0}")]
    ReleaseNotFound(String),
    /// The guest agent answered with an error.
    #[error("{message}")]
    Guest {
        /// Guest error code.
        code: GuestErrorCode,
        /// Detail (sandbox paths only).
        message: String,
    },
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
    /// Anything else on the node (details for the log, not for clients).
    #[error("node: {0}")]
    Internal(String),
}

/// A byte stream of file or request data.
pub type ByteStream = BoxStream<'static, Result<Bytes, io::Error>>;

/// The node agent as the control plane sees it: every part of the contract. Every method is
/// safe to call concurrently; lifecycle calls for one sandbox are serialised by the caller (one
/// operation at a time).
pub trait NodeApi: NodeReleases + NodeLifecycle + NodeCommands + NodeFiles {}

impl<T: NodeReleases + NodeLifecycle + NodeCommands + NodeFiles> NodeApi for T {}
