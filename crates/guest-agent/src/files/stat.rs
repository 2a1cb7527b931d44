//! `Stat`: `lstat` a path.

use cove_guest_protocol::{FileInfo, GuestPath};

use super::info::lstat_info;
use super::path::resolve;
use crate::agent::Agent;
use crate::error::AgentError;

/// Metadata of a path, without following a final symlink.
pub fn stat(agent: &Agent, path: &GuestPath, user: Option<&str>) -> Result<FileInfo, AgentError> {
    let db = agent.users.load();
    let user = db.resolve(user)?;
    let path = resolve(path, user.home_path())?;
    lstat_info(&path, &db)
}
