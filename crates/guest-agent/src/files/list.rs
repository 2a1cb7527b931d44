//! `ListDir`: entries of a directory, `depth` levels deep.
//!
//! The listed directory itself may be reached through a symlink; below it, symlinks are listed
//! (as `Symlink`, with their target and their own `lstat` metadata, broken ones included) and never
//! descended into. Entries are in name order, each directory's contents right after it. A listing
//! holds at most [`MAX_ENTRIES`] entries (`TooLarge` beyond) and goes out in frames of bounded
//! size (`EntriesPart`..., `Entries`).

use std::fs;
use std::path::Path;
use std::sync::Arc;

use cove_guest_protocol::{ErrorCode, FileInfo, GuestPath, Response};

use super::info::file_info;
use super::path::{display, resolve};
use crate::agent::Agent;
use crate::error::AgentError;
use crate::server::{send_in_parts, Responder};
use crate::users::UserDb;

/// Most entries in one listing.
pub const MAX_ENTRIES: usize = 100_000;
/// Deepest listing.
pub const MAX_DEPTH: u32 = 64;

/// Lists a directory to `r`.
pub async fn list_dir(
    agent: &Arc<Agent>,
    path: GuestPath,
    user: Option<String>,
    depth: u32,
    r: &Responder,
) {
    let result = super::blocking(agent, move |a| list(a, &path, user.as_deref(), depth)).await;
    match result {
        Ok(entries) => {
            send_in_parts(
                r,
                entries,
                entry_size,
                Response::EntriesPart,
                Response::Entries,
            )
            .await
        }
        Err(e) => {
            r.send(e.into_response()).await;
        }
    }
}

fn entry_size(i: &FileInfo) -> usize {
    64 + i.name.0.len()
        + i.path.0.len()
        + i.owner.len()
        + i.group.len()
        + i.symlink_target.as_ref().map_or(0, |t| t.0.len())
}

/// The entries below `path`.
pub fn list(
    agent: &Agent,
    path: &GuestPath,
    user: Option<&str>,
    depth: u32,
) -> Result<Vec<FileInfo>, AgentError> {
    let db = agent.users.load();
    let user = db.resolve(user)?;
    let path = resolve(path, user.home_path())?;
    let meta = fs::metadata(&path).map_err(|e| AgentError::io("list", &path, &e))?;
    if !meta.is_dir() {
        return Err(AgentError::new(
            ErrorCode::WrongType,
            format!("{} is not a directory", display(&path)),
        ));
    }
    let mut out = Vec::new();
    walk(&path, depth.clamp(1, MAX_DEPTH), &db, &mut out, true)?;
    Ok(out)
}

fn walk(
    dir: &Path,
    depth: u32,
    db: &UserDb,
    out: &mut Vec<FileInfo>,
    top: bool,
) -> Result<(), AgentError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if top => return Err(AgentError::io("list", dir, &e)),
        // A subdirectory that vanished or cannot be read is listed without contents.
        Err(_) => return Ok(()),
    };
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    for name in names {
        let child = dir.join(&name);
        let Ok(meta) = fs::symlink_metadata(&child) else {
            continue;
        };
        if out.len() >= MAX_ENTRIES {
            return Err(AgentError::new(
                ErrorCode::TooLarge,
                format!("listing of more than {MAX_ENTRIES} entries; list with a smaller depth"),
            ));
        }
        out.push(file_info(&child, &meta, db));
        if meta.is_dir() && depth > 1 {
            walk(&child, depth - 1, db, out, false)?;
        }
    }
    Ok(())
}
