//! `ListDir`: entries of a directory, `depth` levels deep.
//!
//! The listed directory itself may be reached through a symlink; below it, symlinks are listed
//! (as `Symlink`, with their target and their own `lstat` metadata, broken ones included) and never
//! descended into. Entries are in name order, each directory's contents right after it. A listing
//! holds at most [`MAX_ENTRIES`] entries (`TooLarge` beyond) and goes out in frames of bounded
//! size (`EntriesPart`..., `Entries`). The listing runs as the user: a directory the user may not
//! read is `PermissionDenied` at the top and listed without contents below. Cove's own paths are
//! left out.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cove_guest_protocol::{ErrorCode, FileInfo, GuestPath, Response};

use super::info::file_info;
use super::path::display;
use super::reserved::Reserved;
use super::Actor;
use crate::error::AgentError;
use crate::responder::{send_in_parts, Responder};
use crate::state::Agent;
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
    let actor = Actor::of(agent, user)?;
    let path = actor.path(path)?;
    agent.reserved.check(&path, true)?;
    let _as_user = actor.assume()?;
    let meta = fs::metadata(&path).map_err(|e| AgentError::io("list", &path, &e))?;
    if !meta.is_dir() {
        return Err(AgentError::new(
            ErrorCode::WrongType,
            format!("{} is not a directory", display(&path)),
        ));
    }
    let mut out = Vec::new();
    let walk = Walk {
        top: &path,
        real_top: fs::canonicalize(&path).unwrap_or_else(|_| path.clone()),
        reserved: &agent.reserved,
        db: &actor.db,
    };
    walk.dir(&path, depth.clamp(1, MAX_DEPTH), &mut out, true)?;
    Ok(out)
}

/// One listing's fixed parts.
struct Walk<'a> {
    /// The listed directory as requested.
    top: &'a Path,
    /// Its canonical path (below it, symlinks are never followed).
    real_top: PathBuf,
    reserved: &'a Reserved,
    db: &'a UserDb,
}

impl Walk<'_> {
    /// Whether `path` (below the top) is one of Cove's own.
    fn hidden(&self, path: &Path) -> bool {
        match path.strip_prefix(self.top) {
            Ok(rest) => self.reserved.hides(&self.real_top.join(rest)),
            Err(_) => false,
        }
    }

    fn dir(
        &self,
        dir: &Path,
        depth: u32,
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
            if self.hidden(&child) {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(&child) else {
                continue;
            };
            if out.len() >= MAX_ENTRIES {
                return Err(AgentError::new(
                    ErrorCode::TooLarge,
                    format!(
                        "listing of more than {MAX_ENTRIES} entries; list with a smaller depth"
                    ),
                ));
            }
            out.push(file_info(&child, &meta, self.db));
            if meta.is_dir() && depth > 1 {
                self.dir(&child, depth - 1, out, false)?;
            }
        }
        Ok(())
    }
}
