//! Writing recipe files into a root filesystem, and measuring one.

#![deny(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::path::Path;

use cove_confine::Tree;

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

/// A mapper of a confined access's error: a refused entry (a link, a FIFO, a path leaving
/// the tree) fails `step` naming the entry; a system call's error is `Io`. Neither carries
/// file bytes.
pub(crate) fn confined(step: &str) -> impl FnOnce(cove_confine::Error) -> BuildError + '_ {
    move |e| match e {
        cove_confine::Error::Io { op, path, source } => BuildError::Io {
            context: format!("{step}: {op} {}", shown(&path)),
            source,
        },
        other => BuildError::Failed {
            step: step.to_string(),
            detail: other.to_string(),
        },
    }
}

/// A tenant-chosen path for a message: lossy UTF-8, control characters escaped, at most 200
/// characters.
pub(crate) fn shown(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    format!("{out:?}")
}

/// Writes `(relative path, content)` files with mode 0644.
pub(crate) fn write_files(root: &Path, files: &[(&str, &str)]) -> Result<(), BuildError> {
    for (rel, content) in files {
        write_file(root, rel, content.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// Writes one file under `root`, replacing whatever is there (a link left by a package or an
/// image is replaced, never written through; its parents must be directories, not links).
pub(crate) fn write_file(
    root: &Path,
    rel: &str,
    content: &[u8],
    mode: u32,
) -> Result<(), BuildError> {
    let tree = Tree::open(root).map_err(confined("write files"))?;
    if let Some(parent) = Path::new(rel).parent() {
        tree.create_dir_all(parent, 0o755)
            .map_err(confined("write files"))?;
    }
    tree.replace_file(Path::new(rel), content, mode, None)
        .map_err(confined("write files"))
}

/// Most entries a release tree may hold (measured, digested or copied).
pub(crate) const MAX_TREE_ENTRIES: u64 = 8_000_000;

/// Apparent size in bytes of the regular files and symlinks under `root`, each inode once
/// (walked without following links, at most [`MAX_TREE_ENTRIES`] entries).
pub(crate) fn tree_size(root: &Path) -> Result<u64, BuildError> {
    let tree = Tree::open(root).map_err(confined("measure"))?;
    let mut seen = HashSet::new();
    let mut total = 0u64;
    tree.walk(MAX_TREE_ENTRIES, &mut |_, _, meta| {
        if (meta.is_file() || meta.is_symlink())
            && (meta.nlink == 1 || seen.insert((meta.dev, meta.ino)))
        {
            total += meta.size;
        }
        Ok(())
    })
    .map_err(confined("measure"))?;
    Ok(total)
}

#[cfg(test)]
// Tests plant, with plain path calls, what a tenant would.
#[allow(clippy::disallowed_methods)]
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
