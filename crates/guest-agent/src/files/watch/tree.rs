//! The watched tree: one inotify instance, and the directory each watch descriptor stands for.
//!
//! The root is watched through its path (a symlink to a directory is followed); subdirectories
//! are added with `IN_DONT_FOLLOW | IN_ONLYDIR`, so a symlink swapped in for a directory is never
//! watched through. A tree holds at most [`MAX_WATCH_DIRS`] directories.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use cove_guest_protocol::{ErrorCode, FileEvent, FileEventKind, FileType};
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use super::super::path::{display, to_guest};
use crate::error::AgentError;

/// Most directories one watch covers.
pub const MAX_WATCH_DIRS: usize = 8192;

/// What every watch asks the kernel for.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
}

/// An inotify instance and the directories it watches.
pub struct Tree {
    inotify: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    root: PathBuf,
    root_wd: WatchDescriptor,
    recursive: bool,
    /// Paths below the root that are never watched or reported (Cove's own).
    hidden: Vec<PathBuf>,
    /// The directory limit was hit after start; further directories are not watched.
    pub full: bool,
}

impl Tree {
    /// Watches `root` (which must be a directory) and, when `recursive`, every directory below.
    /// `TooLarge` beyond [`MAX_WATCH_DIRS`] directories. Nothing at or below a `hidden` path is
    /// watched or reported.
    pub fn new(root: PathBuf, recursive: bool, hidden: Vec<PathBuf>) -> Result<Tree, AgentError> {
        let meta = fs::metadata(&root).map_err(|e| AgentError::io("watch", &root, &e))?;
        if !meta.is_dir() {
            return Err(AgentError::new(
                ErrorCode::WrongType,
                format!("{} is not a directory", display(&root)),
            ));
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| AgentError::io_plain("inotify_init", &e.into()))?;
        let root_wd = inotify
            .add_watch(&root, mask() | AddWatchFlags::IN_ONLYDIR)
            .map_err(|e| AgentError::io("watch", &root, &e.into()))?;
        let mut tree = Tree {
            inotify,
            dirs: HashMap::from([(root_wd, root.clone())]),
            root: root.clone(),
            root_wd,
            recursive,
            hidden,
            full: false,
        };
        if recursive {
            tree.add_below(&root, None);
            if tree.full {
                return Err(AgentError::new(
                    ErrorCode::TooLarge,
                    format!(
                        "{} holds more than {MAX_WATCH_DIRS} directories; watch a smaller tree \
                         or without recursion",
                        display(&root)
                    ),
                ));
            }
        }
        Ok(tree)
    }

    /// The watched directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether subdirectories are watched.
    pub fn recursive(&self) -> bool {
        self.recursive
    }

    /// Number of directories watched.
    pub fn len(&self) -> usize {
        self.dirs.len()
    }

    /// Whether nothing is watched (never true while the root is).
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Whether `path` (as events name it) is hidden from this watch.
    pub fn hides(&self, path: &Path) -> bool {
        self.hidden.iter().any(|h| path.starts_with(h))
    }

    /// Whether `wd` is the root's watch.
    pub fn is_root(&self, wd: WatchDescriptor) -> bool {
        wd == self.root_wd
    }

    /// The directory of a watch descriptor (`None` for one already forgotten).
    pub fn dir(&self, wd: WatchDescriptor) -> Option<&Path> {
        self.dirs.get(&wd).map(PathBuf::as_path)
    }

    /// Reads the events the kernel has queued (`EAGAIN` when there are none).
    pub fn read(&self) -> Result<Vec<InotifyEvent>, Errno> {
        self.inotify.read_events()
    }

    /// Watches the new directory `dir` and everything below it. With `created`, reports every
    /// entry found below it as `Create`: they may have appeared before the watch was in place
    /// (`mkdir -p a/b/c` is seen as `a` only).
    pub fn add_new_dir(&mut self, dir: &Path, created: &mut Vec<FileEvent>) {
        if !self.recursive || self.full {
            return;
        }
        if !self.add_one(dir) {
            return;
        }
        self.add_below(dir, Some(created));
    }

    /// Adds a watch for one subdirectory; `false` when it is not a directory (anymore) or the
    /// limit is reached.
    fn add_one(&mut self, dir: &Path) -> bool {
        if self.hides(dir) {
            return false;
        }
        if self.dirs.len() >= MAX_WATCH_DIRS {
            self.full = true;
            return false;
        }
        let flags = mask() | AddWatchFlags::IN_ONLYDIR | AddWatchFlags::IN_DONT_FOLLOW;
        match self.inotify.add_watch(dir, flags) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_path_buf());
                true
            }
            // Gone again, or replaced by a non-directory: nothing to watch.
            Err(_) => false,
        }
    }

    /// Adds every directory below `top` (already watched), depth first, without following
    /// symlinks; reports what it finds as `Create` into `created` when given.
    fn add_below(&mut self, top: &Path, mut created: Option<&mut Vec<FileEvent>>) {
        let mut stack = vec![top.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<_> = entries
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .collect();
            names.sort();
            for name in names {
                let path = dir.join(&name);
                if self.hides(&path) {
                    continue;
                }
                let Ok(meta) = fs::symlink_metadata(&path) else {
                    continue;
                };
                let file_type = file_type_of(&meta);
                if let Some(out) = created.as_deref_mut() {
                    out.push(FileEvent {
                        kind: FileEventKind::Create,
                        path: to_guest(&path),
                        file_type,
                        from: None,
                    });
                }
                if file_type == FileType::Dir {
                    if !self.add_one(&path) {
                        if self.full {
                            return;
                        }
                        continue;
                    }
                    stack.push(path);
                }
            }
        }
    }

    /// A watched directory moved from `from` to `to` inside the tree: its watches (and those
    /// below it) now stand for the new paths.
    pub fn moved(&mut self, from: &Path, to: &Path) {
        for path in self.dirs.values_mut() {
            if let Ok(rest) = path.strip_prefix(from) {
                *path = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
            }
        }
    }

    /// A directory left the tree (moved out): stops watching it and everything below it.
    pub fn forget_below(&mut self, gone: &Path) {
        let wds: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(wd, p)| **wd != self.root_wd && p.starts_with(gone))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in wds {
            self.dirs.remove(&wd);
            // The kernel answers with IN_IGNORED, which finds no entry any more.
            let _ = self.inotify.rm_watch(wd);
        }
    }

    /// The kernel dropped a watch (its directory was removed); `true` when it was the root's.
    pub fn dropped(&mut self, wd: WatchDescriptor) -> bool {
        self.dirs.remove(&wd);
        wd == self.root_wd
    }
}

impl AsRawFd for Tree {
    /// The inotify descriptor, to poll for readiness; open as long as the tree lives.
    fn as_raw_fd(&self) -> RawFd {
        self.inotify.as_fd().as_raw_fd()
    }
}

/// The protocol type of a file from its `lstat` metadata.
pub fn file_type_of(meta: &fs::Metadata) -> FileType {
    let ft = meta.file_type();
    if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_dir() {
        FileType::Dir
    } else if ft.is_file() {
        FileType::File
    } else {
        FileType::Other
    }
}

/// `dir/name`.
pub fn child(dir: &Path, name: Option<&std::ffi::OsString>) -> PathBuf {
    match name {
        Some(n) => dir.join(OsStr::new(n)),
        None => dir.to_path_buf(),
    }
}
