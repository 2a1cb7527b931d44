//! The sub-tree of a sandbox's cgroup where its guest agent puts each command into a cgroup of
//! its own (cgroup v1 only).
//!
//! runc makes the sandbox's cgroup `cove/<id>` (relative to this process's own cgroup, in every
//! hierarchy) and sets the limits there; the container sees that cgroup as its root through its
//! cgroup namespace, mounted read-only, so nothing inside can raise a limit. Before `runc run`
//! this driver makes `cove/<id>/`[`COMMAND_CGROUP_DIR`] in the `freezer` and `memory`
//! hierarchies and binds each read-write over its place inside the read-only mount
//! (`/sys/fs/cgroup/<hierarchy>/cove-commands`). The agent makes one cgroup per command there:
//! the freezer one to find and kill every process a command started however it daemonised,
//! the memory one to count that command's OOM kills. Everything below stays inside the
//! sandbox's cgroup, so its limits bound whatever the sandbox writes there.
//!
//! On a cgroup v2 host nothing is delegated and the agent falls back to sessions.

use std::path::{Path, PathBuf};

use cove_guest_protocol::COMMAND_CGROUP_DIR;

use super::layout::io_err;
use crate::RuntimeError;

/// Hierarchies delegated to the agent.
const CONTROLLERS: [&str; 2] = ["freezer", "memory"];

/// `(host directory, path inside the sandbox)` of every delegated cgroup of sandbox `id`, made
/// if missing. Empty on a cgroup v2 host or where a hierarchy is not mounted. Errors: the
/// directory could not be made.
pub(crate) fn prepare(id: &str) -> Result<Vec<(PathBuf, String)>, RuntimeError> {
    let own = super::cgroups::own_paths()?;
    let mut out = Vec::new();
    for controller in CONTROLLERS {
        let Some((_, own_dir, mount_point)) = own.iter().find(|(c, _, _)| c == controller) else {
            continue;
        };
        let host = own_dir.join("cove").join(id).join(COMMAND_CGROUP_DIR);
        std::fs::create_dir_all(&host).map_err(io_err(format!("create {}", host.display())))?;
        let hierarchy = mount_point
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| controller.to_string());
        out.push((
            host,
            format!("/sys/fs/cgroup/{hierarchy}/{COMMAND_CGROUP_DIR}"),
        ));
    }
    Ok(out)
}

/// Gives the delegated cgroup `dir` (from [`prepare`]) and its control files to host id `root`
/// (uid and gid), the root of a sandbox in a user namespace, so its agent can make cgroups there
/// and move its commands into them. Errors: a chown failed.
pub(crate) fn give_to(dir: &Path, root: u32) -> Result<(), RuntimeError> {
    let chown = |p: &Path| {
        std::os::unix::fs::lchown(p, Some(root), Some(root))
            .map_err(io_err(format!("chown {}", p.display())))
    };
    chown(dir)?;
    for entry in std::fs::read_dir(dir).map_err(io_err(format!("list {}", dir.display())))? {
        let entry = entry.map_err(io_err(format!("list {}", dir.display())))?;
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            chown(&entry.path())?;
        }
    }
    Ok(())
}

/// Removes the delegated cgroups of sandbox `id` and everything the agent made below them, and
/// the sandbox's cgroup itself when it is then empty (runc removes it on delete; this covers a
/// start that failed before runc made it). Best effort: a cgroup that still has processes stays.
pub(crate) fn remove(id: &str) {
    let Ok(own) = super::cgroups::own_paths() else {
        return;
    };
    for controller in CONTROLLERS {
        if let Some((_, own_dir, _)) = own.iter().find(|(c, _, _)| c == controller) {
            let sandbox = own_dir.join("cove").join(id);
            remove_tree(&sandbox.join(COMMAND_CGROUP_DIR));
            let _ = std::fs::remove_dir(&sandbox);
        }
    }
}

/// `rmdir` of a cgroup after its child cgroups (cgroup directories hold only control files,
/// which `rmdir` does not need removed).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
