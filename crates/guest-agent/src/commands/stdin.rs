//! `StdinWrite` / `StdinClose`: the host feeding a command's stdin pipe.
//!
//! Errors are the host's to handle, never internal: no stdin, a closed stdin, or a process that no
//! longer reads it (`EPIPE`) are all `FailedPrecondition`. A write waits while the pipe is full;
//! writes are applied in order; a close does not wait for a blocked write: it aborts it and the
//! process reads EOF at once. On a terminal, stdin is the terminal's input: writes are typed
//! keys, and closing sends the end-of-input character (Ctrl-D) instead of closing anything.

use std::sync::{Arc, Mutex};

use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::{lock, Command};
use crate::agent::Agent;
use crate::error::AgentError;

/// Where a command's input goes.
pub enum StdinWriter {
    /// The write end of its stdin pipe.
    Pipe(pipe::Sender),
    /// The master side of its terminal.
    Pty(Arc<crate::pty::PtyMaster>),
}

struct Open {
    writer: StdinWriter,
    closed: CancellationToken,
}

/// A command's stdin as the agent holds it.
pub struct Stdin {
    open: Mutex<Option<Arc<Open>>>,
    writes: tokio::sync::Mutex<()>,
    piped: bool,
}

impl Stdin {
    /// Stdin of a command: a pipe or a terminal, or none (`/dev/null`).
    pub fn new(writer: Option<StdinWriter>) -> Self {
        let piped = writer.is_some();
        let open = writer.map(|writer| {
            Arc::new(Open {
                writer,
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

    /// Closes the pipe (aborting a blocked write); `false` if it was not open. A terminal is
    /// not closed (that would hang it up): the caller sends Ctrl-D instead.
    pub fn close(&self) -> bool {
        match lock(&self.open).take() {
            Some(open) => {
                open.closed.cancel();
                true
            }
            None => false,
        }
    }

    /// The terminal, when stdin is one and still open.
    fn pty(&self) -> Option<Arc<crate::pty::PtyMaster>> {
        match lock(&self.open).as_ref().map(|o| &o.writer) {
            Some(StdinWriter::Pty(p)) => Some(p.clone()),
            _ => None,
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

async fn write_all(writer: &StdinWriter, data: &[u8]) -> std::io::Result<()> {
    match writer {
        StdinWriter::Pipe(pipe) => write_pipe(pipe, data).await,
        StdinWriter::Pty(pty) => pty.write_all(data).await,
    }
}

async fn write_pipe(pipe: &pipe::Sender, mut data: &[u8]) -> std::io::Result<()> {
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
