//! Writing recipe files into a root filesystem, and measuring one.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::BuildError;

/// An `Io` error mapper naming the action and path.
pub(crate) fn io<'a>(
    path: &'a Path,
    action: &'a str,
) -> impl FnOnce(std::io::Error) -> BuildError + 'a {
    move |source| BuildError::Io {
        context: format!("{action} {}", path.display()),
        source,
    }
}

/// Writes `(relative path, content)` files with mode 0644.
pub(crate) fn write_files(root: &Path, files: &[(&str, &str)]) -> Result<(), BuildError> {
    for (rel, content) in files {
        write_file(root, rel, content.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// Writes one file under `root`, replacing whatever is there. The old entry is removed first, so
/// a symlink left by a package cannot redirect the write outside the tree.
pub(crate) fn write_file(
    root: &Path,
    rel: &str,
    content: &[u8],
    mode: u32,
) -> Result<(), BuildError> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent, "create"))?;
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path, "replace")(e)),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .map_err(io(&path, "create"))?;
    f.write_all(content).map_err(io(&path, "write"))?;
    // The umask may have narrowed the mode.
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(io(&path, "chmod"))
}

/// Apparent size in bytes of the regular files and symlinks under `root`, each inode once.
pub(crate) fn tree_size(root: &Path) -> Result<u64, BuildError> {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir, "read"))? {
            let entry = entry.map_err(io(&dir, "read"))?;
            let meta = entry
                .path()
                .symlink_metadata()
                .map_err(io(&entry.path(), "stat"))?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if (meta.is_file() || meta.file_type().is_symlink())
                && (meta.nlink() == 1 || seen.insert((meta.dev(), meta.ino())))
            {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_symlinks_instead_of_following_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "keep").expect("write");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, root.join("etc/hostname")).expect("symlink");
        write_files(&root, &[("etc/hostname", "cove\n")]).expect("write");
        assert_eq!(std::fs::read_to_string(&outside).expect("read"), "keep");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/hostname")).expect("read"),
            "cove\n"
        );
        assert_eq!(tree_size(&root).expect("size"), 5);
    }
}
