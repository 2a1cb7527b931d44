//! Cove's own paths (`/.cove`: the agent's binary, its socket and run dir), which the file API
//! never shows or touches.
//!
//! A request path is checked where the kernel would take it: its symlinks are resolved (the
//! final component only where the operation follows it), so a link to `/.cove` is refused as
//! `/.cove` is, while removing such a link is fine. Every check runs before anything is changed,
//! so a refused request has done nothing. A reserved path is `PermissionDenied`; listings and
//! watches leave it out.

use std::path::{Component, Path, PathBuf};

use cove_guest_protocol::ErrorCode;

use super::path::display;
use crate::error::AgentError;

/// The directory of Cove's own files inside every sandbox.
pub const COVE_DIR: &str = "/.cove";

/// The paths the file API keeps away from (each as given and canonical).
#[derive(Debug, Clone, Default)]
pub struct Reserved {
    roots: Vec<PathBuf>,
}

impl Reserved {
    /// Reserves `paths` and everything below them (`/.cove`, the run dir, the socket and the
    /// agent's binary, as the agent was started with them).
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Reserved {
        let mut roots = Vec::new();
        for p in paths {
            if let Ok(real) = std::fs::canonicalize(&p) {
                roots.push(real);
            }
            roots.push(p);
        }
        roots.sort();
        roots.dedup();
        Reserved { roots }
    }

    /// The reserved paths (each as given and canonical).
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Whether the canonical (or lexical) `path` is reserved or lies below a reserved path.
    pub fn hides(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
    }

    /// `PermissionDenied` when `path` is, or leads through a symlink to, a reserved path.
    /// `follow` says whether the operation follows a final symlink.
    pub fn check(&self, path: &Path, follow: bool) -> Result<(), AgentError> {
        if self.hides(path) || self.hides(&real_path(path, follow)) {
            return Err(refused(path));
        }
        Ok(())
    }

    /// [`Reserved::check`], and also refused when a reserved path lies below `path` (for
    /// operations that take a whole tree away: remove, rename).
    pub fn check_tree(&self, path: &Path) -> Result<(), AgentError> {
        self.check(path, false)?;
        let real = real_path(path, false);
        if self
            .roots
            .iter()
            .any(|r| r.starts_with(path) || r.starts_with(&real))
        {
            return Err(refused(path));
        }
        Ok(())
    }
}

fn refused(path: &Path) -> AgentError {
    AgentError::new(
        ErrorCode::PermissionDenied,
        format!(
            "{} is reserved for Cove's guest agent ({COVE_DIR} is not reachable through the file \
             API)",
            display(path)
        ),
    )
}

/// `path` with its symlinks resolved as far as it exists (the final component only when
/// `follow`); the missing rest is appended as it is.
pub fn real_path(path: &Path, follow: bool) -> PathBuf {
    let (base, last) = match (follow, path.parent(), path.file_name()) {
        (false, Some(parent), Some(name)) => (parent, Some(name)),
        _ => (path, None),
    };
    let mut existing = base;
    let mut rest = Vec::new();
    let real = loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            break real;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => break PathBuf::from("/"),
        }
    };
    let mut out = real;
    for name in rest.into_iter().rev() {
        out.push(name);
    }
    if let Some(name) = last {
        out.push(name);
    }
    // Lexical normalization of what was appended (the request path is already normalized).
    out.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_reserved_paths_and_links_to_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cove = dir.path().join("cove");
        std::fs::create_dir_all(cove.join("run")).expect("mkdir");
        std::os::unix::fs::symlink(&cove, dir.path().join("link")).expect("symlink");
        let reserved = Reserved::new([cove.clone()]);
        for p in [cove.clone(), cove.join("run/agent.sock"), cove.join("new")] {
            let e = reserved.check(&p, false).expect_err("reserved");
            assert_eq!(e.code, ErrorCode::PermissionDenied, "{p:?}");
        }
        let link = dir.path().join("link");
        assert!(reserved.check(&link.join("run"), false).is_err());
        assert!(reserved.check(&link, true).is_err(), "followed");
        assert!(reserved.check(&link, false).is_ok(), "the link itself");
        assert!(reserved.check_tree(&link).is_ok(), "removing the link");
        assert!(reserved.check_tree(dir.path()).is_err(), "a parent of it");
        assert!(reserved.check(&dir.path().join("cove2"), true).is_ok());
        assert!(reserved.hides(&cove.join("run")));
    }
}
