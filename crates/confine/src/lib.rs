//! Confined host-side access to tenant-controlled trees.
//!
//! Everything a tenant can shape is hostile input on the host: a sandbox's overlay upper dir
//! (its root may plant symlinks, hard links, FIFOs and whiteout devices there), volume trees,
//! unpacked snapshots and checkpoints, build contexts and the release trees made from them. Host
//! code reaches such a tree only through a [`Tree`]: a directory file descriptor that every
//! access resolves beneath with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`, so that
//!
//! - no symlink is followed, in the middle of a path or at its end (an access through one fails
//!   with `ELOOP`, [`Error::Link`]);
//! - no path leaves the root (`..` components are refused before any system call);
//! - files are opened `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC` and checked to be regular files
//!   before a byte is read, so a FIFO never blocks a thread and a device is never read;
//! - Cove's own names inside the tree (`/etc/hostname`, `/.cove/run`) are *replaced*, whatever
//!   the tenant left there, never written through: a new file under an `O_EXCL` temp name, then
//!   `renameat` over the name (which replaces a link, not its target);
//! - every walk has an entry bound.
//!
//! The root itself is opened by its host path, which the host chose (a sandbox directory under
//! the data dir); nothing here ever opens a host path a tenant named.
//!
//! Errors never carry file bytes: only the relative path and what was wrong with it.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// How every path below a [`Tree`] is resolved.
const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Deepest directory nesting a walk or removal descends (Linux paths stop at 4,096 bytes, so a
/// deeper tree is not one a path call could reach either).
pub const MAX_DEPTH: usize = 2048;

/// Errors of confined access. Messages name the relative path, never file content.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A path was not a plain relative path below the root (`..`, or empty where a name is
    /// needed).
    #[error("path {path:?} leaves the tree or names nothing")]
    BadPath {
        /// The offending path.
        path: PathBuf,
    },
    /// A symlink was met where a file or directory was needed (never followed).
    #[error("{path:?} is or goes through a symbolic link")]
    Link {
        /// The path that was being resolved.
        path: PathBuf,
    },
    /// An entry is not of the kind needed (a FIFO, device or socket where a regular file was
    /// expected, a file where a directory was).
    #[error("{path:?} is not a {expected}")]
    WrongKind {
        /// The path.
        path: PathBuf,
        /// What was expected: `regular file` or `directory`.
        expected: &'static str,
    },
    /// A file is larger than the caller's bound.
    #[error("{path:?} is larger than {max} bytes")]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// The bound, in bytes.
        max: u64,
    },
    /// A walk met more entries (or deeper nesting) than its bound.
    #[error("the tree has more than {max} entries or is nested deeper than {MAX_DEPTH}")]
    TooMany {
        /// The entry bound.
        max: u64,
    },
    /// A system call failed.
    #[error("{op} {path:?}: {source}")]
    Io {
        /// The operation (`open`, `mkdir`, `rename`, ...).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether this is a missing entry (`ENOENT`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether the disk was full (`ENOSPC` or `EDQUOT`).
    pub fn is_no_space(&self) -> bool {
        let full = [Errno::NOSPC.raw_os_error(), Errno::DQUOT.raw_os_error()];
        matches!(self, Error::Io { source, .. }
            if source.raw_os_error().is_some_and(|code| full.contains(&code)))
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        match e {
            // The OS error itself, so callers still tell `ENOSPC` apart.
            Error::Io { source, .. } => source,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn io_err(op: &'static str, path: &Path, errno: Errno) -> Error {
    if errno == Errno::LOOP {
        return Error::Link {
            path: path.to_path_buf(),
        };
    }
    Error::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

/// What [`Tree::stat`] and walks report of one entry (never following it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Its type.
    pub kind: FileType,
    /// Permission bits with set-id and sticky bits (`0o7777` at most).
    pub mode: u32,
    /// Owner (host ids).
    pub uid: u32,
    /// Group (host ids).
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Device of the filesystem holding it.
    pub dev: u64,
    /// Device number of a character or block device (0 otherwise).
    pub rdev: u64,
    /// Number of hard links.
    pub nlink: u64,
    /// Inode number.
    pub ino: u64,
    /// 512-byte blocks allocated to it.
    pub blocks: u64,
    /// Last modification, seconds since the epoch.
    pub mtime: i64,
}

impl Meta {
    fn from_stat(st: &rustix::fs::Stat) -> Meta {
        Meta {
            kind: FileType::from_raw_mode(st.st_mode),
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            dev: st.st_dev,
            rdev: st.st_rdev,
            nlink: st.st_nlink,
            ino: st.st_ino,
            blocks: st.st_blocks as u64,
            mtime: st.st_mtime,
        }
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.kind == FileType::RegularFile
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.kind == FileType::Symlink
    }
}

/// `rel` as plain components: `.` and a leading `/` dropped (a path is always taken relative to
/// the root), `..` refused.
fn components(rel: &Path) -> Result<Vec<&OsStr>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(Error::BadPath {
                    path: rel.to_path_buf(),
                })
            }
        }
    }
    Ok(out)
}

/// `.cove-<random>.<name>`: an `O_EXCL` temp name beside `name`.
fn temp_name(name: &OsStr) -> Vec<u8> {
    let mut tmp_name = Vec::with_capacity(name.len() + 24);
    tmp_name.extend_from_slice(b".cove-");
    tmp_name.extend_from_slice(format!("{:016x}", rand::random::<u64>()).as_bytes());
    tmp_name.push(b'.');
    tmp_name.extend_from_slice(&name.as_bytes()[..name.len().min(200)]);
    tmp_name
}

/// A directory of a tenant-controlled tree, and the root every access through it resolves in.
#[derive(Debug)]
pub struct Tree {
    fd: OwnedFd,
    /// The host path it was opened at, or the relative path below the root it came from: for
    /// messages only.
    label: PathBuf,
}

impl AsFd for Tree {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Tree {
    /// Opens the host directory `path` as a tree's root. `path` is the host's own (a sandbox's
    /// directory under the data dir), never a tenant's: it is resolved as an ordinary path.
    ///
    /// Errors: [`Error::Io`] (`ENOENT`, `ENOTDIR`, ...).
    pub fn open(path: &Path) -> Result<Tree> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open", path, e))?;
        Ok(Tree {
            fd,
            label: path.to_path_buf(),
        })
    }

    /// The host path or relative path this tree was opened at (for messages).
    pub fn label(&self) -> &Path {
        &self.label
    }

    fn open_raw(&self, rel: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd> {
        let rel_or_dot = if components(rel)?.is_empty() {
            Path::new(".")
        } else {
            rel
        };
        openat2(
            &self.fd,
            rel_or_dot,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
            RESOLVE,
        )
        .map_err(|e| io_err("open", rel, e))
    }

    /// The directory `rel` below this one, as a tree of its own (accesses through it stay
    /// beneath it). `rel` empty or `.`: this directory again.
    ///
    /// Errors: [`Error::Link`] when `rel` is or goes through a symlink, [`Error::Io`]
    /// (`ENOENT`, `ENOTDIR`).
    pub fn open_dir(&self, rel: &Path) -> Result<Tree> {
        let fd = match self.open_raw(rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            Ok(fd) => fd,
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) =>
            {
                return Err(self.not_a_dir(rel))
            }
            Err(e) => return Err(e),
        };
        Ok(Tree {
            fd,
            label: self.label.join(rel),
        })
    }

    /// Opens the regular file `rel` for reading. A FIFO, socket or device is never opened for
    /// more than the `O_NONBLOCK` open that tells what it is.
    ///
    /// Errors: [`Error::WrongKind`] for anything but a regular file, [`Error::Link`],
    /// [`Error::Io`].
    pub fn open_file(&self, rel: &Path) -> Result<File> {
        // Told apart before the open where it can be: opening a device reaches its driver. The
        // check after the open covers an entry swapped in between.
        if let Some(meta) = self.stat(rel)? {
            if !meta.is_file() && !meta.is_symlink() {
                return Err(Error::WrongKind {
                    path: rel.to_path_buf(),
                    expected: "regular file",
                });
            }
        }
        let fd = self.open_raw(rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", rel, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::WrongKind {
                path: rel.to_path_buf(),
                expected: "regular file",
            });
        }
        Ok(File::from(fd))
    }

    /// The directory `rel`, resolving symlinks on the way *as the sandbox would see them*:
    /// `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, so an absolute link restarts at this
    /// tree's root and `..` stops there; the kernel never lets the walk leave the root, and
    /// `/proc`-style magic links are refused. For placing what a tenant's image or file asks
    /// for (`COPY x /bin/` where `/bin -> usr/bin`); accesses through the returned tree are
    /// confined as usual (no links followed).
    ///
    /// Errors: [`Error::BadPath`] for `..` in `rel`, [`Error::WrongKind`] when it is no
    /// directory, [`Error::Io`] (`ENOENT`, `ELOOP` for a link cycle).
    pub fn open_dir_in_root(&self, rel: &Path) -> Result<Tree> {
        let rel_or_dot = if components(rel)?.is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let fd = openat2(
            &self.fd,
            rel_or_dot,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            Errno::NOTDIR => Error::WrongKind {
                path: rel.to_path_buf(),
                expected: "directory",
            },
            e => Error::Io {
                op: "open",
                path: rel.to_path_buf(),
                source: e.into(),
            },
        })?;
        Ok(Tree {
            fd,
            label: self.label.join(rel),
        })
    }

    /// Why `rel` could not be opened as a directory (`ENOTDIR`): its last component is a link
    /// ([`Error::Link`]) or something else ([`Error::WrongKind`]).
    fn not_a_dir(&self, rel: &Path) -> Error {
        let link = openat2(
            &self.fd,
            rel,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
        .and_then(|fd| rustix::fs::fstat(&fd))
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
        if link {
            Error::Link {
                path: rel.to_path_buf(),
            }
        } else {
            Error::WrongKind {
                path: rel.to_path_buf(),
                expected: "directory",
            }
        }
    }

    /// The whole regular file `rel`, at most `max` bytes.
    ///
    /// Errors: [`Error::TooLarge`] past `max`, and those of [`Tree::open_file`].
    pub fn read_file(&self, rel: &Path, max: u64) -> Result<Vec<u8>> {
        let file = self.open_file(rel)?;
        let mut out = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|source| Error::Io {
                op: "read",
                path: rel.to_path_buf(),
                source,
            })?;
        if out.len() as u64 > max {
            return Err(Error::TooLarge {
                path: rel.to_path_buf(),
                max,
            });
        }
        Ok(out)
    }

    /// The parent directory of `rel` (opened without following links) and its last component.
    fn parent_of<'p>(&self, rel: &'p Path) -> Result<(Tree, &'p OsStr)> {
        let parts = components(rel)?;
        let Some((name, parents)) = parts.split_last() else {
            return Err(Error::BadPath {
                path: rel.to_path_buf(),
            });
        };
        let parent: PathBuf = parents.iter().collect();
        Ok((self.open_dir(&parent)?, name))
    }

    /// What `rel` is, without following it; `None` when nothing is there (or a parent is
    /// missing).
    ///
    /// Errors: [`Error::Link`] when a *parent* is a symlink, [`Error::Io`].
    pub fn stat(&self, rel: &Path) -> Result<Option<Meta>> {
        let (parent, name) = match self.parent_of(rel) {
            Ok(found) => found,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&parent.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Meta::from_stat(&st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io_err("stat", rel, e)),
        }
    }

    /// What this directory itself is.
    pub fn meta(&self) -> Result<Meta> {
        rustix::fs::fstat(&self.fd)
            .map(|st| Meta::from_stat(&st))
            .map_err(|e| io_err("stat", &self.label, e))
    }

    /// Makes the directories of `rel` that are missing (mode `mode`, before the umask) and
    /// opens the last one. An existing entry that is not a directory is an error, not replaced.
    ///
    /// Errors: [`Error::Link`] or [`Error::WrongKind`] for a link or a non-directory on the
    /// way, [`Error::Io`].
    pub fn create_dir_all(&self, rel: &Path, mode: u32) -> Result<Tree> {
        self.dirs(rel, mode, false)
    }

    /// Like [`Tree::create_dir_all`], but for directories Cove owns inside the tree (`.cove`,
    /// `.cove/run`, `etc`): whatever else the tenant left at one of those names (a symlink, a
    /// file, a FIFO, a whiteout) is removed and a directory made in its place.
    pub fn ensure_dir(&self, rel: &Path, mode: u32) -> Result<Tree> {
        self.dirs(rel, mode, true)
    }

    fn dirs(&self, rel: &Path, mode: u32, replace: bool) -> Result<Tree> {
        let mut at = self.open_dir(Path::new(""))?;
        let mut walked = PathBuf::new();
        for part in components(rel)? {
            walked.push(part);
            at = at.child_dir(part, mode, replace, &walked)?;
        }
        Ok(Tree {
            fd: at.fd,
            label: self.label.join(rel),
        })
    }

    /// Opens (making it if missing) the directory `name` directly below this one.
    fn child_dir(&self, name: &OsStr, mode: u32, replace: bool, shown: &Path) -> Result<Tree> {
        for _ in 0..3 {
            match self.open_dir(Path::new(name)) {
                Ok(dir) => return Ok(dir),
                Err(e) if e.is_not_found() => {
                    match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(e) => return Err(io_err("mkdir", shown, e)),
                    }
                }
                Err(Error::Link { .. }) | Err(Error::WrongKind { .. }) if replace => {
                    // A link, file, FIFO or device where Cove's directory belongs.
                    self.remove_entry(name, shown)?;
                }
                Err(Error::Link { .. }) => {
                    return Err(Error::Link {
                        path: shown.to_path_buf(),
                    })
                }
                Err(Error::WrongKind { .. }) => {
                    return Err(Error::WrongKind {
                        path: shown.to_path_buf(),
                        expected: "directory",
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::WrongKind {
            path: shown.to_path_buf(),
            expected: "directory",
        })
    }

    /// Writes `bytes` as the regular file `rel` (mode `mode`, owner `owner` when given),
    /// replacing whatever is at that name (a file, a symlink, a FIFO, a directory tree). The
    /// new file is written under an `O_EXCL` temp name in the same directory and renamed over
    /// the name, so a reader sees the old entry or the new file, and nothing outside the tree
    /// is ever written. The parent directories must exist as directories.
    ///
    /// Errors: [`Error::Link`] / [`Error::WrongKind`] for a parent, [`Error::Io`] (`ENOSPC`).
    pub fn replace_file(
        &self,
        rel: &Path,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        parent.replace_child(name, bytes, mode, owner, rel)
    }

    /// Like [`Tree::replace_file`], the content streamed by `fill` into the new file (which
    /// it gets positioned at its start); `fill`'s error is returned as [`Error::Io`] with op
    /// `write` and nothing is left at `rel`'s temp name.
    pub fn replace_file_with(
        &self,
        rel: &Path,
        mode: u32,
        owner: Option<(u32, u32)>,
        fill: &mut dyn FnMut(&mut File) -> std::io::Result<()>,
    ) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        parent.replace_child_with(name, mode, owner, rel, fill)
    }

    /// Makes the symlink `rel` → `target` (owned by `owner` when given), replacing whatever
    /// is at `rel` the way [`Tree::replace_file`] does. The target is stored as it is: it is
    /// data, never resolved here.
    pub fn replace_symlink(
        &self,
        rel: &Path,
        target: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        let tmp_name = temp_name(name);
        let tmp = OsStr::from_bytes(&tmp_name);
        rustix::fs::symlinkat(target, &parent.fd, tmp).map_err(|e| io_err("symlink", rel, e))?;
        let placed = (|| {
            if let Some((uid, gid)) = owner {
                parent.chown_child(tmp, Some(uid), Some(gid), rel)?;
            }
            parent.rename_over(tmp, name, rel)
        })();
        if placed.is_err() {
            let _ = rustix::fs::unlinkat(&parent.fd, tmp, AtFlags::empty());
        }
        placed
    }

    /// Makes `rel` a hard link to the entry `target` of this tree (both resolved without
    /// following links; a link to a symlink links the symlink itself), replacing whatever is
    /// at `rel`.
    ///
    /// Errors: [`Error::Link`] for a link on the way to either, [`Error::Io`] (`ENOENT` when
    /// `target` is missing, `EXDEV`, `EPERM` for a directory).
    pub fn replace_hard_link(&self, target: &Path, rel: &Path) -> Result<()> {
        let (from_dir, from_name) = self.parent_of(target)?;
        let (parent, name) = self.parent_of(rel)?;
        let tmp_name = temp_name(name);
        let tmp = OsStr::from_bytes(&tmp_name);
        rustix::fs::linkat(&from_dir.fd, from_name, &parent.fd, tmp, AtFlags::empty())
            .map_err(|e| io_err("link", target, e))?;
        let placed = parent.rename_over(tmp, name, rel);
        if placed.is_err() {
            let _ = rustix::fs::unlinkat(&parent.fd, tmp, AtFlags::empty());
        }
        placed
    }

    /// Renames `tmp` over `name` (both in this directory); a directory at `name` goes first.
    fn rename_over(&self, tmp: &OsStr, name: &OsStr, shown: &Path) -> Result<()> {
        match rustix::fs::renameat(&self.fd, tmp, &self.fd, name) {
            Ok(()) => Ok(()),
            Err(Errno::ISDIR) | Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => {
                self.remove_entry(name, shown)?;
                rustix::fs::renameat(&self.fd, tmp, &self.fd, name)
                    .map_err(|e| io_err("rename", shown, e))
            }
            Err(e) => Err(io_err("rename", shown, e)),
        }
    }

    fn replace_child(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
        shown: &Path,
    ) -> Result<()> {
        self.replace_child_with(name, mode, owner, shown, &mut |f| f.write_all(bytes))
    }

    fn replace_child_with(
        &self,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
        shown: &Path,
        fill: &mut dyn FnMut(&mut File) -> std::io::Result<()>,
    ) -> Result<()> {
        let tmp_name = temp_name(name);
        let tmp = OsStr::from_bytes(&tmp_name);
        let fd = openat2(
            &self.fd,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            RESOLVE,
        )
        .map_err(|e| io_err("create", shown, e))?;
        let written = (|| -> Result<()> {
            let mut file = File::from(fd);
            fill(&mut file).map_err(|source| Error::Io {
                op: "write",
                path: shown.to_path_buf(),
                source,
            })?;
            if let Some((uid, gid)) = owner {
                rustix::fs::fchown(
                    &file,
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(gid)),
                )
                .map_err(|e| io_err("chown", shown, e))?;
            }
            // After chown, which clears set-id bits.
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o7777))
                .map_err(|e| io_err("chmod", shown, e))?;
            // A directory at the name goes, with everything below it.
            self.rename_over(tmp, name, shown)
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp, AtFlags::empty());
        }
        written
    }

    /// [`Tree::replace_file`] unless `rel` already is a regular file holding exactly `bytes`
    /// (so a sandbox whose disk is full still starts when nothing changed).
    pub fn write_if_changed(&self, rel: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        if let Ok(Some(meta)) = self.stat(rel) {
            if meta.is_file() && meta.size == bytes.len() as u64 {
                if let Ok(old) = self.read_file(rel, bytes.len() as u64) {
                    if old == bytes {
                        return Ok(());
                    }
                }
            }
        }
        self.replace_file(rel, bytes, mode, None)
    }

    /// Removes `rel` and, when it is a directory, everything below it; links are removed, never
    /// followed. Missing: not an error.
    ///
    /// Errors: [`Error::Link`] when a parent is a link, [`Error::Io`].
    pub fn remove(&self, rel: &Path) -> Result<()> {
        let (parent, name) = match self.parent_of(rel) {
            Ok(found) => found,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        parent.remove_entry(name, rel)
    }

    /// Removes the entry `name` directly below this directory (recursively for a directory).
    fn remove_entry(&self, name: &OsStr, shown: &Path) -> Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            Err(Errno::ISDIR) => {}
            Err(e) => return Err(io_err("remove", shown, e)),
        }
        let dir = self.open_raw(
            Path::new(name),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )?;
        let dir = Tree {
            fd: dir,
            label: shown.to_path_buf(),
        };
        dir.clear(0)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(io_err("remove", shown, e)),
        }
    }

    /// Removes everything below this directory.
    fn clear(&self, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Error::TooMany { max: u64::MAX });
        }
        for (name, kind) in self.names()? {
            let name = OsStr::from_bytes(name.to_bytes());
            if kind == FileType::Directory {
                let sub = Tree {
                    fd: self.open_raw(
                        Path::new(name),
                        OFlags::RDONLY | OFlags::DIRECTORY,
                        Mode::empty(),
                    )?,
                    label: self.label.join(name),
                };
                sub.clear(depth + 1)?;
                match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(io_err("remove", &self.label.join(name), e)),
                }
            } else {
                match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(io_err("remove", &self.label.join(name), e)),
                }
            }
        }
        Ok(())
    }

    /// The names in this directory (not `.`/`..`) with the type of each (never followed).
    pub fn names(&self) -> Result<Vec<(std::ffi::CString, FileType)>> {
        let mut out = Vec::new();
        let dir =
            rustix::fs::Dir::read_from(&self.fd).map_err(|e| io_err("list", &self.label, e))?;
        for entry in dir {
            let entry = entry.map_err(|e| io_err("list", &self.label, e))?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                kind = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))
                    .map_err(|e| io_err("stat", &self.label, e))?;
            }
            out.push((name.to_owned(), kind));
        }
        Ok(out)
    }

    /// Changes the owner of `rel` itself (a link's own owner, never its target's).
    pub fn chown(&self, rel: &Path, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        parent.chown_child(name, uid, gid, rel)
    }

    fn chown_child(
        &self,
        name: &OsStr,
        uid: Option<u32>,
        gid: Option<u32>,
        shown: &Path,
    ) -> Result<()> {
        rustix::fs::chownat(
            &self.fd,
            name,
            uid.map(rustix::fs::Uid::from_raw),
            gid.map(rustix::fs::Gid::from_raw),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_err("chown", shown, e))
    }

    /// Sets the permission bits (with set-id bits) of the regular file or directory `rel`; a
    /// link, FIFO, socket or device is left as it is (`Ok(false)`).
    pub fn chmod(&self, rel: &Path, mode: u32) -> Result<bool> {
        // Told apart before any open: opening a device (even `O_NONBLOCK`) reaches its driver.
        match self.stat(rel)? {
            Some(meta) if meta.is_file() || meta.is_dir() => {}
            _ => return Ok(false),
        }
        let fd = self.open_raw(rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty());
        let fd = match fd {
            Ok(fd) => fd,
            Err(Error::Link { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", rel, e))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile && kind != FileType::Directory {
            return Ok(false);
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| io_err("chmod", rel, e))?;
        Ok(true)
    }

    /// Visits every entry below this directory (not this one), depth first, without following
    /// links or descending into other filesystems; `visit` gets the entry's directory, its name
    /// and what it is, and may change the entry through the directory (`chown_at`,
    /// `chmod_at`). At most `max_entries` entries.
    ///
    /// Errors: [`Error::TooMany`] past the bound, the first error of `visit`, [`Error::Io`].
    pub fn walk(
        &self,
        max_entries: u64,
        visit: &mut dyn FnMut(&Tree, &CStr, &Meta) -> Result<()>,
    ) -> Result<u64> {
        let root_dev = self.meta()?.dev;
        let mut seen = 0u64;
        // Pending directories are kept as (parent, name) and opened when their turn comes, so
        // the descriptors held at once follow the depth of the walk, not the width of a
        // directory (one with 100,000 subdirectories must not exhaust the process's fds).
        let root = std::rc::Rc::new(self.open_dir(Path::new(""))?);
        let mut stack: Vec<(std::rc::Rc<Tree>, Option<std::ffi::CString>, usize)> =
            vec![(root, None, 0)];
        while let Some((parent, name, depth)) = stack.pop() {
            let dir = match name {
                None => parent,
                Some(name) => {
                    match parent.open_dir(Path::new(OsStr::from_bytes(name.to_bytes()))) {
                        Ok(dir) => std::rc::Rc::new(dir),
                        // Gone or replaced by a link since it was listed: nothing to walk.
                        Err(Error::Link { .. }) | Err(Error::WrongKind { .. }) => continue,
                        Err(e) if e.is_not_found() => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            for (name, _) in dir.names()? {
                seen += 1;
                if seen > max_entries || depth > MAX_DEPTH {
                    return Err(Error::TooMany { max: max_entries });
                }
                let st =
                    match rustix::fs::statat(&dir.fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => st,
                        Err(Errno::NOENT) => continue,
                        Err(e) => return Err(io_err("stat", &dir.label, e)),
                    };
                let meta = Meta::from_stat(&st);
                visit(&dir, &name, &meta)?;
                if meta.is_dir() && meta.dev == root_dev {
                    stack.push((dir.clone(), Some(name), depth + 1));
                }
            }
        }
        Ok(seen)
    }

    /// Creates the regular file `rel` (which must not exist: `O_EXCL`) with mode `mode`
    /// (before the umask) and opens it for writing. The parent must exist as a directory.
    ///
    /// Errors: [`Error::Io`] (`EEXIST` when something is at the name), [`Error::Link`] /
    /// [`Error::WrongKind`] for a parent.
    pub fn create_new(&self, rel: &Path, mode: u32) -> Result<File> {
        let (parent, name) = self.parent_of(rel)?;
        openat2(
            &parent.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & 0o7777),
            RESOLVE,
        )
        .map(File::from)
        .map_err(|e| io_err("create", rel, e))
    }

    /// Creates the symlink `rel` pointing at `target` (stored as given, never resolved here).
    pub fn symlink(&self, rel: &Path, target: &Path) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        rustix::fs::symlinkat(target, &parent.fd, name).map_err(|e| io_err("symlink", rel, e))
    }

    /// Makes `rel` a hard link to the existing entry `existing` of the same tree (the entry
    /// itself when it is a symlink: never followed).
    pub fn hard_link(&self, existing: &Path, rel: &Path) -> Result<()> {
        let (from_dir, from_name) = self.parent_of(existing)?;
        let (to_dir, to_name) = self.parent_of(rel)?;
        rustix::fs::linkat(
            &from_dir.fd,
            from_name,
            &to_dir.fd,
            to_name,
            AtFlags::empty(),
        )
        .map_err(|e| io_err("link", rel, e))
    }

    /// Creates the FIFO, character or block device `rel` (device number `dev`). It is never
    /// opened here.
    pub fn mknod(&self, rel: &Path, kind: FileType, mode: u32, dev: u64) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        rustix::fs::mknodat(
            &parent.fd,
            name,
            kind,
            Mode::from_raw_mode(mode & 0o7777),
            dev,
        )
        .map_err(|e| io_err("mknod", rel, e))
    }

    /// Makes the directory `rel` (mode `mode`, before the umask); its parent must exist.
    pub fn mkdir(&self, rel: &Path, mode: u32) -> Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        rustix::fs::mkdirat(&parent.fd, name, Mode::from_raw_mode(mode & 0o7777))
            .map_err(|e| io_err("mkdir", rel, e))
    }

    /// The target of the symlink `rel` (read, never followed), at most 4,096 bytes.
    ///
    /// Errors: [`Error::WrongKind`] when `rel` is not a symlink, [`Error::Io`].
    pub fn read_link(&self, rel: &Path) -> Result<PathBuf> {
        let (parent, name) = self.parent_of(rel)?;
        match rustix::fs::readlinkat(&parent.fd, name, Vec::new()) {
            Ok(target) if target.as_bytes().len() <= 4096 => {
                Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
            }
            Ok(_) => Err(Error::TooLarge {
                path: rel.to_path_buf(),
                max: 4096,
            }),
            Err(Errno::INVAL) => Err(Error::WrongKind {
                path: rel.to_path_buf(),
                expected: "symbolic link",
            }),
            Err(e) => Err(io_err("readlink", rel, e)),
        }
    }

    /// This directory as a [`File`] (a duplicate of its descriptor), for calls that take one
    /// (extended attributes).
    pub fn as_file(&self) -> Result<File> {
        self.fd
            .try_clone()
            .map(File::from)
            .map_err(|source| Error::Io {
                op: "dup",
                path: self.label.clone(),
                source,
            })
    }

    /// Changes the owner of this directory itself.
    pub fn chown_self(&self, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        rustix::fs::fchown(
            &self.fd,
            uid.map(rustix::fs::Uid::from_raw),
            gid.map(rustix::fs::Gid::from_raw),
        )
        .map_err(|e| io_err("chown", &self.label, e))
    }

    /// Changes the owner of the entry `name` directly in this directory (not following it).
    pub fn chown_at(&self, name: &CStr, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        let shown = self.label.join(OsStr::from_bytes(name.to_bytes()));
        self.chown_child(OsStr::from_bytes(name.to_bytes()), uid, gid, &shown)
    }

    /// [`Tree::chmod`] of the entry `name` directly in this directory.
    pub fn chmod_at(&self, name: &CStr, mode: u32) -> Result<bool> {
        self.chmod(Path::new(OsStr::from_bytes(name.to_bytes())), mode)
    }
}

/// Most times [`openat2`] asks again after `EAGAIN`.
pub const OPENAT2_ATTEMPTS: u32 = 64;

/// `openat2(2)` retried on `EAGAIN`, at most [`OPENAT2_ATTEMPTS`] times. With
/// `RESOLVE_IN_ROOT` or `RESOLVE_BENEATH` the kernel answers `EAGAIN` when a rename or a mount
/// anywhere on the host ran while it resolved a `..`, since it then cannot prove the walk
/// stayed inside; it asks the caller to retry. On a busy host (sandboxes starting, builds
/// mounting) a single try fails now and then. The bound keeps a host under a rename storm
/// from spinning: the last `EAGAIN` is returned.
///
/// Errors: those of `openat2(2)`.
pub fn openat2<Fd: AsFd, P: rustix::path::Arg + Copy>(
    dirfd: Fd,
    path: P,
    flags: OFlags,
    mode: Mode,
    resolve: ResolveFlags,
) -> rustix::io::Result<OwnedFd> {
    let mut attempt = 1;
    loop {
        match rustix::fs::openat2(dirfd.as_fd(), path, flags, mode, resolve) {
            Err(Errno::AGAIN) if attempt < OPENAT2_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests;
