//! `MakeDir` (`mkdir -p`), and creating missing parents owned by a user.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use cove_guest_protocol::{ErrorCode, FileInfo, GuestPath};

use super::info::lstat_info;
use super::path::{display, resolve};
use crate::agent::Agent;
use crate::error::AgentError;
use crate::users::User;

/// Mode of created directories.
const DIR_MODE: u32 = 0o755;

/// Creates a directory and its missing parents, each owned by the user.
pub fn make_dir(
    agent: &Agent,
    path: &GuestPath,
    user: Option<&str>,
) -> Result<FileInfo, AgentError> {
    let db = agent.users.load();
    let user = db.resolve(user)?;
    let path = resolve(path, user.home_path())?;
    if let Ok(m) = fs::metadata(&path) {
        if !m.is_dir() {
            return Err(AgentError::new(
                ErrorCode::AlreadyExists,
                format!("{} exists and is not a directory", display(&path)),
            ));
        }
    }
    create_dirs(&path, &user)?;
    lstat_info(&path, &db)
}

/// `mkdir -p`: creates every missing directory of `path`, owned by `user`, mode 0755.
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
