//! Turning inotify's raw events into protocol [`FileEvent`]s.
//!
//! - `IN_CREATE` → `Create` (a new directory is watched at once and what it already holds is
//!   reported as `Create` too); `IN_MODIFY` → `Write` (repeats for one path coalesced within a
//!   batch); `IN_DELETE` → `Remove`; `IN_ATTRIB` → `Chmod`.
//! - `IN_MOVED_FROM` + `IN_MOVED_TO` with one cookie → `Rename` (`from` = old path); a move out
//!   of the tree → `Remove`, a move into it → `Create`.
//! - `IN_Q_OVERFLOW` → `Overflow` on the root: events were lost.
//! - The root removed or moved away (`IN_DELETE_SELF`, `IN_MOVE_SELF`, its `IN_IGNORED`) →
//!   `Remove` of the root, and the watch ends.

use std::fs;
use std::path::PathBuf;

use cove_guest_protocol::{FileEvent, FileEventKind, FileType};
use nix::sys::inotify::{AddWatchFlags, InotifyEvent};

use super::super::path::to_guest;
use super::tree::{child, file_type_of, Tree};

/// Whether the watch goes on after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep watching.
    Continue,
    /// The root is gone: the watch is over.
    RootGone,
}

/// A `IN_MOVED_FROM` waiting for its `IN_MOVED_TO`.
struct MovedFrom {
    cookie: u32,
    path: PathBuf,
    is_dir: bool,
}

/// Translates one batch of raw events (everything read until the queue was empty) into `out`.
pub fn translate(tree: &mut Tree, raw: Vec<InotifyEvent>, out: &mut Vec<FileEvent>) -> Flow {
    let mut moves: Vec<MovedFrom> = Vec::new();
    let mut flow = Flow::Continue;
    for ev in raw {
        let m = ev.mask;
        if m.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            push(
                out,
                FileEventKind::Overflow,
                tree.root().to_path_buf(),
                FileType::Dir,
            );
            continue;
        }
        if m.contains(AddWatchFlags::IN_IGNORED) {
            if tree.dropped(ev.wd) {
                flow = Flow::RootGone;
            }
            continue;
        }
        let Some(dir) = tree.dir(ev.wd).map(|d| d.to_path_buf()) else {
            continue;
        };
        let is_dir = m.contains(AddWatchFlags::IN_ISDIR);
        if ev.name.is_none() {
            // Events about a watched directory itself: only the root's matter (the others are
            // reported by their parent's watch).
            if tree.is_root(ev.wd)
                && m.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
            {
                flow = Flow::RootGone;
            } else if tree.is_root(ev.wd) && m.contains(AddWatchFlags::IN_ATTRIB) {
                push(out, FileEventKind::Chmod, dir, FileType::Dir);
            }
            continue;
        }
        let path = child(&dir, ev.name.as_ref());
        if m.contains(AddWatchFlags::IN_CREATE) {
            push(
                out,
                FileEventKind::Create,
                path.clone(),
                current_type(&path, is_dir),
            );
            if is_dir {
                tree.add_new_dir(&path, out);
            }
        } else if m.contains(AddWatchFlags::IN_MODIFY) {
            let dup = out
                .last()
                .is_some_and(|l| l.kind == FileEventKind::Write && l.path.0 == to_guest(&path).0);
            if !dup {
                push(
                    out,
                    FileEventKind::Write,
                    path.clone(),
                    current_type(&path, is_dir),
                );
            }
        } else if m.contains(AddWatchFlags::IN_DELETE) {
            push(out, FileEventKind::Remove, path, gone_type(is_dir));
        } else if m.contains(AddWatchFlags::IN_ATTRIB) {
            push(
                out,
                FileEventKind::Chmod,
                path.clone(),
                current_type(&path, is_dir),
            );
        } else if m.contains(AddWatchFlags::IN_MOVED_FROM) {
            moves.push(MovedFrom {
                cookie: ev.cookie,
                path,
                is_dir,
            });
        } else if m.contains(AddWatchFlags::IN_MOVED_TO) {
            match moves.iter().position(|f| f.cookie == ev.cookie) {
                Some(i) => {
                    let from = moves.swap_remove(i);
                    if is_dir {
                        tree.moved(&from.path, &path);
                    }
                    out.push(FileEvent {
                        kind: FileEventKind::Rename,
                        path: to_guest(&path),
                        file_type: current_type(&path, is_dir),
                        from: Some(to_guest(&from.path)),
                    });
                }
                None => {
                    push(
                        out,
                        FileEventKind::Create,
                        path.clone(),
                        current_type(&path, is_dir),
                    );
                    if is_dir {
                        tree.add_new_dir(&path, out);
                    }
                }
            }
        }
    }
    // Moves whose other half is outside the tree.
    for gone in moves {
        if gone.is_dir {
            tree.forget_below(&gone.path);
        }
        push(
            out,
            FileEventKind::Remove,
            gone.path,
            gone_type(gone.is_dir),
        );
    }
    if flow == Flow::RootGone {
        push(
            out,
            FileEventKind::Remove,
            tree.root().to_path_buf(),
            FileType::Dir,
        );
    }
    flow
}

fn push(out: &mut Vec<FileEvent>, kind: FileEventKind, path: PathBuf, file_type: FileType) {
    out.push(FileEvent {
        kind,
        path: to_guest(&path),
        file_type,
        from: None,
    });
}

/// The type of a path that should exist: `lstat` now, else the kernel's directory flag.
fn current_type(path: &std::path::Path, is_dir: bool) -> FileType {
    match fs::symlink_metadata(path) {
        Ok(meta) => file_type_of(&meta),
        Err(_) => gone_type(is_dir),
    }
}

fn gone_type(is_dir: bool) -> FileType {
    if is_dir {
        FileType::Dir
    } else {
        FileType::File
    }
}
