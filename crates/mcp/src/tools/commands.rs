//! Command tools: `run_command` (start, wait, answer exit code and output), and for long
//! programs `start_background_command`, `read_output` (from a byte offset, so repeated reads
//! follow the output) and `kill_command`.

use std::collections::BTreeMap;
use std::time::Duration;

use cove_api_types::{Command, CommandState, CreateCommandRequest, ErrorCode};
use cove_client::{AttachEvent, Client};
use futures::StreamExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{decode_b64, success};
use crate::error::{answer, ToolFailure, ToolResult};
use crate::CoveMcp;

/// Default `run_command` timeout (s).
const DEFAULT_TIMEOUT_S: f64 = 60.0;
/// Longest `run_command` timeout (s).
const MAX_TIMEOUT_S: f64 = 3600.0;
/// How much longer than the command's own timeout `run_command` waits for its end.
const WAIT_SLACK: Duration = Duration::from_secs(30);
/// Default cap of the output a tool answers (bytes): enough for a model, small for its context.
const DEFAULT_MAX_OUTPUT: u64 = 32 * 1024;
/// Largest output cap a caller may ask for (bytes).
const MAX_OUTPUT: u64 = 1024 * 1024;
/// Longest `read_output` wait (s).
const MAX_READ_WAIT_S: f64 = 30.0;
/// How long `read_output` collects output of a running command when asked not to wait.
const MIN_READ_WINDOW: Duration = Duration::from_millis(300);

/// What to run: a shell line or an argv.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartParams {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// A shell command line, run with `bash -l -c` (or `sh -c`). Give this or `argv`.
    #[serde(default)]
    pub command: Option<String>,
    /// Program and arguments, run directly. Give this or `command`.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Working directory (default: the sandbox's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Kill the command after this many seconds. `run_command`: default 60, at most 3600;
    /// `start_background_command`: default none.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Most bytes of output in the answer (default 32768, at most 1048576); a longer output
    /// keeps its head and tail and says what was left out. `run_command` only.
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
}

/// Arguments naming one command.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadOutputParams {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// The command's id (`cmd-...`).
    pub command_id: String,
    /// Byte offset in the command's combined output to read from (default 0); pass the
    /// previous answer's `next_offset` to read what came after.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Seconds to wait for the command to end while collecting output (default 0, at most
    /// 30); the answer comes as soon as it ends.
    #[serde(default)]
    pub wait_s: Option<f64>,
    /// Most bytes to return (default 32768, at most 1048576).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// `kill_command` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillParams {
    /// The sandbox's id.
    pub sandbox_id: String,
    /// The command's id (`cmd-...`).
    pub command_id: String,
    /// Send only this signal (e.g. `SIGINT`) instead of killing the whole process tree.
    #[serde(default)]
    pub signal: Option<String>,
}

/// The end of a command, as tools tell it.
#[derive(Debug, Serialize)]
pub struct CommandStatus {
    /// Id.
    pub command_id: String,
    /// `running` or `exited`.
    pub state: &'static str,
    /// Exit code of a normal exit.
    pub exit_code: Option<i32>,
    /// Signal that ended it.
    pub signal: Option<String>,
    /// Its timeout fired and it was killed.
    pub timed_out: bool,
}

impl From<&Command> for CommandStatus {
    fn from(c: &Command) -> Self {
        CommandStatus {
            command_id: c.id.clone(),
            state: match c.state {
                CommandState::Running => "running",
                CommandState::Exited => "exited",
            },
            exit_code: c.exit_code,
            signal: c.signal.clone(),
            timed_out: c.timed_out,
        }
    }
}

impl CommandStatus {
    /// `exit code 0`, `killed by SIGKILL (timed out)`, `still running`.
    fn describe(&self) -> String {
        let timed_out = if self.timed_out { " (timed out)" } else { "" };
        match (&self.exit_code, &self.signal, self.state) {
            (_, _, "running") => "still running".to_owned(),
            (Some(code), _, _) => format!("exit code {code}{timed_out}"),
            (None, Some(signal), _) => format!("killed by {signal}{timed_out}"),
            (None, None, _) => format!("ended{timed_out}"),
        }
    }
}

#[tool_router(router = command_tools, vis = "pub(crate)")]
impl CoveMcp {
    #[tool(
        description = "Run a command in a sandbox and wait for it to end (timeout_s, default 60 s). Answers its exit code, stdout and stderr; a long output keeps its head and tail with a note saying what was left out."
    )]
    async fn run_command(
        &self,
        Parameters(p): Parameters<StartParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { run(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "Start a command in a sandbox without waiting for it (servers, watchers, long builds). Answers its command_id; follow it with read_output and stop it with kill_command."
    )]
    async fn start_background_command(
        &self,
        Parameters(p): Parameters<StartParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { start_background(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "Read a command's output (stdout and stderr interleaved) from a byte offset, optionally waiting up to wait_s for it to end. Answers the text, next_offset to read from next time, and whether it still runs."
    )]
    async fn read_output(
        &self,
        Parameters(p): Parameters<ReadOutputParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { read(&self.client(&ctx)?, p).await }.await)
    }

    #[tool(
        description = "Stop a command: SIGTERM to its whole process tree, SIGKILL after 2 s; or send one signal with `signal`."
    )]
    async fn kill_command(
        &self,
        Parameters(p): Parameters<KillParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        answer(async { kill(&self.client(&ctx)?, p).await }.await)
    }
}

/// The API request of a [`StartParams`]; exactly one of `command` and `argv`.
fn start_request(
    p: &StartParams,
    timeout_s: Option<f64>,
) -> Result<CreateCommandRequest, ToolFailure> {
    match (&p.command, &p.argv) {
        (Some(_), Some(_)) => {
            return Err(ToolFailure::invalid("give `command` or `argv`, not both"))
        }
        (None, None) => return Err(ToolFailure::invalid("give `command` or `argv`")),
        _ => {}
    }
    if let Some(t) = timeout_s {
        if !(t.is_finite() && t >= 0.0) {
            return Err(ToolFailure::invalid(
                "`timeout_s` must be a number of seconds >= 0",
            ));
        }
    }
    Ok(CreateCommandRequest {
        shell: p.command.clone(),
        argv: p.argv.clone(),
        cwd: p.cwd.clone(),
        env: p.env.clone(),
        timeout_s,
        ..Default::default()
    })
}

/// A byte cap asked for, bounded.
fn cap(asked: Option<u64>) -> u64 {
    asked.unwrap_or(DEFAULT_MAX_OUTPUT).clamp(1, MAX_OUTPUT)
}

async fn run(client: &Client, p: StartParams) -> ToolResult {
    let timeout = p.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S).min(MAX_TIMEOUT_S);
    let timeout = if timeout <= 0.0 {
        DEFAULT_TIMEOUT_S
    } else {
        timeout
    };
    let request = start_request(&p, Some(timeout))?;
    let created = client.create_command(&p.sandbox_id, &request).await?;
    let id = created.command.id;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(timeout) + WAIT_SLACK;
    let max = cap(p.max_output_bytes);
    let output = loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let output = client
            .command_output(
                &p.sandbox_id,
                &id,
                Some(remaining.max(Duration::from_secs(1))),
                Some(max),
            )
            .await?;
        if output.command.state == CommandState::Exited {
            break output;
        }
        if remaining.is_zero() {
            return Err(ToolFailure::new(
                ErrorCode::DeadlineExceeded,
                format!(
                    "command {id} is still running after its timeout; stop it with kill_command"
                ),
            ));
        }
    };
    let stdout = String::from_utf8_lossy(&decode_b64("stdout", &output.stdout)?).into_owned();
    let stderr = String::from_utf8_lossy(&decode_b64("stderr", &output.stderr)?).into_owned();
    let status = CommandStatus::from(&output.command);
    let note = output.omitted.map(|o| {
        format!(
            "output truncated: {} bytes left out of the middle (combined output bytes {}..{}); read them with read_output from offset {}",
            o.len,
            o.offset,
            o.offset + o.len,
            o.offset
        )
    });
    let mut text = status.describe();
    if !stdout.is_empty() {
        text.push_str(&format!("\n--- stdout ---\n{stdout}"));
    }
    if !stderr.is_empty() {
        text.push_str(&format!("\n--- stderr ---\n{stderr}"));
    }
    if let Some(note) = &note {
        text.push_str(&format!("\n[{note}]"));
    }
    let value = serde_json::json!({
        "command_id": status.command_id,
        "exit_code": status.exit_code,
        "signal": status.signal,
        "timed_out": status.timed_out,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": output.truncated,
        "note": note,
    });
    Ok(success(text, &value))
}

async fn start_background(client: &Client, p: StartParams) -> ToolResult {
    let request = start_request(&p, p.timeout_s)?;
    let created = client.create_command(&p.sandbox_id, &request).await?;
    let status = CommandStatus::from(&created.command);
    Ok(success(
        format!(
            "started command {} (read its output with read_output from offset 0)",
            status.command_id
        ),
        &status,
    ))
}

async fn read(client: &Client, p: ReadOutputParams) -> ToolResult {
    let wait_s = p.wait_s.unwrap_or(0.0);
    if !(wait_s.is_finite() && wait_s >= 0.0) {
        return Err(ToolFailure::invalid(
            "`wait_s` must be a number of seconds >= 0",
        ));
    }
    let window = Duration::from_secs_f64(wait_s.min(MAX_READ_WAIT_S)).max(MIN_READ_WINDOW);
    let max = usize::try_from(cap(p.max_bytes)).unwrap_or(usize::MAX);
    let start = p.offset.unwrap_or(0);
    // A fresh data-plane grant (the command's previous one is revoked).
    let attachment = client.new_attachment(&p.sandbox_id, &p.command_id).await?;
    let mut events = std::pin::pin!(client.attach(&attachment, start));
    let mut text = Vec::new();
    let mut next = start;
    let mut gaps = Vec::new();
    let mut ended: Option<Command> = None;
    let deadline = tokio::time::sleep(window);
    tokio::pin!(deadline);
    while text.len() < max {
        let event = tokio::select! {
            event = events.next() => event,
            () = &mut deadline => break,
        };
        match event {
            None => break,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(
                AttachEvent::Stdout { offset, data } | AttachEvent::Stderr { offset, data },
            )) => {
                let room = max - text.len();
                let take = data.len().min(room);
                text.extend_from_slice(&data[..take]);
                next = offset + take as u64;
            }
            Some(Ok(AttachEvent::Gap { offset, len })) => {
                gaps.push(format!(
                    "bytes {offset}..{} were dropped by the server's cap",
                    offset + len
                ));
                next = offset + len;
            }
            Some(Ok(AttachEvent::Exit(command))) => {
                ended = Some(command);
                break;
            }
        }
    }
    let command = match ended {
        Some(c) => c,
        None => {
            client
                .get_command(&p.sandbox_id, &p.command_id, None)
                .await?
        }
    };
    let status = CommandStatus::from(&command);
    // More output may follow the cap even after the exit.
    let more = next < command.output_bytes;
    let output = String::from_utf8_lossy(&text).into_owned();
    let mut summary = format!(
        "{}; bytes {start}..{next} of {} so far",
        status.describe(),
        command.output_bytes
    );
    if more {
        summary.push_str(&format!("; more output: read again from offset {next}"));
    }
    for gap in &gaps {
        summary.push_str(&format!("; {gap}"));
    }
    let value = serde_json::json!({
        "command_id": status.command_id,
        "state": status.state,
        "exit_code": status.exit_code,
        "signal": status.signal,
        "timed_out": status.timed_out,
        "output": output,
        "offset": start,
        "next_offset": next,
        "output_bytes": command.output_bytes,
    });
    Ok(success(format!("{summary}\n{output}"), &value))
}

async fn kill(client: &Client, p: KillParams) -> ToolResult {
    let command = match &p.signal {
        Some(signal) => client.signal(&p.sandbox_id, &p.command_id, signal).await?,
        None => client.kill(&p.sandbox_id, &p.command_id, None).await?,
    };
    let status = CommandStatus::from(&command);
    let text = match &p.signal {
        Some(signal) => format!(
            "sent {signal} to command {}; {}",
            status.command_id,
            status.describe()
        ),
        None => format!(
            "command {} stopped: {}",
            status.command_id,
            status.describe()
        ),
    };
    Ok(success(text, &status))
}
