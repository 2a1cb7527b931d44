//! A boot id of the sandbox's own. In a container `/proc/sys/kernel/random/boot_id` is the
//! host kernel's, the same in every sandbox and across every restart, so a sandbox that starts
//! afresh (a create, a wake of its files, a restart by repair) could not tell it rebooted. Each
//! start therefore gets a fresh random id, written by the host beside the sandbox's files
//! (`<dir>/boot_id`, outside the sandbox's tree) and bound read-only over the sandbox's file
//! (a read-only mount, so no root inside, mapped or not, can write the host's file).
//!
//! runc refuses bind mounts inside `/proc` except a few files lxcfs serves, so the node mounts
//! it into the running container itself: a detached clone of the host file (`open_tree`) is
//! moved (`move_mount`) onto the path from a thread that has joined the container's mount
//! namespace (`setns`, after `unshare(CLONE_FS)`, which `setns` of a mount namespace needs in a
//! multi-threaded process). The path is resolved in that namespace, whose `/proc` is a procfs
//! no process in the sandbox can replace (no `CAP_SYS_ADMIN` there); the host file is opened
//! without following links.
//!
//! Blocking; callers run it on `spawn_blocking`.
// `unshare` and `setns` are plain libc calls (no safe wrapper in the crates used).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::mount::{MoveMountFlags, OpenTreeFlags};

/// Where the sandbox sees its boot id.
const IN_SANDBOX: &str = "/proc/sys/kernel/random/boot_id";

/// The host file of sandbox dir `dir`.
pub(crate) fn host_file(dir: &Path) -> PathBuf {
    dir.join("boot_id")
}

/// A random id in the kernel's format (a version 4 UUID, lowercase, with a newline).
fn fresh() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}\n",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Writes a fresh boot id for sandbox dir `dir` and binds it over the boot id of the container
/// whose init is host pid `init_pid`. Returns the id (without its newline).
///
/// # Errors
/// The file cannot be written, the init's mount namespace cannot be joined (it exited), or the
/// mount fails.
pub(crate) fn mount(dir: &Path, init_pid: u32) -> io::Result<String> {
    let id = fresh();
    let path = host_file(dir);
    super::layout::write_file(&path, id.as_bytes()).map_err(|e| io::Error::other(e.to_string()))?;
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        &path,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )?;
    super::idmap::make_read_only(&tree)?;
    let ns: OwnedFd = std::fs::File::open(format!("/proc/{init_pid}/ns/mnt"))?.into();
    std::thread::scope(|s| {
        s.spawn(|| -> io::Result<()> {
            // SAFETY: plain system calls on this thread only; `ns` outlives them.
            unsafe {
                if libc::unshare(libc::CLONE_FS) != 0
                    || libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            rustix::mount::move_mount(
                tree.as_fd(),
                "",
                rustix::fs::CWD,
                IN_SANDBOX,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )?;
            Ok(())
        })
        .join()
        .map_err(|_| io::Error::other("the boot id thread panicked"))?
    })?;
    Ok(id.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_look_like_the_kernels_and_differ() {
        let a = fresh();
        let b = fresh();
        assert_ne!(a, b);
        assert_eq!(a.len(), 37);
        assert!(a.ends_with('\n'));
        let parts: Vec<&str> = a.trim_end().split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "version 4: {a}");
        assert!(a
            .trim_end()
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
