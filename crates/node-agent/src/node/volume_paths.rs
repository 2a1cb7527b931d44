//! Stat, remove, make a directory and set owner and mode on a volume's paths without a sandbox,
//! resolved as in `volume_files.rs`: `openat2(RESOLVE_IN_ROOT)` from the volume's root, so `..`
//! stops at the root and symlinks resolve as if the volume were `/`. A final symlink is never
//! followed: it is described, removed or re-owned itself. A sandbox that mounts the volume may
//! change it meanwhile, so every step after the resolution works on open descriptors or on one
//! component below an open directory, never on a path that could be swapped for a symlink.
//!
//! Blocking calls; callers run them on `spawn_blocking`.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use cove_node_api::{NodeError, VolumeEntry, VolumeEntryAttrs};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::volume_files::{
    components, entry_of, errno_err, invalid, open_in, open_root, parent_dir, OWNER,
};

/// Deepest directory tree a remove descends (deeper is refused, nothing of it removed
/// beyond what was reached).
const MAX_REMOVE_DEPTH: u32 = 256;

/// `rel` without a final `..`, and not the root (which no call here changes).
fn named<'a>(path: &'a str, what: &str) -> Result<Vec<&'a str>, NodeError> {
    let rel = components(path)?;
    match rel.last() {
        Some(n) if *n != ".." => Ok(rel),
        _ => Err(invalid(
            "path",
            &format!("must name an entry below the volume's root to {what}"),
        )),
    }
}

/// Opens `rel` without following a final symlink (`O_PATH`), for `fstat` (an `lstat`).
fn open_entry(root_fd: &OwnedFd, rel: &[&str], path: &str) -> Result<OwnedFd, NodeError> {
    open_in(root_fd, rel, OFlags::PATH | OFlags::NOFOLLOW).map_err(|e| errno_err(e, path))
}

/// The entry of an open `O_PATH` descriptor found at `rel`.
fn entry_at(fd: &OwnedFd, rel: &[&str], path: &str) -> Result<VolumeEntry, NodeError> {
    let st = rustix::fs::fstat(fd).map_err(|e| errno_err(e, path))?;
    let target = if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
    {
        rustix::fs::readlinkat(fd, "", Vec::new())
            .ok()
            .map(|t| t.into_bytes())
    } else {
        None
    };
    Ok(entry_of(&st, rel, target))
}

/// Describes `path` of the volume at `root` (`lstat`).
pub(super) fn stat(root: &Path, path: &str) -> Result<VolumeEntry, NodeError> {
    let rel = components(path)?;
    let root_fd = open_root(root)?;
    let fd = open_entry(&root_fd, &rel, path)?;
    entry_at(&fd, &rel, path)
}

/// Sets owner and mode of an open `O_PATH` descriptor. The mode goes through the descriptor's
/// `/proc/self/fd` link, which names that inode and no path (`fchmod` refuses `O_PATH`); a
/// symlink has no mode of its own to set.
fn apply(fd: &OwnedFd, attrs: VolumeEntryAttrs, path: &str) -> Result<(), NodeError> {
    if attrs.uid.is_some() || attrs.gid.is_some() {
        rustix::fs::chownat(
            fd,
            "",
            attrs.uid.map(rustix::fs::Uid::from_raw),
            attrs.gid.map(rustix::fs::Gid::from_raw),
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| errno_err(e, path))?;
    }
    if let Some(mode) = attrs.mode {
        if mode > 0o7777 {
            return Err(invalid("mode", "must be permission bits, at most 0o7777"));
        }
        let st = rustix::fs::fstat(fd).map_err(|e| errno_err(e, path))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink {
            return Err(invalid("mode", "a symlink has no mode of its own"));
        }
        let link = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        rustix::fs::chmod(link.as_str(), Mode::from_raw_mode(mode))
            .map_err(|e| errno_err(e, path))?;
    }
    Ok(())
}

/// Sets owner and mode of `path` of the volume at `root` (a final symlink: itself).
pub(super) fn set_attrs(
    root: &Path,
    path: &str,
    attrs: VolumeEntryAttrs,
) -> Result<VolumeEntry, NodeError> {
    let rel = components(path)?;
    let root_fd = open_root(root)?;
    let fd = open_entry(&root_fd, &rel, path)?;
    apply(&fd, attrs, path)?;
    entry_at(&fd, &rel, path)
}

/// Makes directory `path` of the volume at `root` (see `NodeVolumes::make_volume_dir`).
pub(super) fn make_dir(
    root: &Path,
    path: &str,
    parents: bool,
    attrs: VolumeEntryAttrs,
) -> Result<VolumeEntry, NodeError> {
    let root_fd = open_root(root)?;
    let rel = components(path)?;
    if rel.last().is_none_or(|n| *n == "..") {
        // The root, or a path that ends above a directory: it exists.
        let fd = open_in(&root_fd, &rel, OFlags::PATH | OFlags::DIRECTORY)
            .map_err(|e| errno_err(e, path))?;
        if !parents {
            return Err(errno_err(Errno::EXIST, path));
        }
        return entry_at(&fd, &rel, path);
    }
    let owner = (attrs.uid.unwrap_or(OWNER.0), attrs.gid.unwrap_or(OWNER.1));
    let dir = if parents {
        parent_dir(&root_fd, &rel, path, owner)?
    } else {
        open_in(
            &root_fd,
            &rel[..rel.len() - 1],
            OFlags::PATH | OFlags::DIRECTORY,
        )
        .map_err(|e| errno_err(e, path))?
    };
    let name = rel[rel.len() - 1];
    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
        Ok(()) => {}
        Err(Errno::EXIST) if parents => {
            let fd = rustix::fs::openat(
                &dir,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| errno_err(e, path))?;
            let entry = entry_at(&fd, &rel, path)?;
            if entry.info.file_type != cove_node_api::FileType::Dir {
                return Err(errno_err(Errno::EXIST, path));
            }
            return Ok(entry);
        }
        Err(e) => return Err(errno_err(e, path)),
    }
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_err(e, path))?;
    apply(
        &fd,
        VolumeEntryAttrs {
            uid: Some(owner.0),
            gid: Some(owner.1),
            mode: Some(attrs.mode.unwrap_or(0o755)),
        },
        path,
    )?;
    entry_at(&fd, &rel, path)
}

/// Removes `path` of the volume at `root`: a directory with everything below it.
pub(super) fn remove(root: &Path, path: &str) -> Result<(), NodeError> {
    let rel = named(path, "remove")?;
    let root_fd = open_root(root)?;
    let dir = open_in(
        &root_fd,
        &rel[..rel.len() - 1],
        OFlags::PATH | OFlags::DIRECTORY,
    )
    .map_err(|e| errno_err(e, path))?;
    let name = rel[rel.len() - 1];
    // Missing is an error here; below, an entry a sandbox removes meanwhile is not.
    rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| errno_err(e, path))?;
    let name = std::ffi::CString::new(name).map_err(|_| invalid("path", "has a NUL byte"))?;
    remove_child(&dir, &name, 0, path)
}

/// Removes `name` below the open directory `dir`, a directory's contents first (one
/// component at a time, never following a symlink).
fn remove_child(
    dir: &OwnedFd,
    name: &std::ffi::CStr,
    depth: u32,
    path: &str,
) -> Result<(), NodeError> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        // Gone meanwhile (a sandbox removed it too): what we wanted.
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(errno_err(e, path)),
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
        return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(errno_err(e, path)),
        };
    }
    if depth >= MAX_REMOVE_DEPTH {
        return Err(NodeError::FailedPrecondition(format!(
            "{path} is more than {MAX_REMOVE_DEPTH} directories deep"
        )));
    }
    let sub = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno_err(e, path))?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&sub).map_err(|e| errno_err(e, path))? {
        let entry = entry.map_err(|e| errno_err(e, path))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(entry.file_name().to_owned());
        }
    }
    for n in &names {
        remove_child(&sub, n, depth + 1, path)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(errno_err(e, path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(uid: Option<u32>, gid: Option<u32>, mode: Option<u32>) -> VolumeEntryAttrs {
        VolumeEntryAttrs { uid, gid, mode }
    }

    #[test]
    fn stat_mkdir_chmod_and_remove_stay_inside_the_root() {
        let outer = tempfile::tempdir().expect("tempdir");
        let root = outer.path().join("vol");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::create_dir(outer.path().join("host")).expect("mkdir");
        std::fs::write(outer.path().join("host/keep"), b"host").expect("write");
        std::os::unix::fs::symlink(outer.path().join("host"), root.join("out")).expect("ln");
        std::os::unix::fs::symlink("../..", root.join("up")).expect("ln");

        // A final symlink is described, not followed.
        let link = stat(&root, "out").expect("stat");
        assert_eq!(link.info.file_type, cove_node_api::FileType::Symlink);
        assert_eq!(link.info.path.0, b"/out");
        // `..` stops at the root.
        let top = stat(&root, "../..").expect("stat");
        assert_eq!(top.info.file_type, cove_node_api::FileType::Dir);
        assert!(matches!(
            stat(&root, "nope"),
            Err(NodeError::FileNotFound(_))
        ));

        // mkdir: parents only when asked; through `up` it lands in the volume.
        assert!(matches!(
            make_dir(&root, "a/b", false, VolumeEntryAttrs::default()),
            Err(NodeError::FileNotFound(_))
        ));
        let made = make_dir(&root, "up/a/b", true, attrs(Some(0), Some(0), Some(0o700)))
            .expect("mkdir -p");
        assert_eq!((made.uid, made.gid, made.info.mode), (0, 0, 0o700));
        assert!(root.join("a/b").is_dir() && !outer.path().join("a").exists());
        assert!(matches!(
            make_dir(&root, "a/b", false, VolumeEntryAttrs::default()),
            Err(NodeError::AlreadyExists(_))
        ));
        make_dir(&root, "a/b", true, VolumeEntryAttrs::default()).expect("exists is fine");
        // Through `out` (absolute symlink): resolved inside the volume, where `/host` is missing.
        assert!(matches!(
            make_dir(&root, "out/x", false, VolumeEntryAttrs::default()),
            Err(NodeError::FileNotFound(_))
        ));

        // chmod/chown: the symlink itself, never its target.
        let got = set_attrs(&root, "a", attrs(Some(0), Some(0), Some(0o750))).expect("chmod");
        assert_eq!(got.info.mode, 0o750);
        assert!(matches!(
            set_attrs(&root, "out", attrs(None, None, Some(0o777))),
            Err(NodeError::InvalidArgument { .. })
        ));

        // remove: a symlink loses the link only; a directory goes with its contents.
        remove(&root, "out").expect("rm link");
        assert_eq!(
            std::fs::read(outer.path().join("host/keep")).expect("read"),
            b"host"
        );
        std::fs::write(root.join("a/b/f"), b"x").expect("write");
        remove(&root, "up/a").expect("rm -r");
        assert!(!root.join("a").exists());
        assert!(outer.path().join("host/keep").exists());
        for p in ["/", "..", "a/..", "up/.."] {
            assert!(
                matches!(remove(&root, p), Err(NodeError::InvalidArgument { .. })),
                "{p}"
            );
        }
        assert!(matches!(
            remove(&root, "a"),
            Err(NodeError::FileNotFound(_))
        ));
    }
}
