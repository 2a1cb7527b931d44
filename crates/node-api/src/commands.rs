//! Commands in a sandbox: start, inspect, signal, kill, output, stdin.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::{AttachEvent, CommandInfo, NodeError, SpawnRequest};

/// Commands in a sandbox: start, inspect, signal, kill, output, stdin.
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
}
