//! `StdinWrite` / `StdinClose`: the host feeding a command's stdin pipe.
//!
//! Errors are the host's to handle, never internal: no stdin, a closed stdin, or a process that no
//! longer reads it (`EPIPE`) are all `FailedPrecondition`. A write waits while the pipe is full;
//! writes are applied in order; a close does not wait for a blocked write: it aborts it and the
//! process reads EOF at once.

use std::sync::{Arc, Mutex};

use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::{lock, Command};
use crate::agent::Agent;
use crate::error::AgentError;

struct Open {
    pipe: pipe::Sender,
    closed: CancellationToken,
}

/// A command's stdin as the agent holds it.
pub struct Stdin {
    open: Mutex<Option<Arc<Open>>>,
    writes: tokio::sync::Mutex<()>,
    piped: bool,
}

impl Stdin {
    /// Stdin of a command: a pipe, or none (`/dev/null`).
    pub fn new(pipe: Option<pipe::Sender>) -> Self {
        let piped = pipe.is_some();
        let open = pipe.map(|pipe| {
            Arc::new(Open {
                pipe,
                closed: CancellationToken::new(),
            })
        });
        Self {
            open: Mutex::new(open),
            writes: tokio::sync::Mutex::new(()),
            piped,
        }
    }

    /// The pipe is still open.
    pub fn is_open(&self) -> bool {
        lock(&self.open).is_some()
    }

    /// Closes the pipe (aborting a blocked write); `false` if it was not open.
    pub fn close(&self) -> bool {
        match lock(&self.open).take() {
            Some(open) => {
                open.closed.cancel();
                true
            }
            None => false,
        }
    }
}

fn check(command: &Command) -> Result<(), AgentError> {
    if !command.stdin.piped {
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

async fn write_all(pipe: &pipe::Sender, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        pipe.writable().await?;
        match pipe.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `data` to the command's stdin.
pub async fn stdin_write(
    agent: &Arc<Agent>,
    command_id: &str,
    data: &[u8],
) -> Result<(), AgentError> {
    let command = agent.commands.get(command_id)?;
    check(&command)?;
    let _order = command.stdin.writes.lock().await;
    let Some(open) = lock(&command.stdin.open).clone() else {
        return Err(closed(&command));
    };
    let result = tokio::select! {
        r = write_all(&open.pipe, data) => r,
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
    if command.stdin.close() {
        Ok(())
    } else {
        Err(closed(&command))
    }
}
