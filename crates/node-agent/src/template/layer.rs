//! Applying a layer (a tar of changed files) onto a root filesystem tree, and unpacking a
//! build context, blocking.
//!
//! Two whiteout dialects are honoured: overlayfs's (a `0:0` character device deletes the path;
//! a directory with the `trusted.overlay.opaque=y` extended attribute, as a PAX
//! `SCHILY.xattr.` record, hides what lower layers had in it; this is how the runc runtime
//! packs a sandbox's files) and OCI's (`.wh.NAME` deletes `NAME`, `.wh..wh..opq` empties its
//! directory of lower entries).
//!
//! Archives are data, not instructions. Every access goes through `cove_confine` on the
//! tree's directory fd: no entry leaves the tree (`..` is refused; an entry's parent
//! directories resolve with `RESOLVE_IN_ROOT`, so a link `a -> /etc` met on the way names the
//! tree's own `etc`, never the host's), the entry itself is never followed (a link at its
//! name is replaced), a whiteout of `.`, `..` or of no name is refused, a hard link's target
//! is an entry of the tree resolved without following any link, a relative symlink that
//! climbs above the root is refused (symlinks are otherwise stored as data: the host never
//! follows them), and FIFOs, sockets and devices other than whiteouts are skipped in layers
//! (a sandbox gets its `/dev` from the runtime) and refused in build contexts. The archive is
//! read through a [`Guard`] (cancellation, byte bound, deadline) and holds at most
//! [`MAX_ENTRIES`] entries. Error messages name entries, never their content.
//!
//! The tree may be a hard-link copy of its parent (`cp -al`), whose file inodes are shared with
//! the parent's tree. So nothing here writes into an existing file: every file, symlink and
//! hard link is created under a temp name and renamed over its path, which gives it a new inode
//! and leaves the parent untouched. Directories of a hard-link copy are its own, so their mode
//! and owner are set in place. Extended attributes other than the opaque marker are skipped.

#![deny(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use cove_confine::Tree;
use tar::EntryType;

use super::files::{confined, shown};
use super::guard::Guard;
use super::BuildError;

/// OCI whiteout prefix and opaque marker.
const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// PAX records that mark an overlayfs opaque directory (see the runc runtime's packer).
const OPAQUE_PAX: &str = "SCHILY.xattr.trusted.overlay.opaque";
const OPAQUE_HEX_PAX: &str = "COVE.xattr-hex.trusted.overlay.opaque";

/// Most entries one layer or build context may hold.
pub(crate) const MAX_ENTRIES: u64 = 4_000_000;
/// Most bytes one layer may unpack (a gzip bomb or an endless stream stops here).
pub(crate) const MAX_LAYER_BYTES: u64 = 64 << 30;
/// Longest entry path, in bytes (Linux's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

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

/// What is unpacked: an image or step layer (whiteouts honoured, owners kept, links in the
/// tree followed inside it to place entries, devices and FIFOs skipped) or a tenant's build
/// context (names taken literally, owners root, no entry below a link, FIFOs, sockets and
/// devices refused by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpack {
    /// An image layer or a `RUN` step's changed files.
    Layer,
    /// A build context.
    Context,
}

impl Unpack {
    fn step(self) -> &'static str {
        match self {
            Unpack::Layer => "apply layer",
            Unpack::Context => "context",
        }
    }

    fn bad(self, detail: impl Into<String>) -> BuildError {
        BuildError::Failed {
            step: self.step().into(),
            detail: detail.into(),
        }
    }
}

/// A relative path made of normal components only: `./a/b` → `a/b`, `/a` → `a`; `..` is an
/// error (a layer or context entry trying to leave its tree).
pub(crate) fn clean_relative(path: &Path) -> Result<PathBuf, BuildError> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir | Component::RootDir => {}
            _ => return Err(Unpack::Layer.bad(format!("entry {} leaves its tree", shown(path)))),
        }
    }
    Ok(out)
}

/// The directory `rel` of `tree`, made (0755) where missing. With `follow`, symlinks on the
/// way resolve inside the tree as the sandbox would see them (`Tree::open_dir_in_root`);
/// without, a link on the way is an error.
pub(crate) fn dir_of(
    tree: &Tree,
    rel: &Path,
    follow: bool,
    step: &str,
) -> Result<Tree, BuildError> {
    if !follow {
        return tree.create_dir_all(rel, 0o755).map_err(confined(step));
    }
    match tree.open_dir_in_root(rel) {
        Ok(dir) => return Ok(dir),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(confined(step)(e)),
    }
    let mut at = tree.open_dir(Path::new("")).map_err(confined(step))?;
    let mut prefix = PathBuf::new();
    for part in rel.components() {
        prefix.push(part);
        at = match tree.open_dir_in_root(&prefix) {
            Ok(dir) => dir,
            Err(e) if e.is_not_found() => {
                at.create_dir_all(Path::new(part.as_os_str()), 0o755)
                    .map_err(confined(step))?;
                tree.open_dir_in_root(&prefix).map_err(confined(step))?
            }
            Err(e) => return Err(confined(step)(e)),
        };
    }
    Ok(at)
}

/// Whether the relative symlink target `target` of an entry in directory `parent` climbs
/// above the root (absolute targets are data, resolved only in the sandbox).
fn climbs_out(parent: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth = parent.components().count() as i64;
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Applies the layer tar `input` onto the tree at `root` (see the module docs), reading it
/// through `guard` (cancellation, byte bound, deadline).
///
/// # Errors
/// [`BuildError::Failed`] for an entry that leaves the tree, a whiteout of no name, a link
/// out of the tree, too many entries or an unreadable archive (messages name the entry, never
/// content), [`BuildError::Cancelled`], [`BuildError::Io`] when the tree cannot be written.
pub(crate) fn apply_layer<R: Read>(
    root: &Path,
    input: R,
    guard: &Guard,
) -> Result<Applied, BuildError> {
    let tree = Tree::open(root).map_err(confined("apply layer"))?;
    unpack(&tree, input, Unpack::Layer, guard)
}

/// Unpacks the tar `input` into `tree` as `kind` says, reading it through `guard`.
pub(crate) fn unpack<R: Read>(
    tree: &Tree,
    input: R,
    kind: Unpack,
    guard: &Guard,
) -> Result<Applied, BuildError> {
    let mut archive = tar::Archive::new(guard.reader(input));
    let mut applied = Applied::default();
    // Entries this layer wrote, by directory identity and name: an opaque directory hides
    // only what lower layers had.
    let mut written: HashSet<(u64, u64, OsString)> = HashSet::new();
    let mut seen = 0u64;
    let unreadable = |seen: u64| {
        kind.bad(format!(
            "the archive is not a readable tar (after {seen} entries)"
        ))
    };
    let entries = archive.entries().map_err(|_| guard.or(unreadable(0)))?;
    for entry in entries {
        let mut entry = entry.map_err(|_| guard.or(unreadable(seen)))?;
        seen += 1;
        if seen > MAX_ENTRIES {
            return Err(kind.bad(format!("the archive has more than {MAX_ENTRIES} entries")));
        }
        guard.check()?;
        let raw = entry.path().map_err(|_| unreadable(seen))?.into_owned();
        if raw.as_os_str().len() > MAX_PATH_BYTES {
            return Err(kind.bad(format!("entry {} has too long a path", shown(&raw))));
        }
        let rel = clean_relative(&raw)
            .map_err(|_| kind.bad(format!("entry {} leaves its tree", shown(&raw))))?;
        let Some(name) = rel.file_name().map(OsStr::to_os_string) else {
            continue; // the root itself
        };
        let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        let name_str = name.to_string_lossy();
        let header = entry.header();
        let entry_kind = header.entry_type();
        let whiteout_device = entry_kind == EntryType::Char
            && header.device_major().ok().flatten() == Some(0)
            && header.device_minor().ok().flatten() == Some(0);
        if kind == Unpack::Layer && (name_str.starts_with(WHITEOUT_PREFIX) || whiteout_device) {
            let hidden: &OsStr = if whiteout_device {
                &name
            } else if name_str == OPAQUE_MARKER {
                OsStr::new("")
            } else {
                OsStr::from_bytes(&name.as_bytes()[WHITEOUT_PREFIX.len()..])
            };
            if !whiteout_device
                && name_str != OPAQUE_MARKER
                && matches!(hidden.as_bytes(), b"" | b"." | b"..")
            {
                return Err(kind.bad(format!("entry {} is a whiteout of no name", shown(&raw))));
            }
            let dir = match tree.open_dir_in_root(&parent_rel) {
                Ok(dir) => dir,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(confined(kind.step())(e)),
            };
            if name_str == OPAQUE_MARKER && !whiteout_device {
                clear_lower(&dir, &written)?;
            } else {
                dir.remove(Path::new(hidden))
                    .map_err(confined(kind.step()))?;
                applied.whiteouts += 1;
            }
            continue;
        }
        let mode = header.mode().unwrap_or(0o644) & 0o7777;
        let owner = match kind {
            Unpack::Layer => (
                header.uid().unwrap_or(0) as u32,
                header.gid().unwrap_or(0) as u32,
            ),
            Unpack::Context => (0, 0),
        };
        match entry_kind {
            EntryType::Directory
            | EntryType::Regular
            | EntryType::Continuous
            | EntryType::Symlink
            | EntryType::Link => {}
            _ if kind == Unpack::Context => {
                return Err(kind.bad(format!(
                    "entry {} is a FIFO, socket or device: a build context holds files, \
                     directories and links only",
                    shown(&raw)
                )))
            }
            _ => {
                applied.skipped += 1;
                continue;
            }
        }
        let dir = dir_of(tree, &parent_rel, kind == Unpack::Layer, kind.step())?;
        let at = Path::new(&name);
        match entry_kind {
            EntryType::Directory => {
                let opaque = is_opaque(&mut entry);
                match dir.stat(at).map_err(confined(kind.step()))? {
                    Some(m) if m.is_dir() => {
                        if opaque {
                            let sub = dir.open_dir(at).map_err(confined(kind.step()))?;
                            clear_lower(&sub, &written)?;
                        }
                    }
                    other => {
                        if other.is_some() {
                            dir.remove(at).map_err(confined(kind.step()))?;
                        }
                        dir.create_dir_all(at, 0o755)
                            .map_err(confined(kind.step()))?;
                    }
                }
                dir.chown(at, Some(owner.0), Some(owner.1))
                    .map_err(confined(kind.step()))?;
                dir.chmod(at, mode).map_err(confined(kind.step()))?;
            }
            EntryType::Regular | EntryType::Continuous => {
                dir.replace_file_with(at, mode, Some(owner), &mut |f| {
                    std::io::copy(&mut entry, f).map(drop)
                })
                .map_err(|e| guard.or(confined(kind.step())(e)))?;
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|_| unreadable(seen))?
                    .filter(|t| !t.as_os_str().is_empty())
                    .ok_or_else(|| kind.bad(format!("symlink {} has no target", shown(&raw))))?
                    .into_owned();
                if climbs_out(&parent_rel, &target) {
                    return Err(kind.bad(format!("symlink {} points above the root", shown(&raw))));
                }
                dir.replace_symlink(at, &target, Some(owner))
                    .map_err(confined(kind.step()))?;
            }
            _ => {
                // A hard link: its target is an entry of this tree, resolved without
                // following any link.
                let target = entry
                    .link_name()
                    .map_err(|_| unreadable(seen))?
                    .ok_or_else(|| kind.bad(format!("hard link {} has no target", shown(&raw))))?
                    .into_owned();
                let target = clean_relative(&target).map_err(|_| {
                    kind.bad(format!("hard link {} points out of the tree", shown(&raw)))
                })?;
                tree.replace_hard_link(&target, &rel)
                    .map_err(confined(kind.step()))?;
            }
        }
        let id = dir.meta().map_err(confined(kind.step()))?;
        written.insert((id.dev, id.ino, name));
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
fn clear_lower(dir: &Tree, written: &HashSet<(u64, u64, OsString)>) -> Result<(), BuildError> {
    let id = dir.meta().map_err(confined("apply layer"))?;
    for (name, _) in dir.names().map_err(confined("apply layer"))? {
        let name = OsStr::from_bytes(name.to_bytes()).to_os_string();
        if !written.contains(&(id.dev, id.ino, name.clone())) {
            dir.remove(Path::new(&name))
                .map_err(confined("apply layer"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
// Tests plant, with plain path calls, what a tenant would.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

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
        let applied = apply_layer(&tree, layer.as_slice(), &guard()).expect("apply");
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
        assert!(apply_layer(tmp.path(), layer.as_slice(), &guard()).is_err());
        assert!(!tmp.path().parent().expect("parent").join("evil").exists());
    }

    fn guard() -> Guard {
        Guard::new(
            CancellationToken::new(),
            "the layer",
            1 << 30,
            std::time::Duration::from_secs(60),
        )
    }

    /// A tar entry written raw (names `append_data` would refuse: `..`, whiteouts of `.`).
    fn raw(b: &mut tar::Builder<Vec<u8>>, name: &[u8], kind: EntryType, link: &[u8], data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_cksum();
        b.append(&h, data).expect("append");
    }

    /// A tree `<tmp>/sandbox/root` with a host canary file and directory beside it.
    struct Lab {
        tmp: tempfile::TempDir,
    }

    impl Lab {
        fn new() -> Lab {
            let tmp = tempfile::tempdir().expect("tmp");
            std::fs::create_dir_all(tmp.path().join("sandbox/root/etc")).expect("dirs");
            std::fs::create_dir_all(tmp.path().join("host/dir")).expect("dirs");
            std::fs::write(tmp.path().join("host/secret"), b"host secret").expect("canary");
            std::fs::write(tmp.path().join("sandbox/keep"), b"keep").expect("canary");
            Lab { tmp }
        }
        fn root(&self) -> PathBuf {
            self.tmp.path().join("sandbox/root")
        }
        fn host(&self) -> PathBuf {
            self.tmp.path().join("host")
        }
        fn intact(&self) {
            let t = self.tmp.path();
            assert_eq!(
                std::fs::read(t.join("host/secret")).expect("canary"),
                b"host secret"
            );
            assert_eq!(
                std::fs::read_dir(t.join("host/dir")).expect("ls").count(),
                0
            );
            assert_eq!(std::fs::read_dir(t.join("host")).expect("ls").count(), 2);
            assert_eq!(
                std::fs::read(t.join("sandbox/keep")).expect("canary"),
                b"keep"
            );
            assert!(self.root().is_dir(), "the root itself is still there");
        }
    }

    #[test]
    fn whiteouts_of_dot_dotdot_and_nothing_are_refused_and_delete_nothing_outside() {
        for name in [
            &b".wh.."[..],
            b".wh...",
            b".wh.",
            b"etc/.wh..",
            b"etc/.wh...",
            b"./.wh...",
        ] {
            let lab = Lab::new();
            let mut b = tar::Builder::new(Vec::new());
            raw(&mut b, name, EntryType::Regular, b"", b"");
            let layer = b.into_inner().expect("tar");
            let err = apply_layer(&lab.root(), layer.as_slice(), &guard()).expect_err("refused");
            assert!(err.to_string().contains("whiteout of no name"), "{err}");
            lab.intact();
            assert!(lab.root().join("etc").is_dir());
        }
        // An opaque marker in an odd place clears only what is below it, inside the tree.
        let lab = Lab::new();
        let mut b = tar::Builder::new(Vec::new());
        raw(&mut b, b".wh..wh..opq", EntryType::Regular, b"", b"");
        let layer = b.into_inner().expect("tar");
        apply_layer(&lab.root(), layer.as_slice(), &guard()).expect("opaque root");
        lab.intact();
        assert_eq!(std::fs::read_dir(lab.root()).expect("ls").count(), 0);
    }

    #[test]
    fn links_planted_by_a_layer_never_reach_the_host() {
        let lab = Lab::new();
        let host = lab.host();
        let mut b = tar::Builder::new(Vec::new());
        // `a -> /etc`, then `a/passwd`: lands in the tree's own `etc`.
        raw(&mut b, b"a", EntryType::Symlink, b"/etc", b"");
        raw(&mut b, b"a/passwd", EntryType::Regular, b"", b"pwned");
        // A link planted at a name, then a file written at that name: the link is replaced.
        let secret = host.join("secret");
        raw(
            &mut b,
            b"etc/shadow",
            EntryType::Symlink,
            secret.as_os_str().as_bytes(),
            b"",
        );
        raw(&mut b, b"etc/shadow", EntryType::Regular, b"", b"mine");
        // Whiteouts through a planted link stay inside too.
        raw(
            &mut b,
            b"h",
            EntryType::Symlink,
            host.as_os_str().as_bytes(),
            b"",
        );
        raw(&mut b, b"h/.wh.secret", EntryType::Regular, b"", b"");
        raw(&mut b, b"h/.wh.dir", EntryType::Regular, b"", b"");
        // FIFOs and devices are skipped, never made.
        raw(&mut b, b"fifo", EntryType::Fifo, b"", b"");
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::Char);
        h.set_device_major(1).expect("major");
        h.set_device_minor(5).expect("minor");
        h.set_size(0);
        h.set_cksum();
        b.append_data(&mut h, "zero", &b""[..]).expect("append");
        let layer = b.into_inner().expect("tar");
        let applied = apply_layer(&lab.root(), layer.as_slice(), &guard()).expect("apply");
        assert_eq!(applied.skipped, 2);
        lab.intact();
        assert_eq!(
            std::fs::read(lab.root().join("etc/passwd")).expect("inside"),
            b"pwned"
        );
        assert_ne!(std::fs::read("/etc/passwd").expect("host"), b"pwned");
        assert_eq!(
            std::fs::read(lab.root().join("etc/shadow")).expect("f"),
            b"mine"
        );
        assert!(!lab.root().join("fifo").exists() && !lab.root().join("zero").exists());

        // A link to a host directory that does not exist in the tree: refused, nothing made.
        let mut b = tar::Builder::new(Vec::new());
        let abs = host.join("dir");
        raw(
            &mut b,
            b"d",
            EntryType::Symlink,
            abs.as_os_str().as_bytes(),
            b"",
        );
        raw(&mut b, b"d/x", EntryType::Regular, b"", b"pwned");
        let layer = b.into_inner().expect("tar");
        assert!(apply_layer(&lab.root(), layer.as_slice(), &guard()).is_err());
        lab.intact();

        // Hard links out of the tree, and symlinks that climb above the root, are refused.
        for (name, kind, link) in [
            (&b"x"[..], EntryType::Link, secret.as_os_str().as_bytes()),
            (b"x", EntryType::Link, b"../../host/secret"),
            (b"etc/x", EntryType::Symlink, b"../../host/secret"),
        ] {
            let mut b = tar::Builder::new(Vec::new());
            raw(&mut b, name, kind, link, b"");
            let layer = b.into_inner().expect("tar");
            assert!(apply_layer(&lab.root(), layer.as_slice(), &guard()).is_err());
            lab.intact();
        }
        // Relative links that stay inside are data.
        let mut b = tar::Builder::new(Vec::new());
        raw(
            &mut b,
            b"etc/mtab",
            EntryType::Symlink,
            b"../proc/self/mounts",
            b"",
        );
        let layer = b.into_inner().expect("tar");
        apply_layer(&lab.root(), layer.as_slice(), &guard()).expect("inside");
    }

    #[test]
    fn errors_name_entries_never_bytes_and_cancel_stops_the_work() {
        let lab = Lab::new();
        let junk = b"SECRET-CONTENT-0123456789 not a tar header at all, just host bytes".repeat(20);
        let err = apply_layer(&lab.root(), junk.as_slice(), &guard()).expect_err("junk");
        assert!(!err.to_string().contains("SECRET"), "{err}");

        // An endless layer stops when the build is cancelled.
        let cancel = CancellationToken::new();
        let g = Guard::new(
            cancel.clone(),
            "the layer",
            u64::MAX,
            std::time::Duration::from_secs(600),
        );
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::Regular);
        h.set_size(1 << 40);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "big", &b""[..]).ok();
        let head = b.into_inner().unwrap_or_default();
        let header = head[..512].to_vec();
        let endless = std::io::Read::chain(std::io::Cursor::new(header), std::io::repeat(0));
        let root = lab.root();
        let worker = std::thread::spawn(move || apply_layer(&root, endless, &g));
        std::thread::sleep(std::time::Duration::from_millis(200));
        let began = std::time::Instant::now();
        cancel.cancel();
        let result = worker.join().expect("join");
        assert!(matches!(result, Err(BuildError::Cancelled)), "{result:?}");
        assert!(began.elapsed() < std::time::Duration::from_secs(1));

        // And a byte bound ends it without a cancel.
        let g = Guard::new(
            CancellationToken::new(),
            "the layer",
            1 << 20,
            std::time::Duration::from_secs(600),
        );
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::Regular);
        h.set_size(1 << 30);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "big", &b""[..]).ok();
        let head = b.into_inner().unwrap_or_default();
        let endless = std::io::Read::chain(
            std::io::Cursor::new(head[..512].to_vec()),
            std::io::repeat(0),
        );
        let err = apply_layer(&lab.root(), endless, &g).expect_err("bounded");
        assert!(err.to_string().contains("larger than"), "{err}");
    }
}
