//! Applying a layer (a tar of changed files) onto a root filesystem tree, blocking.
//!
//! Two whiteout dialects are honoured: overlayfs's (a `0:0` character device deletes the path;
//! a directory with the `trusted.overlay.opaque=y` extended attribute, as a PAX
//! `SCHILY.xattr.` record, hides what lower layers had in it; this is how the runc runtime
//! packs a sandbox's files) and OCI's (`.wh.NAME` deletes `NAME`, `.wh..wh..opq` empties its
//! directory of lower entries).
//!
//! The tree may be a hard-link copy of its parent (`cp -al`), whose file inodes are shared with
//! the parent's tree. So nothing here writes into an existing file: every file, symlink and
//! hard link is created under a temp name and renamed over its path, which gives it a new inode
//! and leaves the parent untouched. Directories of a hard-link copy are its own, so their mode
//! and owner are set in place. Paths are resolved inside the tree (`..` and symlinks cannot
//! leave it). Devices other than whiteouts and FIFOs are skipped (a sandbox gets its `/dev`
//! from the runtime), and so are extended attributes other than the opaque marker.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::files::io;
use super::BuildError;

/// Symlinks followed while resolving one path before it counts as a loop.
const MAX_SYMLINK_HOPS: u32 = 40;

/// OCI whiteout prefix and opaque marker.
const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// PAX records that mark an overlayfs opaque directory (see the runc runtime's packer).
const OPAQUE_PAX: &str = "SCHILY.xattr.trusted.overlay.opaque";
const OPAQUE_HEX_PAX: &str = "COVE.xattr-hex.trusted.overlay.opaque";

/// What an applied layer did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Entries written.
    pub(crate) written: u64,
    /// Paths deleted by whiteouts.
    pub(crate) whiteouts: u64,
    /// Entries skipped (devices, FIFOs, sockets).
    pub(crate) skipped: u64,
}

fn bad(detail: impl Into<String>) -> BuildError {
    BuildError::Failed {
        step: "apply layer".into(),
        detail: detail.into(),
    }
}

/// A relative path made of normal components only: `./a/b` → `a/b`; `..` or an absolute
/// path is an error (a layer or context entry trying to leave its tree).
pub(crate) fn clean_relative(path: &Path) -> Result<PathBuf, BuildError> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::RootDir if out.as_os_str().is_empty() => {}
            _ => return Err(bad(format!("entry {} leaves its tree", path.display()))),
        }
    }
    Ok(out)
}

/// The host path of `path` inside the tree at `root`, resolving `..` and symlinks as if `root`
/// were `/` (an absolute symlink restarts at `root`). The last component is not followed when
/// `follow_last` is false. The result is always under `root`.
pub(crate) fn resolve_in_root(
    root: &Path,
    path: &Path,
    follow_last: bool,
) -> Result<PathBuf, BuildError> {
    let mut pending: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut cur = PathBuf::new();
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            cur.pop();
            continue;
        }
        let candidate = cur.join(&part);
        let host = root.join(&candidate);
        let is_last = pending.is_empty();
        match host.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() && (follow_last || !is_last) => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(bad(format!("too many symlinks in {}", path.display())));
                }
                let target = std::fs::read_link(&host).map_err(io(&host, "readlink"))?;
                if target.is_absolute() {
                    cur = PathBuf::new();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(p) => pending.push(p.to_os_string()),
                        Component::ParentDir => pending.push("..".into()),
                        _ => {}
                    }
                }
            }
            _ => cur = candidate,
        }
    }
    Ok(root.join(cur))
}

/// Removes whatever is at `path` (a tree, a file, nothing).
pub(crate) fn remove_any(path: &Path) -> Result<(), BuildError> {
    let r = match path.symlink_metadata() {
        Err(_) => return Ok(()),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    r.map_err(io(path, "remove"))
}

/// A temp name beside `path` for a create-then-rename.
pub(crate) fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".cove-new-{}-{name}", rand::random::<u64>()))
}

/// Moves `tmp` onto `path`; a directory in the way is removed first.
pub(crate) fn replace_with(tmp: &Path, path: &Path) -> Result<(), BuildError> {
    if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        remove_any(path)?;
    }
    std::fs::rename(tmp, path).map_err(io(path, "rename"))
}

/// Applies the layer tar `input` onto the tree at `root` (see the module docs).
///
/// # Errors
/// [`BuildError::Failed`] for an entry that leaves the tree or an unreadable archive,
/// [`BuildError::Io`] when the tree cannot be written.
pub(crate) fn apply_layer<R: Read>(root: &Path, input: R) -> Result<Applied, BuildError> {
    let mut archive = tar::Archive::new(input);
    let mut applied = Applied::default();
    // Host paths this layer wrote: an opaque directory hides only what lower layers had.
    let mut written: HashSet<PathBuf> = HashSet::new();
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("read layer: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("read layer: {e}")))?;
        let raw = entry
            .path()
            .map_err(|e| bad(format!("entry path: {e}")))?
            .into_owned();
        let rel = clean_relative(&raw)?;
        let Some(name) = rel.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue; // the root itself
        };
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        let parent = resolve_in_root(root, parent_rel, true)?;
        let host = parent.join(&name);
        if name == OPAQUE_MARKER {
            clear_lower(&parent, &written)?;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
            remove_any(&parent.join(hidden))?;
            applied.whiteouts += 1;
            continue;
        }
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().unwrap_or(0o644) & 0o7777;
        let uid = header.uid().unwrap_or(0) as u32;
        let gid = header.gid().unwrap_or(0) as u32;
        if kind == EntryType::Char
            && header.device_major().ok().flatten() == Some(0)
            && header.device_minor().ok().flatten() == Some(0)
        {
            remove_any(&host)?;
            applied.whiteouts += 1;
            continue;
        }
        std::fs::create_dir_all(&parent).map_err(io(&parent, "create"))?;
        match kind {
            EntryType::Directory => {
                let opaque = is_opaque(&mut entry);
                if !host.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                    remove_any(&host)?;
                    std::fs::create_dir(&host).map_err(io(&host, "create"))?;
                } else if opaque {
                    clear_lower(&host, &written)?;
                }
                set_owner_mode(&host, uid, gid, Some(mode))?;
            }
            EntryType::Regular | EntryType::Continuous => {
                let tmp = temp_beside(&host);
                let mut f = std::fs::File::create(&tmp).map_err(io(&tmp, "create"))?;
                std::io::copy(&mut entry, &mut f).map_err(io(&tmp, "write"))?;
                drop(f);
                set_owner_mode(&tmp, uid, gid, Some(mode))?;
                replace_with(&tmp, &host)?;
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| bad(format!("link name: {e}")))?
                    .ok_or_else(|| bad("symlink without a target"))?
                    .into_owned();
                let tmp = temp_beside(&host);
                std::os::unix::fs::symlink(&target, &tmp).map_err(io(&tmp, "symlink"))?;
                set_owner_mode(&tmp, uid, gid, None)?;
                replace_with(&tmp, &host)?;
            }
            EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| bad(format!("link name: {e}")))?
                    .ok_or_else(|| bad("hard link without a target"))?
                    .into_owned();
                let target = resolve_in_root(root, &clean_relative(&target)?, false)?;
                let tmp = temp_beside(&host);
                std::fs::hard_link(&target, &tmp).map_err(io(&target, "link"))?;
                replace_with(&tmp, &host)?;
            }
            _ => {
                applied.skipped += 1;
                continue;
            }
        }
        written.insert(host);
        applied.written += 1;
    }
    Ok(applied)
}

fn is_opaque<R: Read>(entry: &mut tar::Entry<'_, R>) -> bool {
    let Ok(Some(exts)) = entry.pax_extensions() else {
        return false;
    };
    exts.flatten().any(|e| match e.key() {
        Ok(OPAQUE_PAX) => e.value_bytes() == b"y",
        Ok(OPAQUE_HEX_PAX) => e.value_bytes() == b"79",
        _ => false,
    })
}

/// Removes the entries of `dir` that this layer did not write.
fn clear_lower(dir: &Path, written: &HashSet<PathBuf>) -> Result<(), BuildError> {
    let Ok(children) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for child in children {
        let child = child.map_err(io(dir, "read"))?.path();
        if !written.contains(&child) {
            remove_any(&child)?;
        }
    }
    Ok(())
}

/// Sets owner (without following symlinks) and, unless `None`, the permission bits.
pub(crate) fn set_owner_mode(
    path: &Path,
    uid: u32,
    gid: u32,
    mode: Option<u32>,
) -> Result<(), BuildError> {
    let meta = path.symlink_metadata().map_err(io(path, "stat"))?;
    if meta.uid() != uid || meta.gid() != gid {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io(path, "chown"))?;
    }
    if let Some(mode) = mode {
        // After chown, which clears setuid/setgid bits.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(io(path, "chmod"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(b: &mut tar::Builder<Vec<u8>>, path: &str, kind: EntryType, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(if kind == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_size(data.len() as u64);
        h.set_uid(0);
        h.set_gid(0);
        if kind == EntryType::Char {
            h.set_device_major(0).expect("major");
            h.set_device_minor(0).expect("minor");
        }
        b.append_data(&mut h, path, data).expect("append");
    }

    #[test]
    fn whiteouts_of_both_dialects_and_no_write_through_hard_links() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (lower, tree) = (tmp.path().join("lower"), tmp.path().join("tree"));
        std::fs::create_dir_all(lower.join("etc/opq")).expect("dirs");
        std::fs::create_dir_all(lower.join("usr/bin")).expect("dirs");
        std::os::unix::fs::symlink("usr/bin", lower.join("bin")).expect("symlink");
        std::os::unix::fs::symlink("/etc", lower.join("abs")).expect("symlink");
        for f in [
            "etc/keep",
            "etc/gone-oci",
            "etc/gone-ovl",
            "etc/opq/old",
            "etc/shared",
        ] {
            std::fs::write(lower.join(f), b"lower").expect("file");
        }
        let status = std::process::Command::new("cp")
            .arg("-al")
            .arg(&lower)
            .arg(&tree)
            .status()
            .expect("cp");
        assert!(status.success());

        let mut b = tar::Builder::new(Vec::new());
        append(&mut b, "etc/.wh.gone-oci", EntryType::Regular, b"");
        append(&mut b, "etc/gone-ovl", EntryType::Char, b"");
        append(&mut b, "etc/opq/.wh..wh..opq", EntryType::Regular, b"");
        append(&mut b, "etc/opq/new", EntryType::Regular, b"new");
        append(&mut b, "etc/shared", EntryType::Regular, b"upper");
        append(&mut b, "bin/tool", EntryType::Regular, b"tool");
        append(&mut b, "abs/through", EntryType::Regular, b"inside");
        let layer = b.into_inner().expect("tar");
        let applied = apply_layer(&tree, layer.as_slice()).expect("apply");
        assert_eq!(applied.whiteouts, 2);

        assert!(tree.join("etc/keep").exists());
        assert!(!tree.join("etc/gone-oci").exists() && !tree.join("etc/gone-ovl").exists());
        assert!(!tree.join("etc/opq/old").exists());
        assert_eq!(
            std::fs::read(tree.join("etc/opq/new")).expect("new"),
            b"new"
        );
        assert_eq!(std::fs::read(tree.join("etc/shared")).expect("f"), b"upper");
        // The parent tree shares inodes with the copy and is untouched.
        assert_eq!(
            std::fs::read(lower.join("etc/shared")).expect("f"),
            b"lower"
        );
        assert!(lower.join("etc/gone-oci").exists() && lower.join("etc/opq/old").exists());
        // Symlinks resolve inside the tree, an absolute one too.
        assert_eq!(
            std::fs::read(tree.join("usr/bin/tool")).expect("f"),
            b"tool"
        );
        assert_eq!(
            std::fs::read(tree.join("etc/through")).expect("f"),
            b"inside"
        );
    }

    #[test]
    fn escaping_entries_are_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::Regular);
        h.set_size(1);
        // `append_data` refuses `..`; write the name into the header directly.
        h.as_old_mut().name[..8].copy_from_slice(b"../evil\0");
        h.set_cksum();
        b.append(&h, &b"x"[..]).expect("append");
        let layer = b.into_inner().expect("tar");
        assert!(apply_layer(tmp.path(), layer.as_slice()).is_err());
        assert!(!tmp.path().parent().expect("parent").join("evil").exists());
    }

    #[test]
    fn resolving_never_leaves_the_root() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        std::os::unix::fs::symlink("../../..", root.join("up")).expect("symlink");
        let p = resolve_in_root(root, Path::new("up/etc/passwd"), true).expect("resolve");
        assert_eq!(p, root.join("etc/passwd"));
        let p = resolve_in_root(root, Path::new("../../x"), true).expect("resolve");
        assert_eq!(p, root.join("x"));
    }
}
