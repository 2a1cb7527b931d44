//! `StdinWrite` / `StdinClose`: the host feeding a command's stdin ([`super::stdin::Stdin`]).

use std::sync::Arc;

use super::stdin::{check, closed, write_all};
use crate::error::AgentError;
use crate::state::Agent;

/// Writes all of `data` to the command's stdin.
pub async fn stdin_write(
    agent: &Arc<Agent>,
    command_id: &str,
    data: &[u8],
) -> Result<(), AgentError> {
    let command = agent.commands.get(command_id)?;
    check(&command)?;
    let _order = command.stdin.writes.lock().await;
    let Some(open) = command.stdin.open.lock().clone() else {
        return Err(closed(&command));
    };
    let result = tokio::select! {
        r = write_all(&open.writer, data) => r,
        _ = open.closed.cancelled() => return Err(closed(&command)),
    };
    result.map_err(|e| {
        command.stdin.close();
        AgentError::precondition(format!(
            "the process of command {command_id:?} no longer reads stdin ({})",
            crate::error::describe(&e)
        ))
    })
}

/// Closes the command's stdin; the process reads EOF.
pub async fn stdin_close(agent: &Arc<Agent>, command_id: &str) -> Result<(), AgentError> {
    let command = agent.commands.get(command_id)?;
    check(&command)?;
    if let Some(pty) = command.stdin.pty() {
        let _order = command.stdin.writes.lock().await;
        let sent = pty.write_all(&[crate::pty::EOF_CHAR]).await;
        command.stdin.close();
        return sent.map_err(|e| AgentError::io_plain("sending end of input", &e));
    }
    if command.stdin.close() {
        Ok(())
    } else {
        Err(closed(&command))
    }
}
