//! `GetCommand`, `ListCommands`, `ForgetCommand`.

use std::sync::Arc;

use cove_guest_protocol::{CommandInfo, Response};

use crate::error::AgentError;
use crate::responder::{send_in_parts, Responder};
use crate::state::Agent;

/// One command's state.
pub fn get(agent: &Arc<Agent>, command_id: &str) -> Result<CommandInfo, AgentError> {
    Ok(agent.commands.get(command_id)?.info())
}

/// Every command, oldest first; long lists go out as `CommandsPart` frames then `Commands`.
pub async fn list(agent: &Arc<Agent>, r: &Responder) {
    let mut infos: Vec<CommandInfo> = agent.commands.all().iter().map(|c| c.info()).collect();
    infos.sort_by(|a, b| (a.started_at_ms, &a.command_id).cmp(&(b.started_at_ms, &b.command_id)));
    send_in_parts(
        r,
        infos,
        info_size,
        Response::CommandsPart,
        Response::Commands,
    )
    .await;
}

/// An upper estimate of a command's encoded size.
fn info_size(i: &CommandInfo) -> usize {
    64 + i.command_id.len()
        + i.user.len()
        + i.cwd.len()
        + i.argv.iter().map(|a| a.len() + 5).sum::<usize>()
}

/// Forgets a finished command and deletes its kept output.
pub fn forget(agent: &Arc<Agent>, command_id: &str) -> Result<(), AgentError> {
    let command = agent.commands.get(command_id)?;
    if !command.exited() {
        return Err(AgentError::precondition(format!(
            "command {command_id:?} is still running"
        )));
    }
    if let Some(command) = agent.commands.remove(command_id) {
        command.log.lock().remove_spill_file();
        // Gone unless processes the command left behind still run in it.
        command.tree().remove_cgroup();
    }
    Ok(())
}
