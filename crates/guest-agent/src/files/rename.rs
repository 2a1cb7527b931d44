//! `Rename`: move a path (within one filesystem; across filesystems is `FailedPrecondition`).

use cove_guest_protocol::{FileInfo, GuestPath};

use super::info::lstat_info;
use super::path::{display, resolve};
use crate::agent::Agent;
use crate::error::AgentError;

/// Renames `from` to `to` and describes the destination.
pub fn rename(
    agent: &Agent,
    from: &GuestPath,
    to: &GuestPath,
    user: Option<&str>,
) -> Result<FileInfo, AgentError> {
    let db = agent.users.load();
    let user = db.resolve(user)?;
    let from = resolve(from, user.home_path())?;
    let to = resolve(to, user.home_path())?;
    if from.parent().is_none() || to.parent().is_none() {
        return Err(AgentError::invalid("cannot rename /"));
    }
    std::fs::rename(&from, &to).map_err(|e| {
        let mut err = AgentError::io("rename", &from, &e);
        err.message = format!(
            "rename {} to {}: {}",
            display(&from),
            display(&to),
            crate::error::describe(&e)
        );
        err
    })?;
    lstat_info(&to, &db)
}
