//! Idmapped mounts (`mount_setattr(2)` with `MOUNT_ATTR_IDMAP`): the release's root filesystem,
//! owned by host ids `0..`, shown to a sandbox in a user namespace as owned by its own root,
//! without copying a file.
//!
//! The kernel takes the mapping from a user namespace file descriptor, so [`userns_fd`] makes a
//! short-lived process in a new user namespace with the sandbox's mapping, opens its
//! `/proc/<pid>/ns/user` and kills it; [`mount_idmapped`] then clones the tree
//! (`open_tree(OPEN_TREE_CLONE)`), sets the mapping (and read-only) on the clone, and attaches it
//! at a path (`move_mount`). Blocking calls; callers run them on `spawn_blocking`.
#![allow(unsafe_code)]

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use super::userns::{IdRange, RANGE_SIZE};

/// `MOUNT_ATTR_RDONLY` of `<linux/mount.h>`.
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// `MOUNT_ATTR_IDMAP` of `<linux/mount.h>`.
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
/// Stack of the short-lived user-namespace process, bytes (it only calls `pause`).
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// `struct mount_attr` of `<linux/mount.h>` (`MOUNT_ATTR_SIZE_VER0`, 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Applies `attr` to the detached mount `tree` (from `open_tree`). `userns` stays open meanwhile
/// (the caller holds it).
fn set_attr(tree: &OwnedFd, attr: &MountAttr) -> std::io::Result<()> {
    // SAFETY: mount_setattr reads `size_of::<MountAttr>()` bytes from `attr`, a valid reference
    // laid out as the kernel's `struct mount_attr`; the path is a NUL-terminated empty string
    // and the descriptor stays open for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `MOUNT_ATTR_NOSUID` of `<linux/mount.h>`.
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
/// `MOUNT_ATTR_NODEV` of `<linux/mount.h>`.
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;

/// Gives the detached mount `tree` (from `open_tree`) what a sandbox's volume bind has:
/// `nosuid`, `nodev`, read-only when `read_only`, idmapped through `userns` when given.
pub(crate) fn set_bind_attrs(
    tree: &OwnedFd,
    userns: Option<&OwnedFd>,
    read_only: bool,
) -> std::io::Result<()> {
    let mut attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        attr_set |= MOUNT_ATTR_RDONLY;
    }
    if userns.is_some() {
        attr_set |= MOUNT_ATTR_IDMAP;
    }
    set_attr(
        tree,
        &MountAttr {
            attr_set,
            attr_clr: 0,
            propagation: 0,
            userns_fd: userns.map_or(0, |u| u.as_raw_fd() as u64),
        },
    )
}

/// Makes the detached mount `tree` (from `open_tree`) read-only.
pub(crate) fn make_read_only(tree: &OwnedFd) -> std::io::Result<()> {
    set_attr(
        tree,
        &MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        },
    )
}

/// A file descriptor of a new user namespace mapping ids `0..65536` to `range` (uids and gids
/// alike). Errors: the process could not be made, its maps not written or its namespace not
/// opened (a kernel without user namespaces, or limits such as `user.max_user_namespaces`).
pub(crate) fn userns_fd(range: IdRange) -> std::io::Result<OwnedFd> {
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    let parent = std::process::id();
    // SAFETY: the child runs on its own copy of the address space (no CLONE_VM) and only makes
    // async-signal-safe system calls (prctl, getppid, pause) until it is killed below.
    let pid = unsafe {
        nix::sched::clone(
            Box::new(move || {
                // A server killed (SIGKILL) between this clone and the kill below must not leave
                // the child paused forever: the kernel kills it with its parent thread, which
                // is the thread that kills it below anyway.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return 0;
                }
                loop {
                    nix::unistd::pause();
                }
            }),
            &mut stack,
            CloneFlags::CLONE_NEWUSER,
            Some(libc::SIGCHLD),
        )
    }
    .map_err(std::io::Error::from)?;
    let opened = (|| {
        let map = format!("0 {} {RANGE_SIZE}\n", range.host());
        for file in ["uid_map", "gid_map"] {
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/{pid}/{file}"))?
                .write_all(map.as_bytes())?;
        }
        std::fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from)
    })();
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(pid, None);
    opened
}

/// Attaches a clone of the tree at `source` (read-only when `read_only`), idmapped through
/// `userns`, at `target` (an existing directory). Errors: the kernel or the filesystem of `source` cannot idmap
/// (`EINVAL`, `EPERM`, `ENOSYS`), or a path is wrong.
pub(crate) fn mount_idmapped(
    source: &Path,
    userns: &OwnedFd,
    target: &Path,
    read_only: bool,
) -> std::io::Result<()> {
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    set_attr(&tree, &attr)?;
    rustix::mount::move_mount(
        &tree,
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    Ok(())
}
