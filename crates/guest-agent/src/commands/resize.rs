//! `Resize`: a new size for a command's terminal.

use std::sync::Arc;

use cove_guest_protocol::PtySize;

use crate::error::AgentError;
use crate::state::Agent;

/// Resizes the terminal of `command_id` (its foreground process group gets `SIGWINCH`).
pub fn resize(agent: &Arc<Agent>, command_id: &str, size: PtySize) -> Result<(), AgentError> {
    if size.cols == 0 || size.rows == 0 {
        return Err(AgentError::invalid(format!(
            "terminal size {}x{} must be at least 1x1",
            size.cols, size.rows
        )));
    }
    let command = agent.commands.get(command_id)?;
    let Some(pty) = &command.pty else {
        return Err(AgentError::precondition(format!(
            "command {command_id:?} does not run on a terminal"
        )));
    };
    if command.exited() {
        return Err(AgentError::precondition(format!(
            "command {command_id:?} has exited"
        )));
    }
    pty.resize(size)
        .map_err(|e| AgentError::io_plain("resizing the terminal", &e))
}
