//! Commands, passed through to the sandbox's guest agent.

use async_trait::async_trait;
use cove_node_api::PtySize;

use super::convert::{self, guest_err, Call};
use super::*;

#[async_trait]
impl NodeCommands for NodeAgent {
    async fn spawn(
        &self,
        sandbox_id: &str,
        mut req: SpawnRequest,
    ) -> Result<CommandInfo, NodeError> {
        let g = self.guest(sandbox_id)?;
        // The placeholders of the sandbox's secrets, unless the request sets those names.
        for (name, placeholder) in self.placeholders(sandbox_id) {
            req.env.entry(name).or_insert(placeholder);
        }
        // With a node sandbox CA: TLS clients read the bundle that holds it.
        for (name, path) in self.trust_env(sandbox_id) {
            req.env
                .entry(name.to_string())
                .or_insert_with(|| path.to_string());
        }
        g.spawn(convert::spawn(req))
            .await
            .map(convert::command)
            .map_err(|e| guest_err(Call::Spawn, e))
    }

    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError> {
        self.guest(sandbox_id)?
            .get_command(command_id)
            .await
            .map(convert::command)
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }

    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError> {
        self.guest(sandbox_id)?
            .list_commands()
            .await
            .map(|v| v.into_iter().map(convert::command).collect())
            .map_err(|e| guest_err(Call::Commands, e))
    }

    async fn signal(
        &self,
        sandbox_id: &str,
        command_id: &str,
        signal: i32,
    ) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .signal(command_id, signal)
            .await
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }

    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        grace_ms: u64,
    ) -> Result<CommandInfo, NodeError> {
        let g = self.guest(sandbox_id)?;
        g.kill(command_id, Duration::from_millis(grace_ms))
            .await
            .map(convert::command)
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }

    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
        follow: bool,
    ) -> Result<BoxStream<'static, Result<AttachEvent, NodeError>>, NodeError> {
        let g = self.guest(sandbox_id)?;
        let events = g
            .attach(command_id, offset, follow)
            .await
            .map_err(|e| guest_err(Call::Command(command_id), e))?;
        let cid = command_id.to_string();
        let mapped = events.map(move |ev| match ev {
            Ok(guest::AttachEvent::Output {
                offset,
                stream,
                data,
            }) => Ok(AttachEvent::Output {
                offset,
                stream: convert::stream(stream),
                data,
            }),
            Ok(guest::AttachEvent::Gap { offset, len }) => Ok(AttachEvent::Gap { offset, len }),
            Ok(guest::AttachEvent::Exited(info)) => Ok(AttachEvent::Exited(convert::command(info))),
            Ok(guest::AttachEvent::End) => Ok(AttachEvent::End),
            Err(e) => Err(guest_err(Call::Command(&cid), e)),
        });
        Ok(mapped.boxed())
    }

    async fn stdin_write(
        &self,
        sandbox_id: &str,
        command_id: &str,
        data: Bytes,
    ) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .stdin_write(command_id, data)
            .await
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }

    async fn stdin_close(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .stdin_close(command_id)
            .await
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }

    async fn resize(
        &self,
        sandbox_id: &str,
        command_id: &str,
        size: PtySize,
    ) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .resize(command_id, convert::pty(size))
            .await
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }

    async fn forget(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .forget_command(command_id)
            .await
            .map_err(|e| guest_err(Call::Command(command_id), e))
    }
}
