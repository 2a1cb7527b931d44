//! The node contract's own payloads: commands, files, watches and terminals as the control
//! plane asks for them. Every type is owned and serialisable (serde), so a remote transport can
//! carry it as it is; the node agent translates to and from its guest protocol.

use std::collections::BTreeMap;

use cove_domain::CommandState;
use serde::{Deserialize, Serialize};

/// A path inside a sandbox, as raw bytes: Linux names are bytes, and a name with a newline,
/// invalid UTF-8 or a leading dash must round-trip exactly. Relative paths are resolved against
/// the user's home by the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SandboxPath(pub Vec<u8>);

impl SandboxPath {
    /// The path's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for SandboxPath {
    fn from(s: &str) -> Self {
        SandboxPath(s.as_bytes().to_vec())
    }
}

/// Terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    /// Columns (1–65535).
    pub cols: u16,
    /// Rows (1–65535).
    pub rows: u16,
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Program {
    /// argv, executed directly (argv\[0\] looked up in `PATH`).
    Argv(Vec<String>),
    /// A shell string, run by the user's login shell (`bash -l -c`).
    Shell(String),
}

/// A command to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// Command id chosen by the control plane (`cmd-…`).
    pub command_id: String,
    /// What to run.
    pub program: Program,
    /// Environment on top of the user's login environment.
    pub env: BTreeMap<String, String>,
    /// Working directory (`None`: the user's home). A missing one is
    /// [`crate::NodeError::InvalidArgument`] on field `cwd`.
    pub cwd: Option<SandboxPath>,
    /// User to run as (`None`: the template's default).
    pub user: Option<String>,
    /// Whether stdin is a pipe the caller writes (false: `/dev/null`).
    pub stdin: bool,
    /// Kill the whole command after this many ms (`None`: never).
    pub timeout_ms: Option<u64>,
    /// Run on a pseudo-terminal of this size.
    pub pty: Option<PtySize>,
}

/// Which output stream bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputStream {
    /// Standard output (and a pty's output).
    Stdout,
    /// Standard error.
    Stderr,
}

/// A command's state as the node knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandInfo {
    /// Command id.
    pub command_id: String,
    /// Leader pid inside the sandbox.
    pub pid: u32,
    /// The argv actually executed (for a shell command, the shell's argv).
    pub argv: Vec<String>,
    /// User it runs as.
    pub user: String,
    /// Working directory.
    pub cwd: String,
    /// Start time, Unix milliseconds.
    pub started_at_ms: u64,
    /// End time, Unix milliseconds.
    pub ended_at_ms: Option<u64>,
    /// Running or exited.
    pub state: CommandState,
    /// Exit code when the process exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when the process was killed by a signal.
    pub signal: Option<i32>,
    /// The timeout fired and the command was killed.
    pub timed_out: bool,
    /// Bytes of output produced so far (the offset after the last byte).
    pub output_bytes: u64,
    /// Output beyond the kept cap was dropped.
    pub truncated: bool,
    /// Started with a stdin pipe that is still open.
    pub stdin_open: bool,
    /// Ended by the OOM killer.
    pub oom_killed: bool,
    /// Runs on a pseudo-terminal.
    pub pty: bool,
}

/// Type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileType {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (never followed).
    Symlink,
    /// Anything else (fifo, socket, device).
    Other,
}

/// Metadata of a file, from `lstat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileInfo {
    /// Final path component.
    pub name: SandboxPath,
    /// Absolute path inside the sandbox.
    pub path: SandboxPath,
    /// Type.
    pub file_type: FileType,
    /// Size in bytes (of the link itself for a symlink).
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner name (or the uid in decimal when unknown).
    pub owner: String,
    /// Group name (or the gid in decimal when unknown).
    pub group: String,
    /// Modification time, Unix milliseconds (UTC).
    pub mtime_ms: i64,
    /// Target of a symlink, as stored in the link.
    pub symlink_target: Option<SandboxPath>,
}

/// A file to write atomically (temporary file, fsync, rename).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteFileRequest {
    /// Destination path; missing parents are created, owned by `user`.
    pub path: SandboxPath,
    /// Owner of the new file (`None`: the template's default user).
    pub user: Option<String>,
    /// Permission bits (`None`: 0644).
    pub mode: Option<u32>,
    /// Most bytes accepted ([`crate::NodeError::TooLarge`] beyond; nothing is left).
    pub max_bytes: Option<u64>,
}

/// Extended attributes of one path to replace under a namespace
/// ([`crate::NodeFiles::set_xattrs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetXattrsRequest {
    /// The path (a final symlink is not followed).
    pub path: SandboxPath,
    /// User whose rights apply (`None`: root).
    pub user: Option<String>,
    /// Attribute name prefix: `user.` or longer (`user.e2b.`).
    pub namespace: String,
    /// Keys (after the namespace) and values: after the call these are exactly the path's
    /// attributes under the namespace.
    pub entries: BTreeMap<String, Vec<u8>>,
}

/// Extended attributes of several paths to read under a namespace
/// ([`crate::NodeFiles::xattrs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XattrsRequest {
    /// The paths (final symlinks are not followed).
    pub paths: Vec<SandboxPath>,
    /// User whose rights apply (`None`: root).
    pub user: Option<String>,
    /// Attribute name prefix: `user.` or longer.
    pub namespace: String,
}

/// A directory to watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchRequest {
    /// The directory.
    pub path: SandboxPath,
    /// User whose view is watched.
    pub user: Option<String>,
    /// Include subdirectories (new ones are followed).
    pub recursive: bool,
}

/// What happened to a watched path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileEventKind {
    /// Created.
    Create,
    /// Written (closed after writing).
    Write,
    /// Removed.
    Remove,
    /// Renamed to `path` (from `from`, when known).
    Rename,
    /// Permissions or owner changed.
    Chmod,
    /// Events were lost (the watcher's queue overflowed).
    Overflow,
}

/// One change under a watched directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEvent {
    /// What happened.
    pub kind: FileEventKind,
    /// Absolute path of the entry.
    pub path: SandboxPath,
    /// Its type.
    pub file_type: FileType,
    /// Old path of a rename, when known.
    pub from: Option<SandboxPath>,
}
