//! `StdinWrite` / `StdinClose`: the host feeding a command's stdin pipe.
//!
//! Errors are the host's to handle, never internal: no stdin, a closed stdin, or a process that no
//! longer reads it (`EPIPE`) are all `FailedPrecondition`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::Command;
use crate::agent::Agent;
use crate::error::AgentError;

fn check(command: &Command) -> Result<(), AgentError> {
    if !command.has_stdin {
        return Err(AgentError::precondition(format!(
            "command {:?} was started without stdin",
            command.id
        )));
    }
    Ok(())
}

fn closed(command: &Command) -> AgentError {
    AgentError::precondition(format!("stdin of command {:?} is closed", command.id))
}

/// Writes all of `data` to the command's stdin (waits while the pipe is full).
pub async fn stdin_write(
    agent: &Arc<Agent>,
    command_id: &str,
    data: &[u8],
) -> Result<(), AgentError> {
    let command = agent.commands.get(command_id)?;
    check(&command)?;
    let mut guard = command.stdin.lock().await;
    let Some(pipe) = guard.as_mut() else {
        return Err(closed(&command));
    };
    match pipe.write_all(data).await {
        Ok(()) => Ok(()),
        Err(e) => {
            *guard = None;
            command.stdin_open.store(false, Ordering::SeqCst);
            Err(AgentError::precondition(format!(
                "the process of command {command_id:?} no longer reads stdin ({})",
                crate::error::describe(&e)
            )))
        }
    }
}

/// Closes the command's stdin; the process reads EOF.
pub async fn stdin_close(agent: &Arc<Agent>, command_id: &str) -> Result<(), AgentError> {
    let command = agent.commands.get(command_id)?;
    check(&command)?;
    let mut guard = command.stdin.lock().await;
    if guard.take().is_none() {
        return Err(closed(&command));
    }
    command.stdin_open.store(false, Ordering::SeqCst);
    Ok(())
}
