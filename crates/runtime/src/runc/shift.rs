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
//!
//! The trees are the tenants' own: every access goes through [`Tree`] (no link followed, no
//! other filesystem entered); plain path calls are denied in this module.
#![deny(clippy::disallowed_methods)]

use std::ffi::CStr;
use std::path::Path;

use cove_confine::{Meta, Tree};

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

/// Most entries a shift walks in one tree: the walk is over a tenant's files, so it has a
/// bound; a sandbox with more files than this does not start (`TooMany`).
const MAX_SHIFT_ENTRIES: u64 = 50_000_000;

/// Shifts `root` and everything below it into the range starting at `to`; returns how many
/// entries changed. `root` may be a tenant's tree: the walk goes through [`Tree`] (no link
/// followed, no other filesystem entered, nothing opened but directories).
/// Errors: the first entry that could not be read or changed.
pub(crate) fn tree(root: &Path, to: u32, base: u32) -> std::io::Result<u64> {
    let tree = Tree::open(root)?;
    let mut changed = 0;
    let meta = tree.meta()?;
    let (uid, gid) = (shifted(meta.uid, to, base), shifted(meta.gid, to, base));
    if uid.is_some() || gid.is_some() {
        tree.chown_self(uid, gid)?;
        changed += 1;
    }
    tree.walk(MAX_SHIFT_ENTRIES, &mut |dir, name, meta| {
        if one(dir, name, meta, to, base)? {
            changed += 1;
        }
        Ok(())
    })?;
    Ok(changed)
}

/// Shifts the entries at `rels` below `root` (each alone, not what is below); missing ones
/// are skipped. Confined to `root` like [`tree`].
pub(crate) fn paths_in(root: &Path, rels: &[&str], to: u32, base: u32) -> std::io::Result<()> {
    let tree = Tree::open(root)?;
    for rel in rels {
        let rel = Path::new(rel);
        if rel.as_os_str().is_empty() {
            let meta = tree.meta()?;
            tree.chown_self(shifted(meta.uid, to, base), shifted(meta.gid, to, base))?;
            continue;
        }
        match tree.stat(rel) {
            Ok(Some(meta)) => {
                let (uid, gid) = (shifted(meta.uid, to, base), shifted(meta.gid, to, base));
                if uid.is_some() || gid.is_some() {
                    tree.chown(rel, uid, gid)?;
                    if meta.is_file() && meta.mode & 0o6000 != 0 {
                        tree.chmod(rel, meta.mode)?;
                    }
                }
            }
            Ok(None) | Err(cove_confine::Error::Link { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Shifts one entry (`name` in `dir`); whether it changed.
fn one(dir: &Tree, name: &CStr, meta: &Meta, to: u32, base: u32) -> cove_confine::Result<bool> {
    let uid = shifted(meta.uid, to, base);
    let gid = shifted(meta.gid, to, base);
    if uid.is_none() && gid.is_none() {
        return Ok(false);
    }
    dir.chown_at(name, uid, gid)?;
    if meta.is_file() && meta.mode & 0o6000 != 0 {
        // chown cleared them.
        dir.chmod_at(name, meta.mode)?;
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

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
