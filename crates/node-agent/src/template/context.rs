//! The build context of a file build: unpacked from the uploaded tar, hashed per `COPY`, and
//! copied into a tree (blocking).
//!
//! Sources resolve inside the context (a symlink in it cannot reach the node's files) and
//! destinations inside the tree. Copied entries are owned by root, keep their mode, and are
//! created under a temp name and renamed into place (the tree may share inodes with its
//! parent, see `layer.rs`). A source directory's contents are copied, not the directory.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::files::io;
use super::layer::{
    clean_relative, remove_any, replace_with, resolve_in_root, set_owner_mode, temp_beside,
};
use super::BuildError;

fn failed(detail: impl Into<String>) -> BuildError {
    BuildError::Failed {
        step: "context".into(),
        detail: detail.into(),
    }
}

/// Unpacks the context tar into `dir` (created), keeping modes; owners become root. An empty
/// archive is an empty context.
///
/// # Errors
/// [`BuildError::Failed`] for an unreadable archive or an entry leaving `dir`.
pub(crate) fn unpack(archive: &[u8], dir: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(dir).map_err(io(dir, "create"))?;
    if archive.is_empty() {
        return Ok(());
    }
    let mut ar = tar::Archive::new(archive);
    ar.set_preserve_permissions(true);
    ar.set_preserve_ownerships(false);
    ar.set_unpack_xattrs(false);
    for entry in ar
        .entries()
        .map_err(|e| failed(format!("read context: {e}")))?
    {
        let mut entry = entry.map_err(|e| failed(format!("read context: {e}")))?;
        let path = entry
            .path()
            .map_err(|e| failed(format!("context entry: {e}")))?
            .into_owned();
        clean_relative(&path)?;
        // `unpack_in` refuses entries that would land outside `dir`.
        entry
            .unpack_in(dir)
            .map_err(|e| failed(format!("unpack {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Hex SHA-256 of the context entries `sources` name: path, kind, mode and content (or link
/// target) of every entry under each, in order. A source that does not exist is an error
/// naming it.
pub(crate) fn hash_sources(context: &Path, sources: &[String]) -> Result<String, BuildError> {
    let mut h = Sha256::new();
    for src in sources {
        let host = resolve_in_root(context, Path::new(src), true)?;
        if host.symlink_metadata().is_err() {
            return Err(failed(format!("{src}: no such file in the build context")));
        }
        h.update(src.as_bytes());
        h.update(b"\0");
        hash_entry(&mut h, &host, Path::new(""))?;
    }
    Ok(format!("{:x}", h.finalize()))
}

fn hash_entry(h: &mut Sha256, host: &Path, rel: &Path) -> Result<(), BuildError> {
    let meta = host.symlink_metadata().map_err(io(host, "stat"))?;
    h.update(rel.as_os_str().as_bytes());
    h.update(format!("\0{:o}\0", meta.mode()).as_bytes());
    if meta.is_dir() {
        let mut names: Vec<_> = std::fs::read_dir(host)
            .map_err(io(host, "read"))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(io(host, "read"))?;
        names.sort();
        for n in names {
            hash_entry(h, &host.join(&n), &rel.join(&n))?;
        }
    } else if meta.file_type().is_symlink() {
        let t = std::fs::read_link(host).map_err(io(host, "readlink"))?;
        h.update(t.as_os_str().as_bytes());
    } else if meta.is_file() {
        let mut f = std::fs::File::open(host).map_err(io(host, "open"))?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = f.read(&mut buf).map_err(io(host, "read"))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    h.update(b"\n");
    Ok(())
}

/// Copies the context entries `sources` to `dest` (absolute in the tree): into `dest` as a
/// directory when it ends in `/`, there are several sources, a source is a directory, or it is
/// a directory already; onto `dest` as a file otherwise.
pub(crate) fn copy_into(
    tree: &Path,
    context: &Path,
    sources: &[String],
    dest: &str,
) -> Result<(), BuildError> {
    let dest_host = resolve_in_root(tree, Path::new(dest), true)?;
    let as_dir = dest.ends_with('/') || sources.len() > 1 || dest_host.is_dir();
    for src in sources {
        let src_host = resolve_in_root(context, Path::new(src), true)?;
        let meta = src_host
            .symlink_metadata()
            .map_err(|_| failed(format!("{src}: no such file in the build context")))?;
        if meta.is_dir() {
            mkdir_p(&dest_host)?;
            copy_children(&src_host, &dest_host)?;
        } else if as_dir {
            mkdir_p(&dest_host)?;
            let name = src_host.file_name().map(PathBuf::from).unwrap_or_default();
            copy_entry(&src_host, &dest_host.join(name))?;
        } else {
            if let Some(parent) = dest_host.parent() {
                mkdir_p(parent)?;
            }
            copy_entry(&src_host, &dest_host)?;
        }
    }
    Ok(())
}

/// `mkdir -p` of a host path already resolved inside a tree; new directories are 0755 root.
pub(crate) fn mkdir_p(dir: &Path) -> Result<(), BuildError> {
    if dir.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
        remove_any(dir)?;
    }
    std::fs::create_dir_all(dir).map_err(io(dir, "create"))
}

fn copy_children(src: &Path, dst: &Path) -> Result<(), BuildError> {
    for e in std::fs::read_dir(src).map_err(io(src, "read"))? {
        let e = e.map_err(io(src, "read"))?;
        copy_entry(&e.path(), &dst.join(e.file_name()))?;
    }
    Ok(())
}

fn copy_entry(src: &Path, dst: &Path) -> Result<(), BuildError> {
    let meta = src.symlink_metadata().map_err(io(src, "stat"))?;
    let mode = meta.mode() & 0o7777;
    if meta.is_dir() {
        if !dst.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            remove_any(dst)?;
            std::fs::create_dir(dst).map_err(io(dst, "create"))?;
        }
        set_owner_mode(dst, 0, 0, Some(mode))?;
        return copy_children(src, dst);
    }
    let tmp = temp_beside(dst);
    if meta.file_type().is_symlink() {
        let t = std::fs::read_link(src).map_err(io(src, "readlink"))?;
        std::os::unix::fs::symlink(t, &tmp).map_err(io(&tmp, "symlink"))?;
        set_owner_mode(&tmp, 0, 0, None)?;
    } else if meta.is_file() {
        std::fs::copy(src, &tmp).map_err(io(&tmp, "copy"))?;
        set_owner_mode(&tmp, 0, 0, Some(mode))?;
    } else {
        return Ok(());
    }
    replace_with(&tmp, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_files_and_directories_and_hashes_what_it_reads() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (ctx, tree) = (tmp.path().join("ctx"), tmp.path().join("tree"));
        std::fs::create_dir_all(ctx.join("dir/sub")).expect("dirs");
        std::fs::create_dir_all(tree.join("opt")).expect("dirs");
        std::fs::write(ctx.join("a.txt"), b"a").expect("file");
        std::fs::write(ctx.join("dir/sub/b"), b"b").expect("file");
        std::os::unix::fs::symlink("/etc/passwd", ctx.join("sneaky")).expect("symlink");

        copy_into(&tree, &ctx, &["a.txt".into()], "/opt/renamed").expect("file");
        copy_into(&tree, &ctx, &["dir".into()], "/srv/").expect("dir");
        assert_eq!(std::fs::read(tree.join("opt/renamed")).expect("f"), b"a");
        assert_eq!(std::fs::read(tree.join("srv/sub/b")).expect("f"), b"b");
        // The symlink resolves inside the context, where there is no etc/passwd.
        assert!(copy_into(&tree, &ctx, &["sneaky".into()], "/x").is_err());

        let h1 = hash_sources(&ctx, &["dir".into()]).expect("hash");
        assert_eq!(h1, hash_sources(&ctx, &["dir".into()]).expect("hash"));
        std::fs::write(ctx.join("a.txt"), b"changed").expect("file");
        assert_eq!(h1, hash_sources(&ctx, &["dir".into()]).expect("hash"));
        std::fs::write(ctx.join("dir/sub/b"), b"changed").expect("file");
        assert_ne!(h1, hash_sources(&ctx, &["dir".into()]).expect("hash"));
        assert!(hash_sources(&ctx, &["missing".into()]).is_err());
    }
}
