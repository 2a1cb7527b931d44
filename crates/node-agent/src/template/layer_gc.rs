//! A size bound for the step cache (blocking): least recently used entries go first.
//!
//! Every cache hit and every new entry touches the entry's `used` marker, whose mtime is the
//! entry's last use. [`trim`] measures the cache in allocated bytes, each inode once (entries
//! are hard-link copies of one another, so a file shared by ten entries counts once), and
//! removes whole entries, the least recently used first, until the cache fits. Entries used
//! since the build that asks began (its own chain of steps) are never removed. A release never
//! needs an entry: its tree is a hard-link copy with directory entries of its own, so removing
//! an entry only stops the cache from counting (and, when nothing else links them, frees) its
//! files. An entry is renamed to a dot name before it is removed, so a lookup never sees half
//! of one; dot names left by a crash go at the next trim.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cove_confine::Tree;

use super::files::{confined, io, MAX_TREE_ENTRIES};
use super::BuildError;

/// Name of the marker whose mtime is an entry's last use.
const USED: &str = "used";
/// Prefix of an entry being removed.
const GC_PREFIX: &str = ".gc-";

/// Marks the cache entry `entry` (a directory holding `rootfs`) as used now. Best effort: a
/// marker that cannot be written only makes the entry look older.
pub(crate) fn touch(entry: &Path) {
    let marker = entry.join(USED);
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&marker);
    if let Ok(f) = file {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// What a trim did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Entries removed.
    pub removed: u32,
    /// Allocated bytes of the cache before, each inode once.
    pub bytes_before: u64,
    /// Allocated bytes after.
    pub bytes_after: u64,
}

/// One entry as the trim sees it.
struct Entry {
    path: PathBuf,
    last_used: SystemTime,
    inodes: Vec<(u64, u64)>,
}

/// Removes the least recently used entries of the step cache in `dir` until it holds at most
/// `max_bytes`, never one used at or after `keep_since`.
///
/// # Errors
/// [`BuildError::Io`] when the cache cannot be read or an entry cannot be removed.
pub fn trim(dir: &Path, max_bytes: u64, keep_since: SystemTime) -> Result<Trimmed, BuildError> {
    let listed = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Trimmed::default()),
        Err(e) => return Err(io(dir, "read")(e)),
    };
    let mut entries = Vec::new();
    let mut sizes: HashMap<(u64, u64), (u64, u32)> = HashMap::new();
    for e in listed {
        let e = e.map_err(io(dir, "read"))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if name.starts_with(GC_PREFIX) {
            std::fs::remove_dir_all(&path).map_err(io(&path, "remove"))?;
            continue;
        }
        // Staging directories of builds in flight, and anything that is not an entry.
        if name.starts_with('.') || !path.join("rootfs").is_dir() {
            continue;
        }
        let last_used = std::fs::metadata(path.join(USED))
            .or_else(|_| std::fs::metadata(&path))
            .and_then(|m| m.modified())
            .map_err(io(&path, "stat"))?;
        let mut inodes = Vec::new();
        walk(&path, &mut |dev, ino, blocks| {
            let id = (dev, ino);
            let e = sizes.entry(id).or_insert((blocks * 512, 0));
            e.1 += 1;
            inodes.push(id);
        })?;
        entries.push(Entry {
            path,
            last_used,
            inodes,
        });
    }
    let mut total: u64 = sizes.values().map(|(b, _)| b).sum();
    let mut done = Trimmed {
        bytes_before: total,
        ..Trimmed::default()
    };
    entries.sort_by_key(|e| e.last_used);
    for e in entries {
        if total <= max_bytes || e.last_used >= keep_since {
            break;
        }
        let name = e
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let doomed = dir.join(format!("{GC_PREFIX}{name}"));
        std::fs::rename(&e.path, &doomed).map_err(io(&e.path, "rename"))?;
        std::fs::remove_dir_all(&doomed).map_err(io(&doomed, "remove"))?;
        for id in e.inodes {
            if let Some(s) = sizes.get_mut(&id) {
                s.1 -= 1;
                if s.1 == 0 {
                    total = total.saturating_sub(s.0);
                }
            }
        }
        done.removed += 1;
    }
    done.bytes_after = total;
    Ok(done)
}

/// Calls `seen` with the device, inode and 512-byte blocks of `root` and of everything below
/// it, walked through `cove_confine` (entries are trees of tenant steps: no link followed, no
/// other filesystem entered, at most [`MAX_TREE_ENTRIES`] entries).
fn walk(root: &Path, seen: &mut dyn FnMut(u64, u64, u64)) -> Result<(), BuildError> {
    let tree = Tree::open(root).map_err(confined("trim"))?;
    let me = tree.meta().map_err(confined("trim"))?;
    seen(me.dev, me.ino, me.blocks);
    tree.walk(MAX_TREE_ENTRIES, &mut |_, _, m| {
        seen(m.dev, m.ino, m.blocks);
        Ok(())
    })
    .map_err(confined("trim"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An entry with one file of `kib` KiB, last used `age` ago.
    fn entry(dir: &Path, name: &str, kib: usize, age: Duration) -> PathBuf {
        let e = dir.join(name);
        std::fs::create_dir_all(e.join("rootfs")).expect("mkdir");
        std::fs::write(e.join("rootfs/data"), vec![7u8; kib * 1024]).expect("write");
        touch(&e);
        let f = std::fs::File::options()
            .write(true)
            .open(e.join(USED))
            .expect("marker");
        f.set_modified(SystemTime::now() - age).expect("mtime");
        e
    }

    #[test]
    fn the_least_recently_used_entries_go_until_the_cache_fits() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        let hour = Duration::from_secs(3600);
        let oldest = entry(dir, "a", 512, 3 * hour);
        let older = entry(dir, "b", 512, 2 * hour);
        let recent = entry(dir, "c", 512, hour);
        // A hard-link copy of `c` (a child step) adds no bytes of its own.
        let child = dir.join("d");
        std::fs::create_dir_all(child.join("rootfs")).expect("mkdir");
        std::fs::hard_link(recent.join("rootfs/data"), child.join("rootfs/data")).expect("link");
        touch(&child);
        std::fs::create_dir_all(dir.join(".e.step-0123")).expect("staging");

        let started = SystemTime::now() - Duration::from_secs(60);
        let t = trim(dir, 600 * 1024, started).expect("trim");
        assert_eq!(t.removed, 2, "{t:?}");
        assert!(!oldest.exists() && !older.exists());
        assert!(recent.exists() && child.exists());
        assert!(
            t.bytes_after < t.bytes_before && t.bytes_after <= 600 * 1024,
            "{t:?}"
        );
        assert!(
            dir.join(".e.step-0123").exists(),
            "a build's staging is not an entry"
        );

        // Entries used since the build began stay, even over the bound.
        let t = trim(dir, 0, started).expect("trim");
        assert_eq!(t.removed, 1, "only `c`, used an hour ago: {t:?}");
        assert!(child.exists() && !recent.exists());
    }
}
