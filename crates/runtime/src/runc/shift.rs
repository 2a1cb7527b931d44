//! Shifting the owners of a sandbox's own files (its overlay upper dir) into its id range.
//!
//! A file's owner relative to the sandbox is its host id minus the sandbox's range, so moving a
//! tree into range `to` maps every id `n < 65536` (container ids: files unpacked from a
//! snapshot, written by the host, or by a sandbox without a user namespace) and every id in some
//! other range (`base + k × 65536 + n`) to `to + n`. Ids between 65536 and `base` are no
//! sandbox's and are left alone. The mapping is idempotent, so a walk cut short by a crash is
//! simply walked again; the caller records when a walk completed (`userns.rs`) to skip it next
//! time.
//!
//! `chown` clears set-user-ID and set-group-ID bits, which are put back, and file capabilities
//! (`security.capability`), which are not: a capability set on a file in the sandbox's own layer
//! is lost by a shift (the release's files keep theirs). Blocking.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::userns::RANGE_SIZE;

/// Where id `id` goes when a tree moves into the range starting at `to` (`0`: container ids);
/// `None`: it stays.
pub(crate) fn shifted(id: u32, to: u32, base: u32) -> Option<u32> {
    let rel = if id < RANGE_SIZE {
        id
    } else if id >= base {
        (id - base) % RANGE_SIZE
    } else {
        return None;
    };
    let new = to.checked_add(rel)?;
    (new != id).then_some(new)
}

/// Shifts `root` and everything below it (not following symlinks or crossing into other
/// filesystems' mounts) into the range starting at `to`; returns how many entries changed.
/// Errors: the first entry that could not be read or changed.
pub(crate) fn tree(root: &Path, to: u32, base: u32) -> std::io::Result<u64> {
    let root_dev = std::fs::symlink_metadata(root)?.dev();
    let mut changed = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if one(&path, &meta, to, base)? {
            changed += 1;
        }
        if meta.is_dir() && meta.dev() == root_dev {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}

/// Shifts the entries at `paths` (each alone, not what is below); missing ones are skipped.
pub(crate) fn paths<'a>(
    paths: impl IntoIterator<Item = &'a Path>,
    to: u32,
    base: u32,
) -> std::io::Result<()> {
    for path in paths {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                one(path, &meta, to, base)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Shifts one entry; whether it changed.
fn one(path: &Path, meta: &std::fs::Metadata, to: u32, base: u32) -> std::io::Result<bool> {
    let uid = shifted(meta.uid(), to, base);
    let gid = shifted(meta.gid(), to, base);
    if uid.is_none() && gid.is_none() {
        return Ok(false);
    }
    std::os::unix::fs::lchown(path, uid, gid)?;
    let mode = meta.mode();
    if meta.is_file() && mode & 0o6000 != 0 {
        // chown cleared them.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u32 = 1 << 30;

    #[test]
    fn ids_move_between_ranges_and_back() {
        let to = BASE + 3 * RANGE_SIZE;
        assert_eq!(shifted(0, to, BASE), Some(to));
        assert_eq!(shifted(1000, to, BASE), Some(to + 1000));
        assert_eq!(shifted(BASE + RANGE_SIZE + 5, to, BASE), Some(to + 5));
        assert_eq!(shifted(to + 7, to, BASE), None);
        assert_eq!(shifted(to + 7, 0, BASE), Some(7));
        assert_eq!(shifted(7, 0, BASE), None);
        // Host ids that are no sandbox's stay.
        assert_eq!(shifted(100_000, to, BASE), None);
    }

    #[test]
    fn a_tree_is_shifted_with_its_set_id_bits_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("upper");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        let suid = root.join("etc/tool");
        std::fs::write(&suid, b"x").expect("write");
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        std::os::unix::fs::symlink("tool", root.join("etc/link")).expect("symlink");
        let to = BASE + RANGE_SIZE;
        // Needs root (chown); the e2e tests run as root too.
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        assert_eq!(tree(&root, to, BASE).expect("shift"), 4);
        let meta = std::fs::symlink_metadata(&suid).expect("stat");
        assert_eq!((meta.uid(), meta.gid()), (to, to));
        assert_eq!(meta.mode() & 0o7777, 0o4755);
        assert_eq!(
            std::fs::symlink_metadata(root.join("etc/link"))
                .expect("stat")
                .uid(),
            to
        );
        // Again: nothing to do. Back to container ids: everything moves.
        assert_eq!(tree(&root, to, BASE).expect("again"), 0);
        assert_eq!(tree(&root, 0, BASE).expect("back"), 4);
        assert_eq!(std::fs::metadata(&suid).expect("stat").uid(), 0);
    }
}
