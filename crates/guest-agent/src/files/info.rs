//! `FileInfo` from `lstat` metadata.

use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cove_guest_protocol::{FileInfo, FileType, GuestPath};

use super::path::to_guest;
use crate::error::AgentError;
use crate::users::UserDb;

/// Describes `path` from its metadata (`lstat` unless the caller followed it on purpose).
pub fn file_info(path: &Path, meta: &Metadata, db: &UserDb) -> FileInfo {
    let ft = meta.file_type();
    let file_type = if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_dir() {
        FileType::Dir
    } else if ft.is_file() {
        FileType::File
    } else {
        FileType::Other
    };
    let name = match path.file_name() {
        Some(n) => n.as_bytes().to_vec(),
        None => b"/".to_vec(),
    };
    let symlink_target = if ft.is_symlink() {
        std::fs::read_link(path).ok().map(|t| to_guest(&t))
    } else {
        None
    };
    FileInfo {
        name: GuestPath(name),
        path: to_guest(path),
        file_type,
        size: meta.size(),
        mode: meta.mode() & 0o7777,
        owner: db.user_name(meta.uid()),
        group: db.group_name(meta.gid()),
        mtime_ms: meta.mtime().saturating_mul(1000) + meta.mtime_nsec() / 1_000_000,
        symlink_target,
    }
}

/// `lstat`s `path` and describes it.
pub fn lstat_info(path: &Path, db: &UserDb) -> Result<FileInfo, AgentError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| AgentError::io("stat", path, &e))?;
    Ok(file_info(path, &meta, db))
}
