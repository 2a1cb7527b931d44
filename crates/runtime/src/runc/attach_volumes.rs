//! Volumes attached to a running container ([`crate::Runtime::attach_volumes`]): a warm pool
//! member claimed by a create that mounts volumes gets them without a restart.
//!
//! Each volume's mount on the node is cloned detached (`open_tree(OPEN_TREE_CLONE)`), given the
//! attributes a cold start's bind has (`mount_setattr`: `nosuid`, `nodev`, read-only for a
//! read-only mount, and idmapped into the sandbox's range with user namespaces, as `volumes.rs`
//! does), then moved onto its path from a thread that joined the container's mount namespace
//! (`setns`, as `boot_id.rs` does), so the mount exists in the container only.
//!
//! The container's tree is hostile: its root may have planted a link, a file or a FIFO at the
//! path or at any directory on the way. The path is resolved from the container's root one
//! component at a time through `cove-confine` (`openat2` with `RESOLVE_IN_ROOT |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, `O_NOFOLLOW | O_DIRECTORY`): a link anywhere
//! is refused, not followed; a component that is not a directory is refused; a missing
//! directory is made (`mkdirat`, then owned by the sandbox's root as runc makes mount points)
//! and opened the same way, so a link raced into its place is refused too. The mount is moved
//! onto the opened directory itself (`MOVE_MOUNT_T_EMPTY_PATH`), never onto a path resolved
//! again.
//!
//! Blocking; callers run it on `spawn_blocking`.
// `unshare` and `setns` are plain libc calls (no safe wrapper in the crates used).
#![allow(unsafe_code)]
// The sandbox's tree is reached only through `cove-confine` (docs/security.md).
#![deny(clippy::disallowed_methods)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path};

use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use super::userns::IdRange;
use crate::VolumeBind;

/// Most path components of a volume's target (the control plane allows far fewer bytes).
const MAX_DEPTH: usize = 64;

/// Attaches `volumes` to the running container whose init is host pid `init_pid`, with the
/// sandbox's id range `range` (user namespaces) or none. Volumes attached before a failure
/// stay (the caller deletes a sandbox it cannot give all its volumes).
///
/// # Errors
/// A volume's mount cannot be cloned or idmapped, the init's namespace cannot be joined (it
/// exited), or a target is refused: `InvalidInput` for a link or a non-directory on its way.
pub(crate) fn attach(
    init_pid: u32,
    volumes: &[VolumeBind],
    range: Option<IdRange>,
) -> io::Result<()> {
    let userns = range.map(super::idmap::userns_fd).transpose()?;
    let mut trees = Vec::with_capacity(volumes.len());
    for v in volumes {
        let tree = rustix::mount::open_tree(
            rustix::fs::CWD,
            &v.source,
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        super::idmap::set_bind_attrs(&tree, userns.as_ref(), v.read_only)?;
        trees.push((tree, v.target.as_str()));
    }
    // The sandbox's root owns the directories made on the way, as runc's mount points.
    let owner = range.map(|r| r.host()).unwrap_or(0);
    let ns: OwnedFd = rustix::fs::open(
        format!("/proc/{init_pid}/ns/mnt"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
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
            // Joining a mount namespace moved this thread's root to the namespace's root: the
            // container's.
            let root = cove_confine::Tree::open(Path::new("/"))
                .map_err(|e| io::Error::other(e.to_string()))?;
            for (tree, target) in &trees {
                let dir = resolve_dir(&root, Path::new(target), owner)?;
                rustix::mount::move_mount(
                    tree.as_fd(),
                    "",
                    dir.as_fd(),
                    "",
                    MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH
                        | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
                )?;
            }
            Ok(())
        })
        .join()
        .map_err(|_| io::Error::other("the volume attach thread panicked"))?
    })
}

/// Opens directory `target` (absolute, or relative to `root`) in `root` through
/// [`cove_confine::Tree`] (`openat2` with `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS`, `..` refused before any call), making missing directories (mode
/// 0755, then owned by `owner`, uid and gid, when not 0) on the way.
///
/// # Errors
/// `InvalidInput` when the path goes up, is too deep, or a link or a non-directory is on the
/// way; other I/O errors as they come.
pub(crate) fn resolve_dir(
    root: &cove_confine::Tree,
    target: &Path,
    owner: u32,
) -> io::Result<cove_confine::Tree> {
    let refused = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("volume path {}: {why}", target.display()),
        )
    };
    let confined = |e: cove_confine::Error| match e {
        cove_confine::Error::Link { .. } => refused("a symbolic link is on the way"),
        cove_confine::Error::WrongKind { .. } => refused("not a directory"),
        cove_confine::Error::BadPath { .. } => refused("must not go up"),
        other => io::Error::other(other.to_string()),
    };
    // Every component is checked before anything is made.
    let mut names = Vec::new();
    for c in target.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => names.push(name),
            Component::ParentDir | Component::Prefix(_) => return Err(refused("must not go up")),
        }
    }
    if names.len() > MAX_DEPTH {
        return Err(refused("too deep"));
    }
    let mut walked = std::path::PathBuf::new();
    for name in names {
        walked.push(name);
        match root.open_dir(&walked) {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {
                root.create_dir_all(&walked, 0o755).map_err(confined)?;
                if owner != 0 {
                    root.chown(&walked, Some(owner), Some(owner))
                        .map_err(confined)?;
                }
            }
            Err(e) => return Err(confined(e)),
        }
    }
    root.open_dir(&walked).map_err(confined)
}

#[cfg(test)]
// The tests plant the tree with plain calls, as root in a sandbox would.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn root(dir: &Path) -> cove_confine::Tree {
        cove_confine::Tree::open(dir).expect("open root")
    }

    fn kind(e: io::Error) -> (io::ErrorKind, String) {
        (e.kind(), e.to_string())
    }

    #[test]
    fn missing_directories_are_made_beneath_the_root() {
        let tmp = tempfile::tempdir().expect("tmp");
        let got = resolve_dir(&root(tmp.path()), Path::new("/data/deep"), 0).expect("made");
        assert!(tmp.path().join("data/deep").is_dir());
        let st = rustix::fs::fstat(&got).expect("stat");
        let made = std::fs::metadata(tmp.path().join("data/deep")).expect("meta");
        assert_eq!(st.st_ino, std::os::unix::fs::MetadataExt::ino(&made));
        // An existing directory is opened as it is; made ones get the owner given.
        resolve_dir(&root(tmp.path()), Path::new("/data/owned"), 4242).expect("made");
        let owned = std::fs::metadata(tmp.path().join("data/owned")).expect("meta");
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&owned), 4242);
        let kept = std::fs::metadata(tmp.path().join("data")).expect("meta");
        assert_ne!(
            std::os::unix::fs::MetadataExt::uid(&kept),
            4242,
            "existing ones kept"
        );
    }

    #[test]
    fn a_link_anywhere_on_the_way_is_refused_not_followed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("outside");
        // At the target itself, and at a directory on the way, pointing out of the root.
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("data")).expect("link");
        std::fs::create_dir(tmp.path().join("a")).expect("dir");
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("a/b")).expect("link");
        // And one that stays inside.
        std::fs::create_dir(tmp.path().join("inside")).expect("dir");
        std::os::unix::fs::symlink("inside", tmp.path().join("rel")).expect("link");
        for target in ["/data", "/a/b/c", "/rel"] {
            let (k, msg) =
                kind(resolve_dir(&root(tmp.path()), Path::new(target), 0).expect_err(target));
            assert_eq!(k, io::ErrorKind::InvalidInput, "{target}: {msg}");
            assert!(msg.contains("symbolic link"), "{msg}");
        }
        assert_eq!(
            std::fs::read_dir(outside.path()).expect("read").count(),
            0,
            "nothing made through a link"
        );
        assert!(!tmp.path().join("inside/c").exists());
    }

    #[test]
    fn files_fifos_and_going_up_are_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(tmp.path().join("file"), b"x").expect("file");
        nix::unistd::mkfifo(&tmp.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        for target in ["/file", "/file/x", "/fifo"] {
            let (k, msg) =
                kind(resolve_dir(&root(tmp.path()), Path::new(target), 0).expect_err(target));
            assert_eq!(k, io::ErrorKind::InvalidInput, "{target}: {msg}");
            assert!(msg.contains("not a directory"), "{msg}");
        }
        let (k, _) =
            kind(resolve_dir(&root(tmp.path()), Path::new("/x/../../etc"), 0).expect_err("up"));
        assert_eq!(k, io::ErrorKind::InvalidInput);
        assert!(
            !tmp.path().join("x").exists(),
            "refused before anything was made"
        );
    }
}
