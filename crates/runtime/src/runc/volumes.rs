//! Persistent volumes bound into a sandbox ([`crate::SandboxSpec::volumes`]).
//!
//! The node agent mounts each volume's filesystem once on the node; this driver binds it at
//! the sandbox's path. Without user namespaces the bind's source is that mount itself. With
//! them, the volume's files are kept with container ids (`user` is 1000 on the volume, whoever
//! wrote it) and each sandbox sees them through an idmapped clone of the volume's mount into
//! its own range, attached at `volumes/<n>` in the sandbox directory (read-only there for a
//! read-only mount); that clone is the bind's source. Once `runc create` made the container's
//! binds (which keep the clone's mapping), the clones are unmounted again: a sandbox directory
//! never holds a writable volume mount that a removal of the directory could descend into.
//! `stop` (and so the undo of a failed start) unmounts any that are left.
//!
//! Blocking calls; callers run them on `spawn_blocking` or in blocking preparation.

use std::path::{Path, PathBuf};

use super::layout::{io_err, Layout};
use super::mounts;
use super::userns::IdRange;
use crate::{RuntimeError, SandboxSpec};

/// Where volume `n` of the sandbox is attached idmapped, with user namespaces.
pub(crate) fn clone_path(layout: &Layout, n: usize) -> PathBuf {
    layout.volumes.join(n.to_string())
}

/// The host source of each volume's bind, in order: the idmapped clone with an id range, else
/// the volume's own mount.
pub(crate) fn sources(spec: &SandboxSpec, layout: &Layout, idmapped: bool) -> Vec<PathBuf> {
    spec.volumes
        .iter()
        .enumerate()
        .map(|(n, v)| {
            if idmapped {
                clone_path(layout, n)
            } else {
                v.source.clone()
            }
        })
        .collect()
}

/// With an id range: attaches an idmapped clone of every volume's mount at [`clone_path`]
/// (after removing stale ones). Errors: a volume's mount is missing, or the kernel cannot
/// idmap it.
pub(crate) fn prepare(
    spec: &SandboxSpec,
    layout: &Layout,
    range: Option<IdRange>,
) -> Result<(), RuntimeError> {
    unmount_all(layout)?;
    let Some(range) = range else {
        return Ok(());
    };
    if spec.volumes.is_empty() {
        return Ok(());
    }
    let ns = super::idmap::userns_fd(range)
        .map_err(io_err("make a user namespace for the sandbox's volumes"))?;
    for (n, v) in spec.volumes.iter().enumerate() {
        if !mounts::is_mounted(&v.source)? {
            return Err(RuntimeError::Io {
                context: format!("volume {} is not mounted", v.source.display()),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        let target = clone_path(layout, n);
        std::fs::create_dir_all(&target).map_err(io_err(format!("create {}", target.display())))?;
        super::idmap::mount_idmapped(&v.source, &ns, &target, v.read_only).map_err(io_err(
            format!(
                "mount volume {} idmapped on {}",
                v.source.display(),
                target.display()
            ),
        ))?;
    }
    Ok(())
}

/// Unmounts every idmapped clone of the sandbox's volumes and removes their mount points.
/// Never removes anything that is still a mount.
pub(crate) fn unmount_all(layout: &Layout) -> Result<(), RuntimeError> {
    let entries = match std::fs::read_dir(&layout.volumes) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("read {}", layout.volumes.display()))(e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        mounts::unmount(&path)?;
        remove_empty(&path)?;
    }
    remove_empty(&layout.volumes)
}

/// Removes an empty directory (`remove_dir` never recurses into a mount); none is fine.
fn remove_empty(dir: &Path) -> Result<(), RuntimeError> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(format!("remove mount point {}", dir.display()))(e)),
    }
}
