//! Commands in a sandbox: start, inspect, signal, kill, output, stdin, terminal size, forget.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::{AttachEvent, CommandInfo, NodeError, PtySize, SpawnRequest};

/// Commands in a sandbox: start, inspect, signal, kill, output, stdin, terminal size, forget.
#[async_trait]
pub trait NodeCommands: Send + Sync + 'static {
    /// Starts a command.
    async fn spawn(&self, sandbox_id: &str, req: SpawnRequest) -> Result<CommandInfo, NodeError>;

    /// One command's state.
    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError>;

    /// Every command the sandbox keeps.
    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError>;

    /// Delivers a signal to the command's process group.
    async fn signal(
        &self,
        sandbox_id: &str,
        command_id: &str,
        signal: i32,
    ) -> Result<(), NodeError>;

    /// SIGTERM, `grace_ms`, SIGKILL; returns once every process of the command is gone.
    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        grace_ms: u64,
    ) -> Result<CommandInfo, NodeError>;

    /// Streams a command's output from `offset`. With `follow`, the stream ends with
    /// [`AttachEvent::Exited`]; without, with `Exited` or [`AttachEvent::End`] once the output
    /// kept so far was sent. [`AttachEvent::Gap`] marks dropped bytes.
    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
        follow: bool,
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

    /// Changes the terminal size of a command started with a pty.
    async fn resize(
        &self,
        sandbox_id: &str,
        command_id: &str,
        size: PtySize,
    ) -> Result<(), NodeError>;

    /// Forgets a finished command and deletes its kept output ([`NodeError::FailedPrecondition`]
    /// while it runs).
    async fn forget(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError>;
}
