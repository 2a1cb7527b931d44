//! A command's stdin as the agent holds it: the pipe or terminal the host feeds
//! ([`super::write_stdin`] serves `StdinWrite` / `StdinClose`).
//!
//! Errors are the host's to handle, never internal: no stdin, a closed stdin, or a process that no
//! longer reads it (`EPIPE`) are all `FailedPrecondition`. A write waits while the pipe is full;
//! writes are applied in order; a close does not wait for a blocked write: it aborts it and the
//! process reads EOF at once. On a terminal, stdin is the terminal's input: writes are typed
//! keys, and closing sends the end-of-input character (Ctrl-D) instead of closing anything.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::Command;
use crate::error::AgentError;

/// Where a command's input goes.
pub enum StdinWriter {
    /// The write end of its stdin pipe.
    Pipe(pipe::Sender),
    /// The master side of its terminal.
    Pty(Arc<crate::pty::PtyMaster>),
}

pub(super) struct Open {
    pub(super) writer: StdinWriter,
    pub(super) closed: CancellationToken,
}

/// A command's stdin as the agent holds it.
pub struct Stdin {
    pub(super) open: Mutex<Option<Arc<Open>>>,
    pub(super) writes: tokio::sync::Mutex<()>,
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
        self.open.lock().is_some()
    }

    /// Closes the pipe (aborting a blocked write); `false` if it was not open. A terminal is
    /// not closed (that would hang it up): the caller sends Ctrl-D instead.
    pub fn close(&self) -> bool {
        match self.open.lock().take() {
            Some(open) => {
                open.closed.cancel();
                true
            }
            None => false,
        }
    }

    /// The terminal, when stdin is one and still open.
    pub(super) fn pty(&self) -> Option<Arc<crate::pty::PtyMaster>> {
        match self.open.lock().as_ref().map(|o| &o.writer) {
            Some(StdinWriter::Pty(p)) => Some(p.clone()),
            _ => None,
        }
    }
}

pub(super) fn check(command: &Command) -> Result<(), AgentError> {
    if !command.stdin.piped {
        return Err(AgentError::precondition(format!(
            "command {:?} was started without stdin",
            command.id
        )));
    }
    Ok(())
}

pub(super) fn closed(command: &Command) -> AgentError {
    AgentError::precondition(format!("stdin of command {:?} is closed", command.id))
}

pub(super) async fn write_all(writer: &StdinWriter, data: &[u8]) -> std::io::Result<()> {
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
