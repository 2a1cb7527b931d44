//! `Rename`: move a path (within one filesystem; across filesystems is `FailedPrecondition`), as
//! the user. Cove's paths, their parents and pseudo-filesystems are refused on either side.

use cove_guest_protocol::{FileInfo, GuestPath};

use super::info::lstat_info;
use super::path::display;
use super::{pseudo, Actor};
use crate::error::AgentError;
use crate::state::Agent;

/// Renames `from` to `to` and describes the destination.
pub fn rename(
    agent: &Agent,
    from: &GuestPath,
    to: &GuestPath,
    user: Option<&str>,
) -> Result<FileInfo, AgentError> {
    let actor = Actor::of(agent, user)?;
    let from = actor.path(from)?;
    let to = actor.path(to)?;
    if from.parent().is_none() || to.parent().is_none() {
        return Err(AgentError::invalid("cannot rename /"));
    }
    agent.reserved.check_tree(&from)?;
    agent.reserved.check_tree(&to)?;
    pseudo::check_writable(&to)?;
    let _as_user = actor.assume()?;
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
    lstat_info(&to, &actor.db)
}
