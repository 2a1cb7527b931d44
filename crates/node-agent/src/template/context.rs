//! The build context of a file build: unpacked from the uploaded tar, hashed per `COPY`, and
//! copied into a tree (blocking).
//!
//! The context is a tenant's tree and the release tree is made from it, so every access goes
//! through `cove_confine` on directory fds. Unpacking takes names literally (no entry below a
//! link; FIFOs, sockets and devices are refused by name, see `layer.rs`). A source's parent
//! directories, and a destination, resolve inside their tree as the sandbox would see them
//! (`RESOLVE_IN_ROOT`: `COPY x /bin/` where `/bin -> usr/bin` lands in `usr/bin`, a link to
//! `/etc` names the tree's own `etc`); the source entry itself and everything below it is never
//! followed: a symlink is copied as a symlink, a file is read only when it is a regular file
//! (opened non-blocking), and anything else is an error naming its path. Copied entries are
//! owned by root, keep their mode, and are created under a temp name and renamed into place
//! (the tree may share inodes with its parent, see `layer.rs`). A source directory's contents
//! are copied, not the directory. Reads go through the build's [`Guard`]; a `COPY` visits at
//! most [`layer::MAX_ENTRIES`] entries.

#![deny(clippy::disallowed_methods)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cove_confine::{Meta, Tree};
use sha2::{Digest, Sha256};

use super::files::{confined, io, shown};
use super::guard::Guard;
use super::layer::{self, clean_relative, dir_of, Unpack};
use super::BuildError;

const STEP: &str = "context";

fn failed(detail: impl Into<String>) -> BuildError {
    BuildError::Failed {
        step: STEP.into(),
        detail: detail.into(),
    }
}

/// Unpacks the context tar into `dir` (created), keeping modes; owners become root. An empty
/// archive is an empty context.
///
/// # Errors
/// [`BuildError::Failed`] for an unreadable archive, an entry leaving `dir`, an entry below a
/// link, or a FIFO, socket or device (named); `Cancelled`.
pub(crate) fn unpack(archive: &[u8], dir: &Path, guard: &Guard) -> Result<(), BuildError> {
    // The node's own directory under its work dir (not yet holding tenant data).
    #[allow(clippy::disallowed_methods)]
    std::fs::create_dir_all(dir).map_err(io(dir, "create"))?;
    if archive.is_empty() {
        return Ok(());
    }
    let tree = Tree::open(dir).map_err(confined(STEP))?;
    layer::unpack(&tree, archive, Unpack::Context, guard).map(drop)
}

/// The directory holding the context entry `src` (resolved inside the context) and the
/// entry's name; `None` for the context root itself (`.`).
fn source(context: &Tree, src: &str) -> Result<(Tree, Option<PathBuf>), BuildError> {
    let rel = clean_relative(Path::new(src)).map_err(|_| {
        failed(format!(
            "{}: leaves the build context",
            shown(Path::new(src))
        ))
    })?;
    let Some(name) = rel.file_name().map(PathBuf::from) else {
        return Ok((
            context.open_dir(Path::new("")).map_err(confined(STEP))?,
            None,
        ));
    };
    let parent = rel.parent().unwrap_or(Path::new(""));
    let missing = || {
        failed(format!(
            "{}: no such file in the build context",
            shown(Path::new(src))
        ))
    };
    match context.open_dir_in_root(parent) {
        Ok(dir) => Ok((dir, Some(name))),
        Err(e) if e.is_not_found() => Err(missing()),
        Err(e) => Err(confined(STEP)(e)),
    }
}

/// What the entry `name` of `dir` is (`None` for `dir` itself), or a "no such file" error.
fn stat(dir: &Tree, name: Option<&Path>, src: &str) -> Result<Meta, BuildError> {
    let meta = match name {
        Some(n) => dir.stat(n).map_err(confined(STEP))?,
        None => Some(dir.meta().map_err(confined(STEP))?),
    };
    meta.ok_or_else(|| {
        failed(format!(
            "{}: no such file in the build context",
            shown(Path::new(src))
        ))
    })
}

/// Entries visited by one hash or copy, against [`layer::MAX_ENTRIES`].
struct Count(u64);

impl Count {
    fn one(&mut self) -> Result<(), BuildError> {
        self.0 += 1;
        if self.0 > layer::MAX_ENTRIES {
            return Err(failed(format!(
                "a COPY reads more than {} entries",
                layer::MAX_ENTRIES
            )));
        }
        Ok(())
    }
}

/// Hex SHA-256 of the context entries `sources` name: path, kind, mode and content (or link
/// target) of every entry under each, in order. A source that does not exist is an error
/// naming it.
pub(crate) fn hash_sources(
    context: &Path,
    sources: &[String],
    guard: &Guard,
) -> Result<String, BuildError> {
    let ctx = Tree::open(context).map_err(confined(STEP))?;
    let mut h = Sha256::new();
    let mut count = Count(0);
    for src in sources {
        let (dir, name) = source(&ctx, src)?;
        stat(&dir, name.as_deref(), src)?;
        h.update(src.as_bytes());
        h.update(b"\0");
        hash_entry(
            &mut h,
            &dir,
            name.as_deref(),
            Path::new(""),
            guard,
            &mut count,
            0,
        )?;
    }
    Ok(format!("{:x}", h.finalize()))
}

#[allow(clippy::too_many_arguments)]
fn hash_entry(
    h: &mut Sha256,
    dir: &Tree,
    name: Option<&Path>,
    rel: &Path,
    guard: &Guard,
    count: &mut Count,
    depth: usize,
) -> Result<(), BuildError> {
    count.one()?;
    guard.check()?;
    if depth > cove_confine::MAX_DEPTH {
        return Err(failed("the build context is nested too deep"));
    }
    let meta = stat(dir, name, &rel.to_string_lossy())?;
    h.update(rel.as_os_str().as_bytes());
    h.update(format!("\0{:o}\0", meta.mode | kind_bits(&meta)).as_bytes());
    let at = name.unwrap_or(Path::new(""));
    if meta.is_dir() {
        let sub = dir.open_dir(at).map_err(confined(STEP))?;
        let mut names: Vec<Vec<u8>> = sub
            .names()
            .map_err(confined(STEP))?
            .into_iter()
            .map(|(n, _)| n.to_bytes().to_vec())
            .collect();
        names.sort();
        for n in names {
            let n = Path::new(OsStr::from_bytes(&n));
            hash_entry(h, &sub, Some(n), &rel.join(n), guard, count, depth + 1)?;
        }
    } else if meta.is_symlink() {
        let t = dir.read_link(at).map_err(confined(STEP))?;
        h.update(t.as_os_str().as_bytes());
    } else if meta.is_file() {
        let f = dir.open_file(at).map_err(confined(STEP))?;
        let mut r = guard.reader(f);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = r.read(&mut buf).map_err(|source| {
                guard.or(BuildError::Io {
                    context: format!("read {}", shown(rel)),
                    source,
                })
            })?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    } else {
        return Err(special(rel));
    }
    h.update(b"\n");
    Ok(())
}

/// The file-type bits of `stat`'s mode (the old hash took them from the full mode).
fn kind_bits(meta: &Meta) -> u32 {
    if meta.is_dir() {
        0o040000
    } else if meta.is_symlink() {
        0o120000
    } else {
        0o100000
    }
}

fn special(rel: &Path) -> BuildError {
    failed(format!(
        "{} is a FIFO, socket or device: COPY takes files, directories and links only",
        shown(rel)
    ))
}

/// Owner and mode of the entries one `COPY` writes: root's and their own mode, unless
/// `--chown`/`--chmod` say otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyAttrs {
    /// Owner (uid, gid) of every copied entry.
    pub owner: (u32, u32),
    /// Mode of every copied file and directory (`None`: the source's).
    pub mode: Option<u32>,
}

/// Longest `/etc/passwd` or `/etc/group` read to resolve a `--chown` name.
const MAX_ACCOUNTS_BYTES: u64 = 4 * 1024 * 1024;

/// The (uid, gid) of `--chown=USER[:GROUP]` in the tree at `tree`: numbers as they are, names
/// from the tree's own `etc/passwd` and `etc/group` (read confined, bounded); a user without a
/// group gets the user's primary group (or gid = uid for a number, as Docker does).
pub(crate) fn resolve_owner(tree: &Path, spec: &str) -> Result<(u32, u32), BuildError> {
    let tree = Tree::open(tree).map_err(confined("chown"))?;
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let bad = |what: &str, name: &str| {
        failed(format!(
            "COPY --chown: no {what} {name:?} in the tree's /etc/{}",
            if what == "user" { "passwd" } else { "group" }
        ))
    };
    let accounts = |file: &str| -> Result<String, BuildError> {
        match tree.read_file(Path::new("etc").join(file).as_path(), MAX_ACCOUNTS_BYTES) {
            Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Err(e) if e.is_not_found() => Ok(String::new()),
            Err(e) => Err(confined("chown")(e)),
        }
    };
    // `name:x:uid:gid:...` lines; the fields at 2 and 3.
    let find = |text: &str, name: &str| -> Option<(u32, Option<u32>)> {
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name) && f.len() >= 3)
                .then(|| f[2].parse().ok())
                .flatten()
                .map(|id| (id, f.get(3).and_then(|g| g.parse().ok())))
        })
    };
    let (uid, primary) = if user.is_empty() {
        (0, None)
    } else if let Ok(n) = user.parse::<u32>() {
        (n, Some(n))
    } else {
        let passwd = accounts("passwd")?;
        let (uid, gid) = find(&passwd, user).ok_or_else(|| bad("user", user))?;
        (uid, gid)
    };
    let gid = match group {
        None | Some("") => primary.unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                let groups = accounts("group")?;
                find(&groups, g).ok_or_else(|| bad("group", g))?.0
            }
        },
    };
    Ok((uid, gid))
}

/// Copies the context entries `sources` to `dest` (absolute in the tree): into `dest` as a
/// directory when it ends in `/`, there are several sources, a source is a directory, or it is
/// a directory already; onto `dest` as a file otherwise. `context` is the unpacked context,
/// or an earlier stage's tree for `COPY --from` (as hostile: the same confined reads).
pub(crate) fn copy_into(
    tree: &Path,
    context: &Path,
    sources: &[String],
    dest: &str,
    attrs: CopyAttrs,
    guard: &Guard,
) -> Result<(), BuildError> {
    let tree = Tree::open(tree).map_err(confined(STEP))?;
    let ctx = Tree::open(context).map_err(confined(STEP))?;
    let dest_rel = clean_relative(Path::new(dest)).map_err(|_| {
        failed(format!(
            "COPY destination {} leaves the tree",
            shown(Path::new(dest))
        ))
    })?;
    let as_dir = dest.ends_with('/')
        || sources.len() > 1
        || dest_rel.as_os_str().is_empty()
        || tree.open_dir_in_root(&dest_rel).is_ok();
    let mut count = Count(0);
    for src in sources {
        let (src_dir, name) = source(&ctx, src)?;
        let meta = stat(&src_dir, name.as_deref(), src)?;
        let shown_src = PathBuf::from(src);
        if meta.is_dir() {
            let to = dir_of(&tree, &dest_rel, true, STEP)?;
            let from = src_dir
                .open_dir(name.as_deref().unwrap_or(Path::new("")))
                .map_err(confined(STEP))?;
            copy_children(&from, &to, &shown_src, attrs, guard, &mut count, 0)?;
        } else if as_dir {
            let to = dir_of(&tree, &dest_rel, true, STEP)?;
            let n = name.as_deref().unwrap_or(Path::new(""));
            copy_entry(&src_dir, n, &to, n, &shown_src, attrs, guard, &mut count, 0)?;
        } else {
            let parent = dest_rel.parent().unwrap_or(Path::new(""));
            let to = dir_of(&tree, parent, true, STEP)?;
            let dest_name = dest_rel.file_name().map(Path::new).unwrap_or(Path::new(""));
            let n = name.as_deref().unwrap_or(Path::new(""));
            copy_entry(
                &src_dir, n, &to, dest_name, &shown_src, attrs, guard, &mut count, 0,
            )?;
        }
    }
    Ok(())
}

/// `mkdir -p` of the absolute path `dir` inside the tree at `tree` (links on the way resolve
/// inside it); new directories are 0755 root.
pub(crate) fn mkdir_in(tree: &Path, dir: &str) -> Result<(), BuildError> {
    let tree = Tree::open(tree).map_err(confined("workdir"))?;
    let rel = clean_relative(Path::new(dir))
        .map_err(|_| failed(format!("WORKDIR {} leaves the tree", shown(Path::new(dir)))))?;
    dir_of(&tree, &rel, true, "workdir").map(drop)
}

fn copy_children(
    src: &Tree,
    dst: &Tree,
    shown_src: &Path,
    attrs: CopyAttrs,
    guard: &Guard,
    count: &mut Count,
    depth: usize,
) -> Result<(), BuildError> {
    for (name, _) in src.names().map_err(confined(STEP))? {
        let n = Path::new(OsStr::from_bytes(name.to_bytes()));
        copy_entry(
            src,
            n,
            dst,
            n,
            &shown_src.join(n),
            attrs,
            guard,
            count,
            depth + 1,
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn copy_entry(
    src: &Tree,
    name: &Path,
    dst: &Tree,
    dst_name: &Path,
    shown_src: &Path,
    attrs: CopyAttrs,
    guard: &Guard,
    count: &mut Count,
    depth: usize,
) -> Result<(), BuildError> {
    count.one()?;
    guard.check()?;
    if depth > cove_confine::MAX_DEPTH {
        return Err(failed("the build context is nested too deep"));
    }
    let meta = src.stat(name).map_err(confined(STEP))?.ok_or_else(|| {
        failed(format!(
            "{}: no such file in the build context",
            shown(shown_src)
        ))
    })?;
    let root = Some(attrs.owner);
    let (uid, gid) = attrs.owner;
    let mode = attrs.mode.unwrap_or(meta.mode);
    if meta.is_dir() {
        if !dst
            .stat(dst_name)
            .map_err(confined(STEP))?
            .is_some_and(|m| m.is_dir())
        {
            dst.remove(dst_name).map_err(confined(STEP))?;
            dst.create_dir_all(dst_name, 0o755)
                .map_err(confined(STEP))?;
        }
        dst.chown(dst_name, Some(uid), Some(gid))
            .map_err(confined(STEP))?;
        dst.chmod(dst_name, mode).map_err(confined(STEP))?;
        let from = src.open_dir(name).map_err(confined(STEP))?;
        let to = dst.open_dir(dst_name).map_err(confined(STEP))?;
        return copy_children(&from, &to, shown_src, attrs, guard, count, depth);
    }
    if meta.is_symlink() {
        let target = src.read_link(name).map_err(confined(STEP))?;
        return dst
            .replace_symlink(dst_name, &target, root)
            .map_err(confined(STEP));
    }
    if !meta.is_file() {
        return Err(special(shown_src));
    }
    let file = src.open_file(name).map_err(confined(STEP))?;
    let mut from = guard.reader(file);
    dst.replace_file_with(dst_name, mode, root, &mut |f| {
        std::io::copy(&mut from, f).map(drop)
    })
    .map_err(|e| guard.or(confined(STEP)(e)))
}

#[cfg(test)]
// Tests plant, with plain path calls, what a tenant would.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    fn guard() -> Guard {
        Guard::new(
            CancellationToken::new(),
            "the context",
            1 << 30,
            std::time::Duration::from_secs(60),
        )
    }

    #[test]
    fn copies_files_and_directories_and_hashes_what_it_reads() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (ctx, tree) = (tmp.path().join("ctx"), tmp.path().join("tree"));
        std::fs::create_dir_all(ctx.join("dir/sub")).expect("dirs");
        std::fs::create_dir_all(tree.join("opt")).expect("dirs");
        std::fs::write(ctx.join("a.txt"), b"a").expect("file");
        std::fs::write(ctx.join("dir/sub/b"), b"b").expect("file");
        let g = guard();

        copy_into(
            &tree,
            &ctx,
            &["a.txt".into()],
            "/opt/renamed",
            CopyAttrs::default(),
            &g,
        )
        .expect("file");
        copy_into(
            &tree,
            &ctx,
            &["dir".into()],
            "/srv/",
            CopyAttrs::default(),
            &g,
        )
        .expect("dir");
        assert_eq!(std::fs::read(tree.join("opt/renamed")).expect("f"), b"a");
        assert_eq!(std::fs::read(tree.join("srv/sub/b")).expect("f"), b"b");

        let h1 = hash_sources(&ctx, &["dir".into()], &g).expect("hash");
        assert_eq!(h1, hash_sources(&ctx, &["dir".into()], &g).expect("hash"));
        std::fs::write(ctx.join("a.txt"), b"changed").expect("file");
        assert_eq!(h1, hash_sources(&ctx, &["dir".into()], &g).expect("hash"));
        std::fs::write(ctx.join("dir/sub/b"), b"changed").expect("file");
        assert_ne!(h1, hash_sources(&ctx, &["dir".into()], &g).expect("hash"));
        assert!(hash_sources(&ctx, &["missing".into()], &g).is_err());
    }

    #[test]
    fn chown_and_chmod_apply_to_every_copied_entry_and_names_resolve_in_the_tree() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().expect("tmp");
        let (ctx, tree) = (tmp.path().join("ctx"), tmp.path().join("tree"));
        std::fs::create_dir_all(ctx.join("dir/sub")).expect("dirs");
        std::fs::create_dir_all(tree.join("etc")).expect("dirs");
        std::fs::write(ctx.join("dir/sub/f"), b"f").expect("file");
        std::fs::write(
            tree.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1234:1300::/home/app:/bin/sh\n",
        )
        .expect("passwd");
        std::fs::write(tree.join("etc/group"), "root:x:0:\nstaff:x:50:\n").expect("group");
        assert_eq!(resolve_owner(&tree, "app").expect("user"), (1234, 1300));
        assert_eq!(resolve_owner(&tree, "app:staff").expect("both"), (1234, 50));
        assert_eq!(resolve_owner(&tree, "1000").expect("number"), (1000, 1000));
        assert_eq!(resolve_owner(&tree, "1000:7").expect("numbers"), (1000, 7));
        let e = resolve_owner(&tree, "nobody-here").expect_err("unknown");
        assert!(e.to_string().contains("nobody-here"), "{e}");
        assert!(resolve_owner(&tree, "app:nogroup").is_err());
        // A tree whose /etc is a link to the host's: resolved inside the tree, never followed.
        let other = tmp.path().join("other");
        std::fs::create_dir_all(&other).expect("dirs");
        std::os::unix::fs::symlink("/etc", other.join("etc")).expect("symlink");
        assert!(resolve_owner(&other, "root").is_err());

        let attrs = CopyAttrs {
            owner: (1234, 50),
            mode: Some(0o750),
        };
        copy_into(&tree, &ctx, &["dir".into()], "/app/", attrs, &guard()).expect("copy");
        for p in ["app/sub", "app/sub/f"] {
            let m = std::fs::metadata(tree.join(p)).expect("meta");
            assert_eq!((m.uid(), m.gid()), (1234, 50), "{p}");
            assert_eq!(m.permissions().mode() & 0o7777, 0o750, "{p}");
        }
    }

    #[test]
    fn host_links_fifos_and_devices_in_a_context_never_reach_the_host_or_block() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (ctx, tree, host) = (
            tmp.path().join("ctx"),
            tmp.path().join("tree"),
            tmp.path().join("host"),
        );
        std::fs::create_dir_all(host.join("dir")).expect("dirs");
        std::fs::write(host.join("secret"), b"host secret").expect("canary");
        std::fs::create_dir_all(tree.join("usr/bin")).expect("dirs");
        std::os::unix::fs::symlink("usr/bin", tree.join("bin")).expect("symlink");
        std::os::unix::fs::symlink(&host, tree.join("out")).expect("symlink");
        std::fs::create_dir_all(ctx.join("d")).expect("dirs");
        std::os::unix::fs::symlink(host.join("secret"), ctx.join("sneaky")).expect("symlink");
        std::os::unix::fs::symlink(&host, ctx.join("hostdir")).expect("symlink");
        std::os::unix::fs::symlink(host.join("secret"), ctx.join("d/inner")).expect("symlink");
        let g = guard();
        let intact = || {
            assert_eq!(
                std::fs::read(host.join("secret")).expect("canary"),
                b"host secret"
            );
            assert_eq!(std::fs::read_dir(host.join("dir")).expect("ls").count(), 0);
            assert_eq!(std::fs::read_dir(&host).expect("ls").count(), 2);
        };

        // A symlink to a host file is copied as a symlink, never read.
        copy_into(
            &tree,
            &ctx,
            &["sneaky".into()],
            "/x",
            CopyAttrs::default(),
            &g,
        )
        .expect("symlink");
        assert_eq!(
            std::fs::read_link(tree.join("x")).expect("link"),
            host.join("secret")
        );
        copy_into(
            &tree,
            &ctx,
            &["d".into()],
            "/bin/",
            CopyAttrs::default(),
            &g,
        )
        .expect("into a linked dir");
        assert!(std::fs::symlink_metadata(tree.join("usr/bin/inner"))
            .expect("copied")
            .file_type()
            .is_symlink());
        hash_sources(&ctx, &["sneaky".into(), "d".into()], &g).expect("hash");
        // Through a link to a host directory: resolved inside the context, where it is missing.
        assert!(copy_into(
            &tree,
            &ctx,
            &["hostdir/secret".into()],
            "/y",
            CopyAttrs::default(),
            &g
        )
        .is_err());
        assert!(hash_sources(&ctx, &["hostdir/secret".into()], &g).is_err());
        // A destination through a link to a host directory: resolved inside the tree, where
        // it names nothing, so refused.
        assert!(copy_into(
            &tree,
            &ctx,
            &["d".into()],
            "/out/dir/",
            CopyAttrs::default(),
            &g
        )
        .is_err());
        intact();

        // A FIFO or device in the context: a clear error naming it, at once.
        nix::unistd::mkfifo(&ctx.join("d/fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        let began = std::time::Instant::now();
        let err = copy_into(&tree, &ctx, &["d".into()], "/z/", CopyAttrs::default(), &g)
            .expect_err("fifo");
        assert!(
            err.to_string().contains("fifo") && err.to_string().contains("FIFO"),
            "{err}"
        );
        let err = hash_sources(&ctx, &["d".into()], &g).expect_err("fifo");
        assert!(err.to_string().contains("FIFO"), "{err}");
        assert!(began.elapsed() < std::time::Duration::from_secs(1));
        intact();
    }

    #[test]
    fn unpacking_a_context_refuses_special_files_and_entries_below_links() {
        let tmp = tempfile::tempdir().expect("tmp");
        let host = tmp.path().join("host");
        std::fs::create_dir_all(&host).expect("dirs");
        let entry = |b: &mut tar::Builder<Vec<u8>>,
                     name: &str,
                     kind: tar::EntryType,
                     link: Option<&Path>| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(if kind == tar::EntryType::Regular {
                1
            } else {
                0
            });
            if let Some(l) = link {
                h.set_link_name(l).expect("link");
            }
            let data: &[u8] = if kind == tar::EntryType::Regular {
                b"x"
            } else {
                b""
            };
            b.append_data(&mut h, name, data).expect("append");
        };
        for (i, (name, kind)) in [
            ("f", tar::EntryType::Fifo),
            ("c", tar::EntryType::Char),
            ("b", tar::EntryType::Block),
        ]
        .into_iter()
        .enumerate()
        {
            let mut b = tar::Builder::new(Vec::new());
            entry(&mut b, name, kind, None);
            let err = unpack(
                &b.into_inner().expect("tar"),
                &tmp.path().join(format!("c{i}")),
                &guard(),
            )
            .expect_err("special");
            assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
        }
        let mut b = tar::Builder::new(Vec::new());
        entry(&mut b, "a", tar::EntryType::Symlink, Some(&host));
        entry(&mut b, "a/planted", tar::EntryType::Regular, None);
        assert!(unpack(
            &b.into_inner().expect("tar"),
            &tmp.path().join("c9"),
            &guard()
        )
        .is_err());
        assert_eq!(std::fs::read_dir(&host).expect("ls").count(), 0);
    }
}
