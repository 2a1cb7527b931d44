//! Temporary build directories beside their destination, published by rename, and removed
//! safely otherwise (mounts a killed build tool left inside are detached first, so removal never
//! reaches into a host `/dev`, `/proc` or `/sys`).

use std::path::{Component, Path, PathBuf};

use nix::mount::{umount2, MntFlags};

use super::BuildError;

/// A temporary directory `<parent>/.<name>.<tag>-<random>` holding `rootfs/` while it is built.
/// Dropping it unpublished removes it (on a background thread); [`Staging::discard`] removes it
/// before returning.
pub(crate) struct Staging {
    dir: Option<PathBuf>,
}

impl Staging {
    /// Creates the staging directory beside `dest` (same filesystem, so publishing is a rename).
    pub(crate) fn beside(dest: &Path, tag: &str) -> Result<Staging, BuildError> {
        let (parent, name) = split(dest)?;
        let dir = parent.join(format!(".{name}.{tag}-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&dir).map_err(|source| BuildError::Io {
            context: format!("create build directory {}", dir.display()),
            source,
        })?;
        Ok(Staging { dir: Some(dir) })
    }

    /// Where the root filesystem is built.
    pub(crate) fn rootfs(&self) -> PathBuf {
        self.dir
            .as_ref()
            .map(|d| d.join("rootfs"))
            .unwrap_or_default()
    }

    /// A scratch directory inside the staging directory (created on first use), for a build
    /// tool's `TMPDIR`, so whatever a killed tool leaves there goes with the staging directory.
    pub(crate) fn scratch(&self) -> Result<PathBuf, BuildError> {
        let scratch = self.dir.as_ref().map(|d| d.join("tmp")).unwrap_or_default();
        std::fs::create_dir_all(&scratch).map_err(|source| BuildError::Io {
            context: format!("create {}", scratch.display()),
            source,
        })?;
        Ok(scratch)
    }

    /// Renames the built `rootfs/` (or the whole staging directory when `whole` is set) to `dest`,
    /// then removes what is left.
    pub(crate) async fn publish(mut self, dest: &Path, whole: bool) -> Result<(), BuildError> {
        let Some(dir) = self.dir.take() else {
            return Ok(());
        };
        let from = if whole {
            dir.clone()
        } else {
            dir.join("rootfs")
        };
        if let Err(source) = std::fs::rename(&from, dest) {
            remove_blocking(dir).await;
            return Err(BuildError::Io {
                context: format!("rename build into {}", dest.display()),
                source,
            });
        }
        if !whole {
            remove_blocking(dir).await;
        }
        Ok(())
    }

    /// Removes the staging directory and everything in it.
    pub(crate) async fn discard(mut self) {
        if let Some(dir) = self.dir.take() {
            remove_blocking(dir).await;
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            std::thread::spawn(move || remove_tree(&dir));
        }
    }
}

async fn remove_blocking(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || remove_tree(&dir)).await;
}

/// `(parent, file name)` of a destination path.
pub(crate) fn split(dest: &Path) -> Result<(&Path, String), BuildError> {
    let invalid = || BuildError::Io {
        context: format!("destination {}", dest.display()),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    };
    let name = match dest.components().next_back() {
        Some(Component::Normal(n)) => n.to_string_lossy().into_owned(),
        _ => return Err(invalid()),
    };
    let parent = dest.parent().ok_or_else(invalid)?;
    Ok((parent, name))
}

/// Detaches every mount at or below `dir`, then removes it recursively. Errors are ignored:
/// this is cleanup after a failure, and the caller already has an error to report.
pub(crate) fn remove_tree(dir: &Path) {
    if let Ok(root) = std::fs::canonicalize(dir) {
        if let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") {
            let mut below: Vec<PathBuf> = info
                .lines()
                .filter_map(|l| l.split(' ').nth(4))
                .map(|m| PathBuf::from(unescape(m)))
                .filter(|m| m.starts_with(&root))
                .collect();
            // Deepest first.
            below.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
            for m in below {
                let _ = umount2(&m, MntFlags::MNT_DETACH);
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn splits_destinations() {
        let (parent, name) = split(Path::new("/data/releases/base/1/rootfs")).expect("split");
        assert_eq!(parent, Path::new("/data/releases/base/1"));
        assert_eq!(name, "rootfs");
        assert!(split(Path::new("/")).is_err());
        assert!(split(Path::new("/a/..")).is_err());
    }
}
