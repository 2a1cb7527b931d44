//! `MakeDir` (`mkdir -p`), and creating missing parents owned by a user. Both run with the
//! user's identity (the caller's, see [`super::identity`]): the user needs write permission where
//! a directory is created. Cove's paths and pseudo-filesystems are refused.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use cove_guest_protocol::{ErrorCode, FileInfo, GuestPath};

use super::info::lstat_info;
use super::path::display;
use super::{pseudo, Actor};
use crate::error::AgentError;
use crate::state::Agent;
use crate::users::User;

/// Mode of created directories.
const DIR_MODE: u32 = 0o755;

/// Creates a directory and its missing parents, each owned by the user.
pub fn make_dir(
    agent: &Agent,
    path: &GuestPath,
    user: Option<&str>,
) -> Result<FileInfo, AgentError> {
    let actor = Actor::of(agent, user)?;
    let path = actor.path(path)?;
    agent.reserved.check(&path, true)?;
    let _as_user = actor.assume()?;
    match fs::metadata(&path) {
        Ok(m) if !m.is_dir() => {
            return Err(AgentError::new(
                ErrorCode::AlreadyExists,
                format!("{} exists and is not a directory", display(&path)),
            ));
        }
        Ok(_) => {}
        Err(_) => pseudo::check_writable(&path)?,
    }
    create_dirs(&path, &actor.user)?;
    lstat_info(&path, &actor.db)
}

/// `mkdir -p`: creates every missing directory of `path`, owned by `user`, mode 0755. Runs with
/// the calling thread's identity.
pub fn create_dirs(path: &Path, user: &User) -> Result<(), AgentError> {
    let mut missing = Vec::new();
    let mut current = Some(path);
    while let Some(dir) = current {
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(AgentError::new(
                    ErrorCode::WrongType,
                    format!("{} is not a directory", display(dir)),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(dir),
            Err(e) => return Err(AgentError::io("stat", dir, &e)),
        }
        current = dir.parent();
    }
    for dir in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
            Ok(()) => {
                std::os::unix::fs::lchown(dir, Some(user.uid), Some(user.gid))
                    .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)))
                    .map_err(|e| AgentError::io("chown", dir, &e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(AgentError::io("mkdir", dir, &e)),
        }
    }
    Ok(())
}
