//! A release's content digest: `sha256:` + hex SHA-256 over a canonical manifest of its root
//! filesystem and its sandbox defaults, so the same build inputs give the same digest.
//!
//! # Manifest (version 1)
//! The line `cove-release-manifest v1`, the defaults as `user=…`, `workdir=…` and one `env K=V`
//! per variable (sorted by key), for a release built from a file its `start=…` and
//! `ready=TIMEOUT_S CMD` lines when it has them (newlines escaped), then one record per entry of the tree, depth first with siblings
//! in byte order of their names, named by its path from the root (`/` for the root itself):
//! `path NUL kind NUL mode NUL uid NUL gid NUL detail NL`, where kind is `d`, `f`, `l`, `c`,
//! `b`, `p` or `s`, mode is the permission bits in octal (with setuid/setgid/sticky), and detail
//! is the size and the hex SHA-256 of the content for a file, the target for a symlink and the
//! device number for a device. Timestamps, inode numbers and hard-link identity are left out:
//! they differ between two builds of the same inputs and between a build and its copy.
//!
//! # What is reproducible
//! `tiny` (busybox and files Cove writes) rebuilds to the same digest. `base` does not: mmdebstrap
//! writes files that differ per run (`/etc/machine-id` is emptied, but apt lists, dpkg logs and
//! `ld.so.cache` record times and package versions, which move with the mirror); a copy of a
//! `base` release (the build cache) has the digest of the release it was copied from.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::files::io;
use super::{BuildError, TemplateDefaults};

/// The digest of the tree at `root` with `defaults`: `sha256:` + 64 hex digits. Reads every
/// file once (about 1 s for the 260 MiB `base` tree here in a release build).
///
/// # Errors
/// [`BuildError::Io`] when an entry cannot be read.
pub(crate) fn release_digest(
    root: &Path,
    defaults: &TemplateDefaults,
) -> Result<String, BuildError> {
    manifest_digest(root, defaults, &[])
}

/// [`release_digest`] with more default lines after the environment (a file release's
/// `start=…` and `ready=…`, each without a newline; absent lines leave the digest as for a
/// recipe release).
///
/// # Errors
/// [`BuildError::Io`] when an entry cannot be read.
pub(crate) fn manifest_digest(
    root: &Path,
    defaults: &TemplateDefaults,
    extra: &[String],
) -> Result<String, BuildError> {
    let mut h = Sha256::new();
    h.update(b"cove-release-manifest v1\n");
    h.update(format!("user={}\nworkdir={}\n", defaults.user, defaults.workdir).as_bytes());
    for (k, v) in &defaults.env {
        h.update(format!("env {k}={v}\n").as_bytes());
    }
    for line in extra {
        h.update(line.replace('\n', "\\n").as_bytes());
        h.update(b"\n");
    }
    entry(&mut h, root, b"/")?;
    walk(&mut h, root, &mut Vec::new())?;
    Ok(format!("sha256:{:x}", h.finalize()))
}

/// Records the children of `root/rel`, depth first, siblings in byte order of their names.
fn walk(h: &mut Sha256, root: &Path, rel: &mut Vec<u8>) -> Result<(), BuildError> {
    // `rel` is `/`-prefixed (`/etc/sub`); joined as is it would name the host's tree.
    let dir = root.join(std::ffi::OsStr::from_bytes(
        rel.strip_prefix(b"/").unwrap_or(rel),
    ));
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .map_err(io(&dir, "read"))?
        .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
        .collect::<Result<_, _>>()
        .map_err(io(&dir, "read"))?;
    names.sort();
    for name in names {
        let len = rel.len();
        rel.push(b'/');
        rel.extend_from_slice(&name);
        let path = root.join(std::ffi::OsStr::from_bytes(&rel[1..]));
        if entry(h, &path, rel)? {
            walk(h, root, rel)?;
        }
        rel.truncate(len);
    }
    Ok(())
}

/// Records one entry; returns whether it is a directory to descend into.
fn entry(h: &mut Sha256, path: &Path, rel: &[u8]) -> Result<bool, BuildError> {
    let meta = path.symlink_metadata().map_err(io(path, "stat"))?;
    let t = meta.file_type();
    let (kind, detail) = if t.is_dir() {
        ("d", String::new())
    } else if t.is_file() {
        ("f", format!("{} {}", meta.len(), file_sha256(path)?))
    } else if t.is_symlink() {
        let target = std::fs::read_link(path).map_err(io(path, "readlink"))?;
        (
            "l",
            String::from_utf8_lossy(target.as_os_str().as_bytes()).into_owned(),
        )
    } else if t.is_char_device() {
        ("c", meta.rdev().to_string())
    } else if t.is_block_device() {
        ("b", meta.rdev().to_string())
    } else if t.is_fifo() {
        ("p", String::new())
    } else {
        ("s", String::new())
    };
    h.update(rel);
    h.update(
        format!(
            "\0{kind}\0{:o}\0{}\0{}\0{detail}\n",
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        )
        .as_bytes(),
    );
    Ok(t.is_dir())
}

fn file_sha256(path: &Path) -> Result<String, BuildError> {
    let mut f = std::fs::File::open(path).map_err(io(path, "open"))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf).map_err(io(path, "read"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn defaults() -> TemplateDefaults {
        TemplateDefaults {
            user: "user".into(),
            workdir: "/home/user".into(),
            env: BTreeMap::new(),
        }
    }

    fn tree(root: &Path, content: &[u8]) {
        std::fs::create_dir_all(root.join("etc/sub")).expect("dirs");
        std::fs::write(root.join("etc/a"), content).expect("file");
        std::fs::write(root.join("etc/sub/b"), b"b").expect("file");
        std::os::unix::fs::symlink("a", root.join("etc/link")).expect("symlink");
    }

    #[test]
    fn same_content_same_digest_and_any_change_moves_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        tree(&one, b"hello");
        tree(&two, b"hello");
        // Timestamps are not part of the manifest.
        let old = std::fs::File::options()
            .write(true)
            .open(two.join("etc/a"))
            .expect("open");
        old.set_modified(std::time::SystemTime::UNIX_EPOCH)
            .expect("mtime");
        let d = release_digest(&one, &defaults()).expect("digest");
        assert!(d.starts_with("sha256:") && d.len() == 7 + 64, "{d}");
        assert_eq!(release_digest(&two, &defaults()).expect("digest"), d);

        std::fs::write(two.join("etc/a"), b"hellO").expect("change");
        assert_ne!(release_digest(&two, &defaults()).expect("digest"), d);
        std::fs::write(two.join("etc/a"), b"hello").expect("back");
        assert_eq!(release_digest(&two, &defaults()).expect("digest"), d);

        std::fs::set_permissions(
            two.join("etc/a"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("chmod");
        assert_ne!(release_digest(&two, &defaults()).expect("digest"), d);

        let mut other = defaults();
        other.env.insert("LANG".into(), "C.UTF-8".into());
        assert_ne!(release_digest(&one, &other).expect("digest"), d);
    }
}
