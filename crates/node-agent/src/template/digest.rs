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

#![deny(clippy::disallowed_methods)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use cove_confine::{Meta, Tree};
use rustix::fs::FileType;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::files::{confined, MAX_TREE_ENTRIES};
use super::guard::Guard;
use super::{BuildError, TemplateDefaults};

/// Time bound of one digest (about 1 s per 260 MiB here).
const DIGEST_TIME: Duration = Duration::from_secs(3600);

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
    let guard = Guard::new(
        CancellationToken::new(),
        "the release tree",
        u64::MAX,
        DIGEST_TIME,
    );
    digest_with(root, defaults, extra, &guard)
}

/// [`manifest_digest`] reading through `guard` (a cancelled build stops within a chunk). The
/// tree is walked through `cove_confine` (no link followed, files read only when regular, at
/// most [`MAX_TREE_ENTRIES`] entries).
///
/// # Errors
/// [`BuildError::Io`] when an entry cannot be read; `Cancelled`.
pub(crate) fn digest_with(
    root: &Path,
    defaults: &TemplateDefaults,
    extra: &[String],
    guard: &Guard,
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
    let tree = Tree::open(root).map_err(confined("digest"))?;
    let meta = tree.meta().map_err(confined("digest"))?;
    record(
        &mut h,
        &tree,
        None,
        &meta,
        b"/",
        guard,
        &mut Default::default(),
    )?;
    let mut seen = Seen::default();
    walk(&mut h, &tree, &mut Vec::new(), guard, &mut seen, 0)?;
    Ok(format!("sha256:{:x}", h.finalize()))
}

/// What a walk has seen: entries, and the content hash of each hard-linked file (read once,
/// however many names it has).
#[derive(Default)]
struct Seen {
    entries: u64,
    linked: std::collections::HashMap<(u64, u64), String>,
}

/// Records the children of `dir` (at `rel`, `/`-prefixed), depth first, siblings in byte order
/// of their names.
fn walk(
    h: &mut Sha256,
    dir: &Tree,
    rel: &mut Vec<u8>,
    guard: &Guard,
    seen: &mut Seen,
    depth: usize,
) -> Result<(), BuildError> {
    if depth > cove_confine::MAX_DEPTH {
        return Err(BuildError::Failed {
            step: "digest".into(),
            detail: "the tree is nested too deep".into(),
        });
    }
    let mut names: Vec<Vec<u8>> = dir
        .names()
        .map_err(confined("digest"))?
        .into_iter()
        .map(|(n, _)| n.to_bytes().to_vec())
        .collect();
    names.sort();
    for name in names {
        seen.entries += 1;
        if seen.entries > MAX_TREE_ENTRIES {
            return Err(BuildError::Failed {
                step: "digest".into(),
                detail: format!("the tree has more than {MAX_TREE_ENTRIES} entries"),
            });
        }
        guard.check()?;
        let at = Path::new(OsStr::from_bytes(&name));
        let Some(meta) = dir.stat(at).map_err(confined("digest"))? else {
            continue;
        };
        let len = rel.len();
        rel.push(b'/');
        rel.extend_from_slice(&name);
        record(h, dir, Some(at), &meta, rel, guard, &mut seen.linked)?;
        if meta.is_dir() {
            let sub = dir.open_dir(at).map_err(confined("digest"))?;
            walk(h, &sub, rel, guard, seen, depth + 1)?;
        }
        rel.truncate(len);
    }
    Ok(())
}

/// Records one entry: `name` in `dir` (`None`: `dir` itself).
fn record(
    h: &mut Sha256,
    dir: &Tree,
    name: Option<&Path>,
    meta: &Meta,
    rel: &[u8],
    guard: &Guard,
    linked: &mut std::collections::HashMap<(u64, u64), String>,
) -> Result<(), BuildError> {
    let at = name.unwrap_or(Path::new(""));
    let (kind, detail) = match meta.kind {
        FileType::Directory => ("d", String::new()),
        FileType::RegularFile => {
            let sha = match linked.get(&(meta.dev, meta.ino)) {
                Some(sha) => sha.clone(),
                None => {
                    let sha = file_sha256(dir, at, guard)?;
                    if meta.nlink > 1 {
                        linked.insert((meta.dev, meta.ino), sha.clone());
                    }
                    sha
                }
            };
            ("f", format!("{} {sha}", meta.size))
        }
        FileType::Symlink => {
            let target = dir.read_link(at).map_err(confined("digest"))?;
            (
                "l",
                String::from_utf8_lossy(target.as_os_str().as_bytes()).into_owned(),
            )
        }
        FileType::CharacterDevice => ("c", meta.rdev.to_string()),
        FileType::BlockDevice => ("b", meta.rdev.to_string()),
        FileType::Fifo => ("p", String::new()),
        _ => ("s", String::new()),
    };
    h.update(rel);
    h.update(
        format!(
            "\0{kind}\0{:o}\0{}\0{}\0{detail}\n",
            meta.mode, meta.uid, meta.gid
        )
        .as_bytes(),
    );
    Ok(())
}

fn file_sha256(dir: &Tree, at: &Path, guard: &Guard) -> Result<String, BuildError> {
    let f = dir.open_file(at).map_err(confined("digest"))?;
    guard.sha256_hex(&mut guard.reader(f), "digest: read a file")
}

#[cfg(test)]
// Tests plant, with plain path calls, what a tenant would.
#[allow(clippy::disallowed_methods)]
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

    #[test]
    fn hard_links_digest_like_copies_and_special_files_are_never_opened() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        tree(&one, b"hello");
        tree(&two, b"hello");
        std::fs::write(one.join("etc/c"), b"hello").expect("copy");
        std::fs::hard_link(two.join("etc/a"), two.join("etc/c")).expect("link");
        assert_eq!(
            release_digest(&one, &defaults()).expect("digest"),
            release_digest(&two, &defaults()).expect("digest")
        );
        // A FIFO in a tree is recorded, never opened (this would block).
        nix::unistd::mkfifo(&one.join("etc/fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        let began = std::time::Instant::now();
        release_digest(&one, &defaults()).expect("digest");
        assert!(began.elapsed() < std::time::Duration::from_secs(5));
    }
}
