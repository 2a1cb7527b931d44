//! `Remove`: a file or symlink is unlinked (never its target); a directory is removed with its
//! contents, without following symlinks inside it. It runs as the user, so the kernel decides
//! what the user may remove; a directory the user cannot empty completely keeps what the user
//! could not remove. `/`, Cove's paths and their parents are refused before anything is removed.

use std::fs;

use cove_guest_protocol::GuestPath;

use super::Actor;
use crate::error::AgentError;
use crate::state::Agent;

/// Removes a path.
pub fn remove(agent: &Agent, path: &GuestPath, user: Option<&str>) -> Result<(), AgentError> {
    let actor = Actor::of(agent, user)?;
    let path = actor.path(path)?;
    if path.parent().is_none() {
        return Err(AgentError::invalid("refusing to remove /"));
    }
    agent.reserved.check_tree(&path)?;
    let _as_user = actor.assume()?;
    let meta = fs::symlink_metadata(&path).map_err(|e| AgentError::io("remove", &path, &e))?;
    let result = if meta.is_dir() {
        fs::remove_dir_all(&path)
    } else {
        fs::remove_file(&path)
    };
    result.map_err(|e| AgentError::io("remove", &path, &e))
}
