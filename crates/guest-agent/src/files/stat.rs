//! `Stat`: `lstat` a path, as the user (who needs search permission on its directories).

use cove_guest_protocol::{FileInfo, GuestPath};

use super::info::lstat_info;
use super::Actor;
use crate::error::AgentError;
use crate::state::Agent;

/// Metadata of a path, without following a final symlink.
pub fn stat(agent: &Agent, path: &GuestPath, user: Option<&str>) -> Result<FileInfo, AgentError> {
    let actor = Actor::of(agent, user)?;
    let path = actor.path(path)?;
    agent.reserved.check(&path, false)?;
    let _as_user = actor.assume()?;
    lstat_info(&path, &actor.db)
}
