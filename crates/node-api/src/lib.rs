//! The contract between the control plane and a node agent, whatever the transport (in-process
//! today; gRPC across hosts later). The control plane owns desired state and operations; the node
//! owns what runs: sandboxes, their guest agents, release root filesystems.
//!
//! Command and file payloads reuse the guest protocol's types, since the node passes them through
//! to the guest agent after validating them.

use std::collections::BTreeMap;
use std::io;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

pub use cove_guest_protocol::{
    CommandInfo, CommandState, ErrorCode as GuestErrorCode, FileInfo, FileType, GuestPath,
    Program, SpawnRequest, Stream as OutputStream, WriteFileRequest,
};

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
    /// The command ended and every byte was sent.
    Exited(CommandInfo),
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

/// The node agent as the control plane sees it. Every method is safe to call concurrently;
/// lifecycle calls for one sandbox are serialised by the caller (one operation at a time).
#[async_trait]
pub trait NodeApi: Send + Sync + 'static {
    /// Built-in recipes the node can build (`base`, `tiny`).
    fn recipes(&self) -> Vec<RecipeInfo>;

    /// Builds release `number` of `template`. Idempotent per (template, number): a partial earlier
    /// attempt is discarded first. Nothing is left behind on failure or cancellation.
    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<BuiltRelease, NodeError>;

    /// Whether release `number` of `template` is present on the node.
    async fn has_release(&self, template: &str, number: u32) -> bool;

    /// Removes a release's files (after a failed build, or when retiring it).
    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError>;

    /// Starts a sandbox and returns once its guest agent answers. On failure nothing is left.
    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError>;

    /// Re-attaches to a sandbox that kept running while the node agent restarted. Returns its
    /// state, or `None` when the node has no trace of it.
    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError>;

    /// Stops a sandbox and removes everything it had on the node. Idempotent.
    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError>;

    /// Ids of every sandbox the node's runtime holds (for reconciliation).
    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError>;

    /// Starts a command.
    async fn spawn(&self, sandbox_id: &str, req: SpawnRequest) -> Result<CommandInfo, NodeError>;

    /// One command's state.
    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError>;

    /// Every command the sandbox keeps.
    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError>;

    /// Delivers a signal to the command's process group.
    async fn signal(&self, sandbox_id: &str, command_id: &str, signal: i32)
        -> Result<(), NodeError>;

    /// SIGTERM, `grace_ms`, SIGKILL; returns once every process of the command is gone.
    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        grace_ms: u64,
    ) -> Result<CommandInfo, NodeError>;

    /// Streams a command's output from `offset`; ends with [`AttachEvent::Exited`].
    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
    ) -> Result<BoxStream<'static, Result<AttachEvent, NodeError>>, NodeError>;

    /// Writes to a command's stdin.
    async fn stdin_write(
        &self,
        sandbox_id: &str,
        command_id: &str,
        data: Bytes,
    ) -> Result<(), NodeError>;

    /// Closes a command's stdin.
    async fn stdin_close(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError>;

    /// Writes a file atomically from a byte stream.
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError>;

    /// Reads a file: its metadata, then its bytes.
    async fn read_file(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError>;
}
