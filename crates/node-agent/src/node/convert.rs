//! Translation between the node contract's types and the guest protocol's, and the one mapping
//! of guest errors to [`NodeError`]s. The call site says what a guest "not found" refers to
//! ([`Call`]), so the contract's errors are typed and the control plane needs no hint.

use cove_domain::CommandState;
use cove_guest_protocol as g;
use cove_node_api::{
    CommandInfo, FileEvent, FileEventKind, FileInfo, FileType, NodeError, OutputStream, Program,
    PtySize, SandboxPath, SetXattrsRequest, SpawnRequest, WatchRequest, WriteFileRequest,
};

use crate::guest::GuestError;

/// What a guest call was about, so its errors map to the right [`NodeError`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Call<'a> {
    /// Starting a command: not found = a missing `cwd`.
    Spawn,
    /// A call on one command: not found = unknown command.
    Command(&'a str),
    /// Listing commands.
    Commands,
    /// A file call; the field its path came from (`path`, `from`).
    File(&'static str),
}

/// Maps a guest client error for `call`.
pub(super) fn guest_err(call: Call<'_>, e: GuestError) -> NodeError {
    match e {
        GuestError::Guest { code, message } => guest_code(call, code, message),
        GuestError::Unavailable(m) => NodeError::AgentUnavailable(m),
        GuestError::Protocol(m) => NodeError::AgentUnavailable(format!("protocol error: {m}")),
        GuestError::Timeout => NodeError::AgentUnavailable("no answer in time".into()),
        GuestError::TooOld(m) => NodeError::Unsupported(m),
    }
}

fn guest_code(call: Call<'_>, code: g::ErrorCode, message: String) -> NodeError {
    use g::ErrorCode as G;
    let field = match call {
        Call::Spawn => "command".to_string(),
        Call::Command(cid) => cid.to_string(),
        Call::Commands => "commands".to_string(),
        Call::File(f) => f.to_string(),
    };
    match code {
        G::NotFound => match call {
            Call::Spawn => NodeError::InvalidArgument {
                field: "cwd".into(),
                message,
            },
            Call::Command(cid) => NodeError::CommandNotFound(cid.to_string()),
            Call::Commands => NodeError::Internal(format!("guest: {message}")),
            Call::File(_) => NodeError::FileNotFound(message),
        },
        G::InvalidArgument => NodeError::InvalidArgument { field, message },
        G::WrongType => NodeError::WrongType { field, message },
        G::UnknownUser => NodeError::InvalidArgument {
            field: "user".into(),
            message,
        },
        G::AlreadyExists => NodeError::AlreadyExists(message),
        G::PermissionDenied => NodeError::PermissionDenied(message),
        G::FailedPrecondition => NodeError::FailedPrecondition(message),
        G::NoSpace => NodeError::NoSpace(message),
        G::TooLarge => NodeError::TooLarge(message),
        G::SpawnFailed => NodeError::SpawnFailed(message),
        G::UnsupportedVersion | G::Protocol | G::Internal => {
            NodeError::Internal(format!("guest: {message}"))
        }
    }
}

pub(super) fn path(p: SandboxPath) -> g::GuestPath {
    g::GuestPath(p.0)
}

fn sandbox_path(p: g::GuestPath) -> SandboxPath {
    SandboxPath(p.0)
}

pub(super) fn pty(s: PtySize) -> g::PtySize {
    g::PtySize {
        cols: s.cols,
        rows: s.rows,
    }
}

pub(super) fn spawn(r: SpawnRequest) -> g::SpawnRequest {
    g::SpawnRequest {
        command_id: r.command_id,
        program: match r.program {
            Program::Argv(a) => g::Program::Argv(a),
            Program::Shell(s) => g::Program::Shell(s),
        },
        env: r.env,
        cwd: r.cwd.map(path),
        user: r.user,
        stdin: r.stdin,
        timeout_ms: r.timeout_ms,
        pty: r.pty.map(pty),
    }
}

pub(super) fn write(r: WriteFileRequest) -> g::WriteFileRequest {
    g::WriteFileRequest {
        path: path(r.path),
        user: r.user,
        mode: r.mode,
        max_bytes: r.max_bytes,
    }
}

pub(super) fn set_xattrs(r: SetXattrsRequest) -> g::SetXattrsRequest {
    g::SetXattrsRequest {
        path: path(r.path),
        user: r.user,
        namespace: r.namespace,
        entries: r
            .entries
            .into_iter()
            .map(|(k, v)| (k, g::XattrValue(v)))
            .collect(),
    }
}

pub(super) fn watch(r: WatchRequest) -> g::WatchRequest {
    g::WatchRequest {
        path: path(r.path),
        user: r.user,
        recursive: r.recursive,
    }
}

pub(super) fn stream(s: g::Stream) -> OutputStream {
    match s {
        g::Stream::Stdout => OutputStream::Stdout,
        g::Stream::Stderr => OutputStream::Stderr,
    }
}

pub(super) fn command(c: g::CommandInfo) -> CommandInfo {
    CommandInfo {
        command_id: c.command_id,
        pid: c.pid,
        argv: c.argv,
        user: c.user,
        cwd: c.cwd,
        started_at_ms: c.started_at_ms,
        ended_at_ms: c.ended_at_ms,
        state: match c.state {
            g::CommandState::Running => CommandState::Running,
            g::CommandState::Exited => CommandState::Exited,
        },
        exit_code: c.exit_code,
        signal: c.signal,
        timed_out: c.timed_out,
        output_bytes: c.output_bytes,
        truncated: c.truncated,
        stdin_open: c.stdin_open,
        oom_killed: c.oom_killed,
        pty: c.pty,
    }
}

fn file_type(t: g::FileType) -> FileType {
    match t {
        g::FileType::File => FileType::File,
        g::FileType::Dir => FileType::Dir,
        g::FileType::Symlink => FileType::Symlink,
        g::FileType::Other => FileType::Other,
    }
}

pub(super) fn file(f: g::FileInfo) -> FileInfo {
    FileInfo {
        name: sandbox_path(f.name),
        path: sandbox_path(f.path),
        file_type: file_type(f.file_type),
        size: f.size,
        mode: f.mode,
        owner: f.owner,
        group: f.group,
        mtime_ms: f.mtime_ms,
        symlink_target: f.symlink_target.map(sandbox_path),
    }
}

pub(super) fn event(e: g::FileEvent) -> FileEvent {
    FileEvent {
        kind: match e.kind {
            g::FileEventKind::Create => FileEventKind::Create,
            g::FileEventKind::Write => FileEventKind::Write,
            g::FileEventKind::Remove => FileEventKind::Remove,
            g::FileEventKind::Rename => FileEventKind::Rename,
            g::FileEventKind::Chmod => FileEventKind::Chmod,
            g::FileEventKind::Overflow => FileEventKind::Overflow,
        },
        path: sandbox_path(e.path),
        file_type: file_type(e.file_type),
        from: e.from.map(sandbox_path),
    }
}
