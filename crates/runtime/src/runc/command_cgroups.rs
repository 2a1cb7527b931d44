//! The sub-tree of a sandbox's cgroup where its guest agent puts each command into a cgroup of
//! its own (cgroup v1 only).
//!
//! runc makes the sandbox's cgroup `cove/<id>` (relative to this process's own cgroup, in every
//! hierarchy) and sets the limits there; the container sees that cgroup as its root through its
//! cgroup namespace, mounted read-only, so nothing inside can raise a limit. Before `runc run`
//! this driver makes `cove/<id>/`[`COMMAND_CGROUP_DIR`] in the `freezer` and `memory`
//! hierarchies, gives it to the sandbox's root, and hands it to the guest agent as an open
//! descriptor of a detached mount of that one directory ([`Delegated::open`], passed with
//! `runc run --preserve-fds`, named by [`COMMAND_CGROUP_FDS_ENV`]). It is never mounted
//! writable inside the sandbox: there it shows read-only through the sandbox's cgroup mount.
//! Root in the sandbox could otherwise make a cgroup there, move the agent (PID 1, same user)
//! into it and freeze it or give it a memory limit of a few pages; cgroup v1 checks only the
//! writer's user against the moved process's, so the only defence is that no process of the
//! sandbox can open a writable `cgroup.procs` at all. The agent is not dumpable and the sandbox
//! lacks `CAP_SYS_PTRACE`, so its descriptors cannot be reached through `/proc/1/fd` either.
//!
//! The agent makes one cgroup per command there: the freezer one to find and kill every
//! process a command started however it daemonised, the memory one to count that command's OOM
//! kills. Everything below stays inside the sandbox's cgroup, so its limits bound whatever the
//! agent makes there.
//!
//! On a cgroup v2 host nothing is delegated and the agent falls back to sessions.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cove_guest_protocol::COMMAND_CGROUP_DIR;

use super::layout::io_err;
use crate::RuntimeError;

/// Hierarchies delegated to the agent.
const CONTROLLERS: [&str; 2] = ["freezer", "memory"];

/// One delegated cgroup of a sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Delegated {
    /// Its host directory.
    pub(crate) dir: PathBuf,
    /// The hierarchy's name as the sandbox sees it (`freezer`, `memory`).
    pub(crate) hierarchy: String,
}

/// Every delegated cgroup of sandbox `id`, made if missing. Empty on a cgroup v2 host or where
/// a hierarchy is not mounted. Errors: the directory could not be made.
pub(crate) fn prepare(id: &str) -> Result<Vec<Delegated>, RuntimeError> {
    let own = super::cgroups::own_paths()?;
    let mut out = Vec::new();
    for controller in CONTROLLERS {
        let Some((_, own_dir, _)) = own.iter().find(|(c, _, _)| c == controller) else {
            continue;
        };
        let dir = own_dir.join("cove").join(id).join(COMMAND_CGROUP_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        out.push(Delegated {
            dir,
            hierarchy: controller.to_string(),
        });
    }
    Ok(out)
}

impl Delegated {
    /// A detached mount of this one directory (`open_tree(OPEN_TREE_CLONE)`), as an open
    /// descriptor (close-on-exec; the runc command passes it on): walking `..` from it stays
    /// inside, so whoever holds it reaches the delegated cgroup and nothing above it.
    pub(crate) fn open(&self) -> Result<OwnedFd, RuntimeError> {
        let path = CString::new(self.dir.as_os_str().as_bytes())
            .map_err(|_| RuntimeError::Unavailable("a cgroup path holds a NUL byte".into()))?;
        let flags = libc::OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
        // SAFETY: a NUL-terminated path that outlives the call, AT_FDCWD and plain flags; the
        // kernel returns a new descriptor or -1.
        let fd =
            unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
        if fd < 0 {
            return Err(RuntimeError::Io {
                context: format!("open_tree {}", self.dir.display()),
                source: std::io::Error::last_os_error(),
            });
        }
        let fd =
            i32::try_from(fd).map_err(|_| RuntimeError::Unavailable("fd out of range".into()))?;
        // SAFETY: the kernel just returned this descriptor and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
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
