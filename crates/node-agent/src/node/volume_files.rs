//! Files of a volume without a sandbox: every path is resolved with `openat2(RESOLVE_IN_ROOT)`
//! from the volume's root, so `..` stops at the root and symlinks (absolute or relative) are
//! resolved as if the volume were `/`; nothing outside the volume is ever opened. Parents are
//! created one component at a time below an already resolved directory, and the new file is
//! written under a temporary name in its (resolved) directory and renamed over the final
//! name, which replaces a symlink there rather than following it.
//!
//! Blocking calls except [`write`]; callers run them on `spawn_blocking`. Stat, remove, mkdir
//! and owner/mode changes are in `volume_paths.rs`.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use bytes::Bytes;
use cove_node_api::{
    ByteStream, FileInfo, FileType, NodeError, SandboxPath, VolumeEntry, VolumeEntryAttrs,
};
use futures::StreamExt;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use tokio::io::AsyncWriteExt;

/// Owner of what the files API writes (uid and gid 1000: `user` of the built-in templates).
pub(super) const OWNER: (u32, u32) = cove_runtime::runc::volume_disks::VOLUME_OWNER;
/// Most entries one listing returns (all levels together).
const MAX_LIST: usize = 10_000;

/// A volume path split into its normalised components (`.` and empty ones dropped; `..` kept,
/// for the kernel to stop at the root).
pub(super) fn components(path: &str) -> Result<Vec<&str>, NodeError> {
    if path.contains('\0') || path.len() > 4096 {
        return Err(invalid("path", "must be at most 4096 bytes without NUL"));
    }
    Ok(path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect())
}

pub(super) fn invalid(field: &str, message: &str) -> NodeError {
    NodeError::InvalidArgument {
        field: field.into(),
        message: message.into(),
    }
}

pub(super) fn errno_err(e: Errno, path: &str) -> NodeError {
    match e {
        Errno::NOENT => NodeError::FileNotFound(format!("{path}: no such file or directory")),
        Errno::NOTDIR => NodeError::WrongType {
            field: "path".into(),
            message: format!("{path}: a parent is not a directory"),
        },
        Errno::ISDIR => NodeError::WrongType {
            field: "path".into(),
            message: format!("{path} is a directory"),
        },
        Errno::EXIST => NodeError::AlreadyExists(format!("{path} exists")),
        Errno::NOTEMPTY => NodeError::FailedPrecondition(format!("{path} is not empty")),
        Errno::NOSPC | Errno::DQUOT => NodeError::NoSpace("the volume is full".into()),
        Errno::XDEV | Errno::LOOP => invalid("path", "resolves outside the volume"),
        Errno::NAMETOOLONG => invalid("path", "has a component longer than 255 bytes"),
        other => NodeError::Internal(format!("volume file {path}: {other}")),
    }
}

pub(super) fn open_root(root: &Path) -> Result<OwnedFd, NodeError> {
    rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| NodeError::Internal(format!("open volume root {}: {e}", root.display())))
}

/// Opens `rel` (components joined) inside the root `root`.
pub(super) fn open_in(root: &OwnedFd, rel: &[&str], flags: OFlags) -> Result<OwnedFd, Errno> {
    let joined = if rel.is_empty() {
        ".".to_string()
    } else {
        rel.join("/")
    };
    cove_confine::openat2(
        root.as_fd(),
        joined.as_str(),
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
}

/// `rel` as a path from the volume's root, `..` folded lexically (for display only: the
/// kernel resolves the real path).
pub(super) fn display(rel: &[&str]) -> String {
    let mut out: Vec<&str> = Vec::with_capacity(rel.len());
    for c in rel {
        if *c == ".." {
            out.pop();
        } else {
            out.push(c);
        }
    }
    format!("/{}", out.join("/"))
}

/// The entry of `st`, found at `rel`, with a symlink's `target`.
pub(super) fn entry_of(
    st: &rustix::fs::Stat,
    rel: &[&str],
    target: Option<Vec<u8>>,
) -> VolumeEntry {
    let ms = |s: i64, ns: i64| s.saturating_mul(1000) + ns / 1_000_000;
    VolumeEntry {
        info: info_of(st, rel, target),
        uid: st.st_uid,
        gid: st.st_gid,
        atime_ms: ms(st.st_atime, st.st_atime_nsec as i64),
        ctime_ms: ms(st.st_ctime, st.st_ctime_nsec as i64),
    }
}

fn info_of(st: &rustix::fs::Stat, rel: &[&str], target: Option<Vec<u8>>) -> FileInfo {
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    let file_type = match kind {
        rustix::fs::FileType::RegularFile => FileType::File,
        rustix::fs::FileType::Directory => FileType::Dir,
        rustix::fs::FileType::Symlink => FileType::Symlink,
        _ => FileType::Other,
    };
    let path = display(rel);
    let name = path
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("/");
    FileInfo {
        name: SandboxPath::from(name),
        path: SandboxPath::from(path.as_str()),
        file_type,
        size: st.st_size as u64,
        mode: st.st_mode & 0o7777,
        owner: st.st_uid.to_string(),
        group: st.st_gid.to_string(),
        mtime_ms: st.st_mtime.saturating_mul(1000) + i64::from(st.st_mtime_nsec as u32) / 1_000_000,
        symlink_target: target.map(SandboxPath),
    }
}

/// Opens a regular file of the volume at `root` for reading.
pub(super) fn open_read(root: &Path, path: &str) -> Result<(FileInfo, std::fs::File), NodeError> {
    let rel = components(path)?;
    let root_fd = open_root(root)?;
    // O_NONBLOCK: a FIFO a sandbox left in the volume is seen for what it is (not a regular
    // file) instead of blocking this thread until a writer comes.
    let fd = open_in(&root_fd, &rel, OFlags::RDONLY | OFlags::NONBLOCK)
        .map_err(|e| errno_err(e, path))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| errno_err(e, path))?;
    let info = info_of(&st, &rel, None);
    if info.file_type != FileType::File {
        return Err(NodeError::WrongType {
            field: "path".into(),
            message: format!("{} is not a regular file", display(&rel)),
        });
    }
    Ok((info, std::fs::File::from(fd)))
}

/// The entries of a directory of the volume at `root`, by name, each directory's entries right
/// after it down to `depth` levels (at most [`MAX_LIST`] in all).
pub(super) fn list(root: &Path, path: &str, depth: u32) -> Result<Vec<VolumeEntry>, NodeError> {
    let rel = components(path)?;
    let root_fd = open_root(root)?;
    let dir = open_in(&root_fd, &rel, OFlags::RDONLY | OFlags::DIRECTORY)
        .map_err(|e| errno_err(e, path))?;
    let mut out = Vec::new();
    let base: Vec<String> = rel.iter().map(|c| c.to_string()).collect();
    list_into(&dir, &base, depth.max(1), path, &mut out)?;
    Ok(out)
}

fn list_into(
    dir: &OwnedFd,
    rel: &[String],
    depth: u32,
    path: &str,
    out: &mut Vec<VolumeEntry>,
) -> Result<(), NodeError> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir).map_err(|e| errno_err(e, path))? {
        let entry = entry.map_err(|e| errno_err(e, path))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        // Names that are not UTF-8 are listed by the sandbox's files API, not this one.
        if let Ok(name) = std::str::from_utf8(name) {
            names.push(name.to_string());
        }
        if names.len() + out.len() >= MAX_LIST {
            break;
        }
    }
    names.sort();
    for name in &names {
        if out.len() >= MAX_LIST {
            break;
        }
        let Ok(st) = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let target = if kind == rustix::fs::FileType::Symlink {
            rustix::fs::readlinkat(dir, name.as_str(), Vec::new())
                .ok()
                .map(|t| t.into_bytes())
        } else {
            None
        };
        let mut child: Vec<String> = rel.to_vec();
        child.push(name.clone());
        let child_ref: Vec<&str> = child.iter().map(String::as_str).collect();
        out.push(entry_of(&st, &child_ref, target));
        if depth > 1 && kind == rustix::fs::FileType::Directory {
            // One component, not followed: a directory swapped for a symlink meanwhile fails
            // to open rather than leading anywhere.
            let Ok(sub) = rustix::fs::openat(
                dir,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            list_into(&sub, &child, depth - 1, path, out)?;
        }
    }
    Ok(())
}

/// Resolves the parent directory of `rel`'s last component, creating missing directories
/// (mode 0755, owned by `owner`); returns it open (`O_PATH`).
pub(super) fn parent_dir(
    root_fd: &OwnedFd,
    rel: &[&str],
    path: &str,
    owner: (u32, u32),
) -> Result<OwnedFd, NodeError> {
    let parents = &rel[..rel.len() - 1];
    let mut dir =
        open_in(root_fd, &[], OFlags::PATH | OFlags::DIRECTORY).map_err(|e| errno_err(e, path))?;
    for i in 0..parents.len() {
        match open_in(root_fd, &parents[..=i], OFlags::PATH | OFlags::DIRECTORY) {
            Ok(next) => dir = next,
            Err(Errno::NOENT) => {
                let name = parents[i];
                if name == ".." {
                    return Err(errno_err(Errno::NOENT, path));
                }
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(errno_err(e, path)),
                }
                let made = open_in(root_fd, &parents[..=i], OFlags::PATH | OFlags::DIRECTORY)
                    .map_err(|e| errno_err(e, path))?;
                let _ = rustix::fs::chownat(
                    &made,
                    "",
                    Some(rustix::fs::Uid::from_raw(owner.0)),
                    Some(rustix::fs::Gid::from_raw(owner.1)),
                    AtFlags::EMPTY_PATH,
                );
                dir = made;
            }
            Err(e) => return Err(errno_err(e, path)),
        }
    }
    Ok(dir)
}

/// Writes `body` to `path` of the volume at `root` atomically (temporary file, fsync,
/// rename) with `attrs` (default owner [`OWNER`], mode 0644); nothing is left when it fails.
pub(super) async fn write(
    root: &Path,
    path: &str,
    attrs: VolumeEntryAttrs,
    body: ByteStream,
) -> Result<VolumeEntry, NodeError> {
    let rel: Vec<String> = components(path)?.into_iter().map(String::from).collect();
    let name = match rel.last() {
        Some(n) if n != ".." => n.clone(),
        _ => return Err(invalid("path", "must name a file in the volume")),
    };
    let tmp_name = format!(".cove-upload-{:016x}", rand::random::<u64>());
    let (root_fd, dir, file) = {
        let root = root.to_path_buf();
        let rel = rel.clone();
        let path = path.to_string();
        let tmp_name = tmp_name.clone();
        tokio::task::spawn_blocking(move || -> Result<_, NodeError> {
            let rel: Vec<&str> = rel.iter().map(String::as_str).collect();
            let root_fd = open_root(&root)?;
            let dir = parent_dir(&root_fd, &rel, &path, OWNER)?;
            // A directory there is refused up front (the rename would fail only at the end).
            if let Ok(st) = rustix::fs::statat(&dir, rel[rel.len() - 1], AtFlags::SYMLINK_NOFOLLOW)
            {
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Directory
                {
                    return Err(errno_err(Errno::ISDIR, &path));
                }
            }
            let file = rustix::fs::openat(
                &dir,
                tmp_name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| errno_err(e, &path))?;
            Ok((root_fd, dir, file))
        })
        .await
        .map_err(|e| NodeError::Internal(format!("volume write task: {e}")))??
    };
    let mut out = tokio::fs::File::from_std(std::fs::File::from(file));
    let copied = async {
        let mut body = body;
        while let Some(chunk) = body.next().await {
            let chunk: Bytes = chunk.map_err(|e| NodeError::Internal(format!("upload: {e}")))?;
            out.write_all(&chunk).await.map_err(|e| io_err(e, path))?;
        }
        out.flush().await.map_err(|e| io_err(e, path))?;
        out.sync_all().await.map_err(|e| io_err(e, path))?;
        Ok::<_, NodeError>(())
    }
    .await;
    let out = out.into_std().await;
    let path_owned = path.to_string();
    tokio::task::spawn_blocking(move || -> Result<VolumeEntry, NodeError> {
        let rel: Vec<&str> = rel.iter().map(String::as_str).collect();
        let finish = || -> Result<VolumeEntry, NodeError> {
            copied?;
            rustix::fs::fchown(
                &out,
                Some(rustix::fs::Uid::from_raw(attrs.uid.unwrap_or(OWNER.0))),
                Some(rustix::fs::Gid::from_raw(attrs.gid.unwrap_or(OWNER.1))),
            )
            .map_err(|e| errno_err(e, &path_owned))?;
            rustix::fs::fchmod(&out, Mode::from_raw_mode(attrs.mode.unwrap_or(0o644)))
                .map_err(|e| errno_err(e, &path_owned))?;
            rustix::fs::renameat(&dir, tmp_name.as_str(), &dir, name.as_str())
                .map_err(|e| errno_err(e, &path_owned))?;
            let st = rustix::fs::fstat(&out).map_err(|e| errno_err(e, &path_owned))?;
            Ok(entry_of(&st, &rel, None))
        };
        let done = finish();
        if done.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_str(), AtFlags::empty());
        }
        drop(root_fd);
        done
    })
    .await
    .map_err(|e| NodeError::Internal(format!("volume write task: {e}")))?
}

fn io_err(e: std::io::Error, path: &str) -> NodeError {
    match e.raw_os_error() {
        Some(code) => errno_err(Errno::from_raw_os_error(code), path),
        None => NodeError::Internal(format!("volume file {path}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(bytes: &'static [u8]) -> ByteStream {
        futures::stream::iter([Ok(Bytes::from_static(bytes))]).boxed()
    }

    #[test]
    fn a_fifo_in_a_volume_is_refused_without_blocking() {
        let outer = tempfile::tempdir().expect("tempdir");
        let root = outer.path().join("vol");
        std::fs::create_dir(&root).expect("mkdir");
        nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        // Before O_NONBLOCK this open waited for a writer forever.
        let (tx, rx) = std::sync::mpsc::channel();
        let at = root.clone();
        std::thread::spawn(move || {
            let _ = tx.send(open_read(&at, "pipe").map(|_| ()));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the open of a FIFO returns at once");
        assert!(
            matches!(got, Err(NodeError::WrongType { .. })),
            "a FIFO is not a regular file: {got:?}"
        );
    }

    #[tokio::test]
    async fn paths_stay_inside_the_root() {
        let outer = tempfile::tempdir().expect("tempdir");
        let root = outer.path().join("vol");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::write(outer.path().join("secret"), b"host").expect("write");
        std::os::unix::fs::symlink("/", root.join("abs")).expect("symlink");
        std::os::unix::fs::symlink("../..", root.join("up")).expect("symlink");

        // `..` stops at the root: this writes the volume's own `/secret`.
        write(
            &root,
            "../secret",
            VolumeEntryAttrs::default(),
            body(b"vol"),
        )
        .await
        .expect("write");
        assert_eq!(
            std::fs::read(outer.path().join("secret")).expect("read"),
            b"host"
        );
        assert_eq!(std::fs::read(root.join("secret")).expect("read"), b"vol");
        // Symlinks resolve as if the volume were `/`.
        let (_, mut f) = open_read(&root, "abs/secret").expect("open");
        let mut got = String::new();
        std::io::Read::read_to_string(&mut f, &mut got).expect("read");
        assert_eq!(got, "vol");
        write(
            &root,
            "up/a/b/c",
            VolumeEntryAttrs::default(),
            body(b"deep"),
        )
        .await
        .expect("write");
        assert_eq!(std::fs::read(root.join("a/b/c")).expect("read"), b"deep");
        assert!(!outer.path().join("a").exists());
        // A symlink as the final name is replaced, not followed.
        std::os::unix::fs::symlink(outer.path().join("secret"), root.join("link")).expect("ln");
        write(&root, "link", VolumeEntryAttrs::default(), body(b"x"))
            .await
            .expect("write");
        assert_eq!(
            std::fs::read(outer.path().join("secret")).expect("read"),
            b"host"
        );

        let names: Vec<_> = list(&root, "/", 1)
            .expect("list")
            .into_iter()
            .map(|i| String::from_utf8(i.info.name.0).expect("utf8"))
            .collect();
        assert_eq!(names, ["a", "abs", "link", "secret", "up"]);
        let deep: Vec<_> = list(&root, "/", 3)
            .expect("list")
            .into_iter()
            .map(|i| String::from_utf8(i.info.path.0).expect("utf8"))
            .collect();
        assert_eq!(
            deep,
            ["/a", "/a/b", "/a/b/c", "/abs", "/link", "/secret", "/up"]
        );
        assert!(matches!(
            open_read(&root, "nope"),
            Err(NodeError::FileNotFound(_))
        ));
        assert!(matches!(
            open_read(&root, "a"),
            Err(NodeError::WrongType { .. })
        ));
        assert!(matches!(
            write(&root, "/", VolumeEntryAttrs::default(), body(b"x")).await,
            Err(NodeError::InvalidArgument { .. })
        ));
    }
}
