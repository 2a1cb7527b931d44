//! Commands and their attachments (data plane).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::CommandState;

/// `POST /v1/sandboxes/{id}/commands` body. Exactly one of `argv` and `shell` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCommandRequest {
    /// Program and arguments, executed directly (argv\[0\] is looked up in PATH).
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// A shell command line, run with `/bin/bash -l -c` (or `/bin/sh -c` where bash is missing).
    #[serde(default)]
    pub shell: Option<String>,
    /// Environment over the sandbox's; names match `[A-Za-z_][A-Za-z0-9_]*`. Values are passed
    /// byte for byte (no expansion).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (must exist; default: the sandbox's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// User to run as (default: the sandbox's).
    #[serde(default)]
    pub user: Option<String>,
    /// Open a stdin pipe to write through the data plane; otherwise stdin is `/dev/null`, so a
    /// program that reads stdin sees EOF at once.
    #[serde(default)]
    pub stdin: bool,
    /// Kill the command's process tree after this many seconds. Absent or 0 = no timeout: Cove
    /// has no hidden default timeout.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Run on a pseudo-terminal: stdin, stdout and stderr are the terminal (its output is the
    /// `stdout` stream), it is the controlling terminal of the command's session, and stdin is
    /// always open (closing it sends Ctrl-D). Drive it over the data plane's WebSocket
    /// `GET /v1/attach/{cid}/pty`; plain attach and stdin work too. `TERM` defaults to
    /// `xterm-256color`.
    #[serde(default)]
    pub pty: bool,
    /// Initial terminal width in columns with `pty` (default 80, 1-65535).
    #[serde(default)]
    pub cols: Option<u16>,
    /// Initial terminal height in rows with `pty` (default 24, 1-65535).
    #[serde(default)]
    pub rows: Option<u16>,
}

/// A command started in a sandbox.
///
/// Exit status convention: a normal exit sets `exit_code`; death by a signal sets `signal` (e.g.
/// `"SIGKILL"`) and leaves `exit_code` null. A command that could not be executed exits 127
/// (not found) or 126 (not executable), as in a shell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Command {
    /// Id (`cmd-` + 16 lowercase letters/digits).
    pub id: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// The argv executed (for `shell`, the shell's argv).
    pub argv: Vec<String>,
    /// User it runs as.
    pub user: String,
    /// Working directory.
    pub cwd: String,
    /// Process id inside the sandbox.
    pub pid: u32,
    /// Running or exited.
    pub state: CommandState,
    /// Exit code of a normal exit.
    pub exit_code: Option<i32>,
    /// Name of the signal that ended it (`SIGTERM`, `SIGKILL`, ...).
    pub signal: Option<String>,
    /// Its timeout fired and its process tree was killed.
    pub timed_out: bool,
    /// The middle of a long output was dropped: the server keeps the first `cap − tail` and the
    /// last `tail` bytes of each command's output (by default 512 MiB each of a 1 GiB cap).
    pub truncated: bool,
    /// Bytes of output (stdout + stderr) produced so far.
    pub output_bytes: u64,
    /// It has a stdin pipe that is still open.
    pub stdin_open: bool,
    /// Start time.
    pub started_at: DateTime<Utc>,
    /// End time.
    pub ended_at: Option<DateTime<Utc>>,
    /// The sandbox's memory limit was hit and the kernel's OOM killer killed a process of this
    /// command (counted per command, in the command's own cgroup; where the runtime gives
    /// commands no cgroup: the command ended by SIGKILL, or exited 137 as a shell does when its
    /// child was SIGKILLed, while the sandbox counted an OOM kill).
    #[serde(default)]
    pub oom_killed: bool,
    /// It runs on a pseudo-terminal.
    #[serde(default)]
    pub pty: bool,
}

/// A grant to read a command's output and write its stdin on the data plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attachment {
    /// Data-plane URL of the output stream (`GET`, SSE); add `?offset=N` to resume.
    pub url: String,
    /// Bearer token for the data plane, valid for this one command only.
    pub token: String,
    /// When the token expires (a new one: `POST .../commands/{cid}/attachment`).
    pub expires_at: DateTime<Utc>,
}

/// `201` answer of `POST /v1/sandboxes/{id}/commands`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreateCommandResponse {
    /// The started command.
    pub command: Command,
    /// How to read its output.
    pub attachment: Attachment,
}

/// `GET /v1/sandboxes/{id}/commands` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandList {
    /// Commands the sandbox keeps, oldest first.
    pub commands: Vec<Command>,
}

/// `POST .../commands/{cid}/signal` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// Signal name (`SIGINT`, `INT`) or number (`"2"`). Delivered as-is to the command's process
    /// group.
    pub signal: String,
}

/// `POST .../commands/{cid}/kill` body (may be empty): SIGTERM to the process tree, then SIGKILL
/// after the grace period. Answers with the command once every process is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    /// Milliseconds between SIGTERM and SIGKILL (default 2000, at most 60000).
    #[serde(default)]
    pub grace_ms: Option<u64>,
}

/// Data of one `stdout` or `stderr` server-sent event of `GET /v1/attach/{cid}`.
///
/// The SSE `id:` of the event is the offset after its last byte, so `Last-Event-ID` or
/// `?offset=` resumes exactly. Offsets count stdout and stderr bytes together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutputEvent {
    /// Offset of the first byte of `data` in the command's combined output.
    pub offset: u64,
    /// Number of bytes in this event.
    pub len: u64,
    /// The bytes: base64 (standard alphabet, padded) by default; with `?encoding=utf8` the
    /// bytes as text, where each invalid UTF-8 sequence becomes U+FFFD and NUL is kept (a
    /// multi-byte character split between two reads is never split between two events).
    pub data: String,
}

/// Data of the final `exit` server-sent event: the ended command.
pub type ExitEvent = Command;

/// Data of a `gap` server-sent event of `GET /v1/attach/{cid}`: bytes `[offset, offset + len)`
/// of the command's output were dropped (the middle of an output longer than the cap); the
/// stream continues at `offset + len`, and the event's SSE `id:` is that offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GapEvent {
    /// Offset of the first dropped byte.
    pub offset: u64,
    /// Number of dropped bytes.
    pub len: u64,
}

/// `GET /v1/sandboxes/{id}/commands/{cid}/output?wait=60s&max_bytes=N` answer: a command's
/// output collected in one response (the buffered alternative to streaming it).
///
/// When the output is longer than `max_bytes` (default 1 MiB, at most 16 MiB) or its middle was
/// dropped by the server's cap, the answer keeps its head and its tail (about `max_bytes / 2`
/// each of the combined output) and `omitted` says which bytes are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandOutput {
    /// The command when the answer was made (`exited` unless the wait ran out).
    pub command: Command,
    /// Its stdout bytes in this answer, base64 (standard alphabet, padded).
    pub stdout: String,
    /// Its stderr bytes in this answer, base64.
    pub stderr: String,
    /// Some output is not in this answer (see `omitted`).
    pub truncated: bool,
    /// The range of the combined output left out, when `truncated`.
    pub omitted: Option<OmittedOutput>,
}

/// The part of a command's combined output missing from a [`CommandOutput`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OmittedOutput {
    /// Offset of the first byte left out, in the combined output (stdout and stderr together).
    pub offset: u64,
    /// Number of bytes left out.
    pub len: u64,
    /// Position in the answer's (decoded) stdout where the left-out bytes were.
    pub stdout_at: u64,
    /// Position in the answer's (decoded) stderr where the left-out bytes were.
    pub stderr_at: u64,
}

/// A terminal size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalSize {
    /// Columns (1-65535).
    pub cols: u16,
    /// Rows (1-65535).
    pub rows: u16,
}

/// WebSocket subprotocol of the PTY WebSocket, for clients that cannot send an
/// `Authorization` header (browsers): offer it together with
/// [`PTY_TOKEN_PROTOCOL_PREFIX`]`<attachment token>` in `Sec-WebSocket-Protocol`; the server
/// takes the token from there and answers with this protocol.
pub const PTY_PROTOCOL: &str = "cove.pty";

/// Prefix of the subprotocol that carries the attachment token on the PTY WebSocket
/// (`cove.bearer.<token>`); see [`PTY_PROTOCOL`].
pub const PTY_TOKEN_PROTOCOL_PREFIX: &str = "cove.bearer.";

/// A JSON text frame on the PTY WebSocket (`GET /v1/attach/{cid}/pty`). Binary frames carry
/// terminal bytes both ways; text frames carry these messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PtyMessage {
    /// Client → server: resize the terminal (`{"resize":{"cols":120,"rows":40}}`).
    Resize(TerminalSize),
    /// Server → client: the command ended (`{"exit":{...command...}}`); the server then closes
    /// the socket.
    Exit(Box<Command>),
    /// Server → client: output bytes were dropped (`{"gap":{"offset":..,"len":..}}`).
    Gap(GapEvent),
}
