//! Files in a sandbox.
//!
//! # Names are bytes
//! Linux file names are bytes, JSON strings are UTF-8. Every path and name in an answer is a
//! string (`path`, `name`, `symlink_target`, `from`); when the bytes are not valid UTF-8 the string
//! is a lossy rendering (U+FFFD for bad bytes) and the exact bytes come along base64-encoded
//! (standard alphabet, padded) in the matching `*_b64` field, which is absent otherwise. Requests
//! take a path as `path` (UTF-8; percent-encoded in a query) or as `path_b64` (any bytes), exactly
//! one of the two; a `path` query value that does not decode to UTF-8 is refused rather than
//! guessed. Paths are resolved inside the sandbox (relative ones against the user's home), so
//! `..` and symlinks never leave it. A NUL byte, a component over 255 bytes or a path over 4096
//! bytes is `400 invalid_argument`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Largest file one upload may write, in bytes (1 GiB); larger is `413 payload_too_large` and
/// leaves no file behind. Each file of a multi-file upload has this limit. An upload also never
/// takes the last MiB of the sandbox's disk: with less free it is `507 no_space` at once, and
/// one that fills the disk midway is `507 no_space` with nothing left behind.
pub const MAX_UPLOAD_BYTES: u64 = 1 << 30;

/// Deepest `files:list` (`depth`, 1 = the directory's own entries).
pub const MAX_LIST_DEPTH: u32 = 64;

/// Type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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

/// Metadata of a file (from `lstat`: a symlink is described, not its target).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileInfo {
    /// Final path component (lossy UTF-8).
    pub name: String,
    /// `name`'s exact bytes, base64, when they are not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_b64: Option<String>,
    /// Absolute path inside the sandbox (lossy UTF-8).
    pub path: String,
    /// `path`'s exact bytes, base64, when they are not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    /// Type.
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// Size in bytes (of the link itself for a symlink).
    pub size: u64,
    /// Permission bits (e.g. 420 = 0o644).
    pub mode: u32,
    /// Owner user name (the uid in decimal when the sandbox has no name for it).
    pub owner: String,
    /// Owner group name (the gid in decimal when the sandbox has no name for it).
    pub group: String,
    /// Modification time, RFC 3339 in UTC (`Z`), millisecond precision.
    pub mtime: DateTime<Utc>,
    /// Target of a symlink as stored in the link (lossy UTF-8); the target may not exist.
    pub symlink_target: Option<String>,
    /// `symlink_target`'s exact bytes, base64, when they are not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target_b64: Option<String>,
    /// Owner uid: given for a volume's files (`/v1/volumes/{name}/files`), absent for a
    /// sandbox's (which name the owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Owner gid (as `uid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Last access, RFC 3339 in UTC, millisecond precision (as `uid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atime: Option<DateTime<Utc>>,
    /// Last status change, RFC 3339 in UTC, millisecond precision (as `uid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctime: Option<DateTime<Utc>>,
}

/// `GET /v1/sandboxes/{id}/files:list?path=&depth=` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileList {
    /// Entries (not including the listed directory itself), in name order, each directory's
    /// contents right after it. Symlinks are listed (broken ones too) and never descended into.
    pub entries: Vec<FileInfo>,
}

/// `GET /v1/sandboxes/{id}/files:exists?path=` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileExists {
    /// Whether something (a file, directory, or a symlink, even a broken one) is at the path.
    pub exists: bool,
}

/// `POST /v1/sandboxes/{id}/files:mkdir` body: `mkdir -p`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MakeDirRequest {
    /// Directory to create (UTF-8), with its missing parents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The directory's path as base64 bytes (instead of `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    /// Owner of the created directories, and whose home resolves a relative path (default:
    /// the sandbox's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `POST /v1/sandboxes/{id}/files:move` body: rename `from` to `to` (same filesystem; an
/// existing file at `to` is replaced, an existing non-empty directory is `409 already_exists`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    /// Source path (UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Source path as base64 bytes (instead of `from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_b64: Option<String>,
    /// Destination path (UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Destination path as base64 bytes (instead of `to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_b64: Option<String>,
    /// Whose home resolves relative paths (default: the sandbox's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `POST /v1/sandboxes/{id}/files:upload` answer: the written files, in the order of the parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UploadedFiles {
    /// One entry per file part.
    pub files: Vec<FileInfo>,
}

/// Kind of a change reported by `GET /v1/sandboxes/{id}/files:watch` (also the SSE event name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileEventKind {
    /// A path appeared (created, or moved in from outside the watched tree). For a new
    /// directory of a recursive watch, what it already holds is reported as `create` too (a
    /// path may then be reported twice).
    Create,
    /// A file's content was modified (repeats within one batch are coalesced).
    Write,
    /// A path disappeared (removed, or moved out of the watched tree).
    Remove,
    /// A path was renamed within the watched tree: `path` is the new name, `from` the old.
    Rename,
    /// Metadata changed: mode, owner, timestamps, link count.
    Chmod,
    /// Events were lost (the sandbox's queue overflowed, or the watch reached its directory
    /// limit); list the directory to catch up. `path` is the watched directory.
    Overflow,
}

impl FileEventKind {
    /// The wire string (also the SSE `event:` name).
    pub fn as_str(self) -> &'static str {
        match self {
            FileEventKind::Create => "create",
            FileEventKind::Write => "write",
            FileEventKind::Remove => "remove",
            FileEventKind::Rename => "rename",
            FileEventKind::Chmod => "chmod",
            FileEventKind::Overflow => "overflow",
        }
    }
}

/// One change below a watched directory: the `data` of an SSE event whose name is `event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileEvent {
    /// What happened.
    pub event: FileEventKind,
    /// Absolute path inside the sandbox (lossy UTF-8).
    pub path: String,
    /// `path`'s exact bytes, base64, when they are not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    /// Type of the path when the event was read (for a path already gone: `dir` or `file`).
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// For `rename`: the old path (lossy UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// `from`'s exact bytes, base64, when they are not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_b64: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_wire_names() {
        let ev = FileEvent {
            event: FileEventKind::Rename,
            path: "/a".into(),
            path_b64: None,
            file_type: FileType::File,
            from: Some("/b".into()),
            from_b64: None,
        };
        let json = serde_json::to_value(&ev).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"event": "rename", "path": "/a", "type": "file", "from": "/b"})
        );
        for k in [
            FileEventKind::Create,
            FileEventKind::Write,
            FileEventKind::Remove,
            FileEventKind::Rename,
            FileEventKind::Chmod,
            FileEventKind::Overflow,
        ] {
            assert_eq!(
                serde_json::to_value(k).expect("json"),
                serde_json::json!(k.as_str())
            );
        }
    }

    #[test]
    fn requests_reject_unknown_fields() {
        let bad = serde_json::from_str::<MoveRequest>(r#"{"from":"/a","to":"/b","force":true}"#);
        assert!(bad.is_err());
        let ok: MakeDirRequest = serde_json::from_str(r#"{"path":"/a/b"}"#).expect("mkdir");
        assert_eq!(ok.path.as_deref(), Some("/a/b"));
    }
}
