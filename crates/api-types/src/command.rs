//! Commands and their attachments (data plane).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `POST /v1/sandboxes/{id}/commands` body. Exactly one of `argv` and `shell` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Run on a pseudo-terminal. Not implemented yet: `true` is answered with `not_implemented`.
    #[serde(default)]
    pub pty: bool,
}

/// State of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandState {
    /// Its process runs.
    Running,
    /// It ended (`exit_code` or `signal` says how).
    Exited,
}

/// A command started in a sandbox.
///
/// Exit status convention: a normal exit sets `exit_code`; death by a signal sets `signal` (e.g.
/// `"SIGKILL"`) and leaves `exit_code` null. A command that could not be executed exits 127
/// (not found) or 126 (not executable), as in a shell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Output beyond the kept cap (1 GiB per command) was dropped.
    pub truncated: bool,
    /// Bytes of output (stdout + stderr) produced so far.
    pub output_bytes: u64,
    /// It has a stdin pipe that is still open.
    pub stdin_open: bool,
    /// Start time.
    pub started_at: DateTime<Utc>,
    /// End time.
    pub ended_at: Option<DateTime<Utc>>,
}

/// A grant to read a command's output and write its stdin on the data plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    /// Data-plane URL of the output stream (`GET`, SSE); add `?offset=N` to resume.
    pub url: String,
    /// Bearer token for the data plane, valid for this one command only.
    pub token: String,
    /// When the token expires (a new one: `POST .../commands/{cid}/attachment`).
    pub expires_at: DateTime<Utc>,
}

/// `201` answer of `POST /v1/sandboxes/{id}/commands`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateCommandResponse {
    /// The started command.
    pub command: Command,
    /// How to read its output.
    pub attachment: Attachment,
}

/// `GET /v1/sandboxes/{id}/commands` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandList {
    /// Commands the sandbox keeps, oldest first.
    pub commands: Vec<Command>,
}

/// `POST .../commands/{cid}/signal` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// Signal name (`SIGINT`, `INT`) or number (`"2"`). Delivered as-is to the command's process
    /// group.
    pub signal: String,
}

/// `POST .../commands/{cid}/kill` body (may be empty): SIGTERM to the process tree, then SIGKILL
/// after the grace period. Answers with the command once every process is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
