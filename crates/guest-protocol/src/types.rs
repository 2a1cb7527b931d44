//! Message types of the host ⇄ guest protocol.
//!
//! Strings that name files are raw bytes ([`GuestPath`]): Linux names are bytes, and a name with a
//! newline, invalid UTF-8 or a leading dash must round-trip exactly.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A path inside the sandbox, as raw bytes (no NUL). Relative paths are resolved against the
/// requesting user's home directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestPath(#[serde(with = "serde_bytes")] pub Vec<u8>);

/// A request from the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First frame of every connection.
    Hello {
        /// Protocol version the host speaks ([`crate::PROTOCOL_VERSION`]).
        version: u32,
    },
    /// Liveness check; answered with [`Response::Ok`].
    Ping,
    /// Start a command. Answered once the process runs with [`Response::SpawnedCommand`] on a
    /// connection of version [`crate::SPAWN_INFO_VERSION`] or later, with [`Response::Spawned`]
    /// on an older one, or with
    /// [`Response::Error`] (`NotFound` for a missing cwd, `InvalidArgument`, `UnknownUser`, ...)
    /// before anything ran.
    Spawn(SpawnRequest),
    /// Stream a command's output from a byte offset (streaming; needs its own connection).
    Attach {
        /// Command id given at spawn.
        command_id: String,
        /// Offset into the command's combined output (stdout and stderr bytes counted together
        /// in the order they were read).
        offset: u64,
        /// Keep streaming until the command exits (`true`) or stop at the end of what is kept.
        follow: bool,
    },
    /// Write bytes to a command's stdin. Answered with `Ok`, or `FailedPrecondition` when the
    /// command was started without stdin or its stdin is closed, `NotFound` for an unknown command.
    StdinWrite {
        /// Command id.
        command_id: String,
        /// Bytes to write (at most [`crate::MAX_CHUNK_BYTES`]).
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Close a command's stdin (the process reads EOF). Same errors as `StdinWrite`.
    StdinClose {
        /// Command id.
        command_id: String,
    },
    /// Send a signal to the command's whole process group. Answered with `Ok` after delivery.
    Signal {
        /// Command id.
        command_id: String,
        /// Signal number (Linux numbering, e.g. 15 = SIGTERM).
        signal: i32,
    },
    /// Kill the command's process tree: SIGTERM to the group, then SIGKILL after `grace_ms`.
    /// Answered with [`Response::Command`] only once every process of the group is gone.
    Kill {
        /// Command id.
        command_id: String,
        /// Milliseconds between SIGTERM and SIGKILL.
        grace_ms: u64,
    },
    /// Get one command's state. Answered with [`Response::Command`].
    GetCommand {
        /// Command id.
        command_id: String,
    },
    /// List every command the agent still keeps. Answered with [`Response::Commands`], preceded by
    /// [`Response::CommandsPart`] frames when the list does not fit one frame.
    ListCommands,
    /// Forget a finished command and delete its kept output. `FailedPrecondition` while it runs.
    ForgetCommand {
        /// Command id.
        command_id: String,
    },
    /// Read a file (streaming; needs its own connection).
    ReadFile {
        /// Path to read; symlinks are followed inside the sandbox.
        path: GuestPath,
        /// User whose home resolves a relative path.
        user: Option<String>,
        /// First byte to read.
        offset: u64,
        /// Bytes to read at most; `None` reads to the end.
        length: Option<u64>,
    },
    /// Write a file (streaming; needs its own connection). Data follows as `Data` frames.
    WriteFile(WriteFileRequest),
    /// A chunk of an open `WriteFile` upload.
    Data {
        /// Bytes (at most [`crate::MAX_CHUNK_BYTES`]).
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// End of an open `WriteFile` upload.
    DataEnd,
    /// `lstat` a path. Answered with [`Response::FileInfo`].
    Stat {
        /// Path.
        path: GuestPath,
        /// User whose home resolves a relative path.
        user: Option<String>,
    },
    /// List a directory. Answered with [`Response::Entries`], preceded by
    /// [`Response::EntriesPart`] frames when the listing does not fit one frame.
    ListDir {
        /// Directory path.
        path: GuestPath,
        /// User whose home resolves a relative path.
        user: Option<String>,
        /// 1 lists the directory itself; n descends n-1 levels below (symlinks are not followed).
        depth: u32,
    },
    /// Create a directory and its missing parents, owned by `user`. Answered with `FileInfo`.
    MakeDir {
        /// Directory path.
        path: GuestPath,
        /// Owner of the created directories (default: root).
        user: Option<String>,
    },
    /// Remove a file, a symlink (not its target) or a directory tree. Answered with `Ok`.
    Remove {
        /// Path.
        path: GuestPath,
        /// User whose home resolves a relative path.
        user: Option<String>,
    },
    /// Rename a path. Answered with `FileInfo` of the destination.
    Rename {
        /// Source path.
        from: GuestPath,
        /// Destination path.
        to: GuestPath,
        /// User whose home resolves relative paths.
        user: Option<String>,
    },
    /// Watch a directory for changes (streaming; needs its own connection). Answered with `Ok`
    /// once the watches are in place (or `Error`), then [`Response::FileEvents`] frames until
    /// the host closes the connection, which removes the watches. The watch ends by itself
    /// (connection closed by the guest) when the watched directory is removed.
    Watch(WatchRequest),
    /// Change the terminal size of a command started with a pty. Answered with `Ok`, or
    /// `FailedPrecondition` when the command has no pty or has exited.
    Resize {
        /// Command id.
        command_id: String,
        /// The new size.
        size: PtySize,
    },
    /// Protocol v2. Replace the extended attributes of a path under one namespace: every
    /// attribute named `namespace` + key is set to its value and every other attribute under
    /// `namespace` is removed; attributes outside it are untouched. A final symlink is not
    /// followed. Answered with `Ok`. `namespace` starts with `user.` (`InvalidArgument`
    /// otherwise); the kernel checks the user's rights as for `setxattr`; a filesystem without
    /// extended attributes is `FailedPrecondition`.
    SetXattrs(SetXattrsRequest),
    /// Protocol v2. Read the extended attributes under `namespace` of several paths (at most
    /// [`crate::MAX_XATTR_PATHS`]). Answered with [`Response::Xattrs`], one map per path in
    /// the request's order; a path that is gone, unreadable or a symlink has an empty map.
    GetXattrs(GetXattrsRequest),
}

/// What [`Request::SetXattrs`] writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetXattrsRequest {
    /// The path (not followed when it is a symlink).
    pub path: GuestPath,
    /// User whose rights apply and whose home resolves a relative path.
    pub user: Option<String>,
    /// Attribute name prefix, `user.` or longer (`user.e2b.`).
    pub namespace: String,
    /// Keys (after the namespace) and values; together at most [`crate::MAX_XATTR_BYTES`]
    /// bytes counting the namespace once per key.
    pub entries: BTreeMap<String, XattrValue>,
}

/// What [`Request::GetXattrs`] reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetXattrsRequest {
    /// The paths (not followed when they are symlinks).
    pub paths: Vec<GuestPath>,
    /// User whose rights apply and whose home resolves relative paths.
    pub user: Option<String>,
    /// Attribute name prefix, `user.` or longer.
    pub namespace: String,
}

/// An extended attribute's value, as raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XattrValue(#[serde(with = "serde_bytes")] pub Vec<u8>);

/// The size of a command's pseudo-terminal, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    /// Columns (1-65535).
    pub cols: u16,
    /// Rows (1-65535).
    pub rows: u16,
}

/// What to watch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchRequest {
    /// Directory to watch (a symlink to a directory is followed).
    pub path: GuestPath,
    /// User whose home resolves a relative path.
    pub user: Option<String>,
    /// Watch every subdirectory too, including those created while watching.
    pub recursive: bool,
}

/// Kind of a change seen by a watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileEventKind {
    /// A path appeared (created, or moved in from outside the watched tree).
    Create,
    /// A file's content was modified.
    Write,
    /// A path disappeared (removed, or moved out of the watched tree).
    Remove,
    /// A path was renamed within the watched tree; `from` holds its old path.
    Rename,
    /// Metadata changed (mode, owner, timestamps, link count).
    Chmod,
    /// The guest's event queue overflowed: events were lost; rescan to catch up.
    Overflow,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEvent {
    /// What happened.
    pub kind: FileEventKind,
    /// Absolute path inside the sandbox (the watched directory for `Overflow`).
    pub path: GuestPath,
    /// Type of the path, from `lstat` at the time the event is read; for a path already gone,
    /// `Dir` or `File` by the kernel's is-a-directory flag.
    pub file_type: FileType,
    /// For `Rename`: the old path.
    pub from: Option<GuestPath>,
}

/// What to run and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// Id the host gives the command (unique in the sandbox).
    pub command_id: String,
    /// What to execute.
    pub program: Program,
    /// Environment added over the user's login defaults (HOME, USER, LOGNAME, SHELL, PATH).
    /// Names are validated by the host; the guest rejects names that are empty or hold `=`/NUL.
    pub env: BTreeMap<String, String>,
    /// Working directory; `None` = the user's home. Must exist (`NotFound` otherwise).
    pub cwd: Option<GuestPath>,
    /// User name from the sandbox's `/etc/passwd`; `None` = root.
    pub user: Option<String>,
    /// Keep stdin open as a pipe the host writes to; otherwise stdin is `/dev/null`.
    pub stdin: bool,
    /// Kill the process tree after this many milliseconds (`None` = never).
    pub timeout_ms: Option<u64>,
    /// Run on a new pseudo-terminal of this size: stdin, stdout and stderr are its slave side
    /// and it is the controlling terminal of the command's session. Output then comes as
    /// `Stdout` only, and stdin is always writable (`stdin` is ignored).
    pub pty: Option<PtySize>,
}

/// The program of a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Program {
    /// Exec this argv directly (argv\[0\] is looked up in PATH).
    Argv(Vec<String>),
    /// Run through `/bin/bash -l -c` where bash exists, else `/bin/sh -c`.
    Shell(String),
}

/// A file upload's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteFileRequest {
    /// Destination path. Missing parent directories are created, owned by `user`.
    pub path: GuestPath,
    /// Owner of the file and of created parents (default root).
    pub user: Option<String>,
    /// Permission bits of the file (default 0o644, or the old file's mode when replacing).
    pub mode: Option<u32>,
    /// Refuse uploads larger than this many bytes (`TooLarge`, nothing written).
    pub max_bytes: Option<u64>,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A response from the guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Handshake answer.
    Hello {
        /// Protocol version the guest speaks.
        version: u32,
        /// The guest agent's build version (its crate version).
        agent_version: String,
    },
    /// Success without a payload.
    Ok,
    /// The command runs (the spawn answer before [`crate::SPAWN_INFO_VERSION`]).
    Spawned {
        /// Process id (inside the sandbox's pid namespace) of the command's leader.
        pid: u32,
    },
    /// A chunk of a command's output.
    Output {
        /// Offset of `data`'s first byte in the command's combined output.
        offset: u64,
        /// Stream the bytes came from.
        stream: Stream,
        /// The bytes, exactly as the process wrote them.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The command ended; the last frame of an `Attach`.
    Exited(CommandInfo),
    /// One command's state.
    Command(CommandInfo),
    /// Every command the agent keeps.
    Commands(Vec<CommandInfo>),
    /// A chunk of file data.
    Data {
        /// Bytes.
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// End of a stream.
    End,
    /// Metadata of one file.
    FileInfo(FileInfo),
    /// A directory listing.
    Entries(Vec<FileInfo>),
    /// The request failed.
    Error {
        /// Stable code.
        code: ErrorCode,
        /// Human-readable detail (paths are the sandbox's, never the host's).
        message: String,
    },
    /// A leading part of a directory listing too large for one frame. Zero or more parts precede
    /// the final [`Response::Entries`] of the same request; the listing is their concatenation.
    EntriesPart(Vec<FileInfo>),
    /// A leading part of a command list too large for one frame. Zero or more parts precede the
    /// final [`Response::Commands`] of the same request; the list is their concatenation.
    CommandsPart(Vec<CommandInfo>),
    /// Changes seen by a [`Request::Watch`], in the order they happened.
    FileEvents(Vec<FileEvent>),
    /// In an `Attach` stream: output bytes `[offset, offset + len)` were dropped (the middle of
    /// an output larger than the agent keeps); the stream continues at `offset + len`.
    Gap {
        /// Offset of the first dropped byte (the reader's position).
        offset: u64,
        /// Number of dropped bytes.
        len: u64,
    },
    /// Protocol v2. The answer to [`Request::GetXattrs`]: per path, its attributes under the
    /// namespace (keys without the namespace). Each map holds at most
    /// [`crate::MAX_XATTR_BYTES`] bytes of keys and values; attributes past that are left out.
    Xattrs(Vec<BTreeMap<String, XattrValue>>),
    /// Protocol v3. The command runs: its state just after the start, as
    /// [`Request::GetCommand`] would answer it (the spawn answer from
    /// [`crate::SPAWN_INFO_VERSION`] on).
    SpawnedCommand(CommandInfo),
}

/// Stable error codes of the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The host's protocol version is not spoken.
    UnsupportedVersion,
    /// A malformed or out-of-order frame.
    Protocol,
    /// A bad argument (empty argv, NUL in a name, over-long name, ...).
    InvalidArgument,
    /// No such command, file or directory.
    NotFound,
    /// The path exists but is the wrong type (a file where a directory is needed, ...).
    WrongType,
    /// A file or directory is already there.
    AlreadyExists,
    /// The sandbox user may not do this.
    PermissionDenied,
    /// The user is not in the sandbox's `/etc/passwd`.
    UnknownUser,
    /// The operation does not apply in the current state (stdin closed, command still running).
    FailedPrecondition,
    /// The sandbox's disk is full.
    NoSpace,
    /// The upload exceeds `max_bytes`.
    TooLarge,
    /// The process could not be started (fork failed, limit reached).
    SpawnFailed,
    /// Anything else; details in the message.
    Internal,
}

/// Lifecycle of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandState {
    /// The process runs.
    Running,
    /// The process ended (exit or signal).
    Exited,
}

/// A command's state as the guest knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The timeout fired and the tree was killed.
    pub timed_out: bool,
    /// Total bytes of output produced so far (the offset after the last byte).
    pub output_bytes: u64,
    /// Output beyond the kept cap was dropped.
    pub truncated: bool,
    /// The command was started with a stdin pipe that is still open.
    pub stdin_open: bool,
    /// The OOM killer killed a process of this command: its own memory cgroup counted the kill
    /// (without a command cgroup: the sandbox's cgroup counted one while the command ran, and
    /// the command ended by SIGKILL or exited 137, a shell reporting a SIGKILLed child).
    pub oom_killed: bool,
    /// The command runs on a pseudo-terminal.
    pub pty: bool,
}

/// Type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileType {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (not followed).
    Symlink,
    /// Anything else (fifo, socket, device).
    Other,
}

/// Metadata of a file, from `lstat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileInfo {
    /// Final path component.
    pub name: GuestPath,
    /// Absolute path inside the sandbox.
    pub path: GuestPath,
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
    pub symlink_target: Option<GuestPath>,
}
