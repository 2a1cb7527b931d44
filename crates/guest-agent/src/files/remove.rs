//! `Remove`: a file or symlink is unlinked (never its target); a directory is removed with its
//! contents, without following symlinks inside it.

use std::fs;

use cove_guest_protocol::GuestPath;

use super::path::resolve;
use crate::agent::Agent;
use crate::error::AgentError;

/// Removes a path.
pub fn remove(agent: &Agent, path: &GuestPath, user: Option<&str>) -> Result<(), AgentError> {
    let db = agent.users.load();
    let user = db.resolve(user)?;
    let path = resolve(path, user.home_path())?;
    if path.parent().is_none() {
        return Err(AgentError::invalid("refusing to remove /"));
    }
    let meta = fs::symlink_metadata(&path).map_err(|e| AgentError::io("remove", &path, &e))?;
    let result = if meta.is_dir() {
        fs::remove_dir_all(&path)
    } else {
        fs::remove_file(&path)
    };
    result.map_err(|e| AgentError::io("remove", &path, &e))
}
