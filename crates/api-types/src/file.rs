//! Files in a sandbox.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (never followed in metadata).
    Symlink,
    /// Fifo, socket or device.
    Other,
}

/// Metadata of a file (from `lstat`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileInfo {
    /// Final path component.
    pub name: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    /// Type.
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (e.g. 420 = 0o644).
    pub mode: u32,
    /// Owner user name.
    pub owner: String,
    /// Owner group name.
    pub group: String,
    /// Modification time (UTC).
    pub mtime: DateTime<Utc>,
    /// Target of a symlink.
    pub symlink_target: Option<String>,
}

/// `GET /v1/sandboxes/{id}/files:list` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileList {
    /// Entries (not including the listed directory itself).
    pub entries: Vec<FileInfo>,
}
