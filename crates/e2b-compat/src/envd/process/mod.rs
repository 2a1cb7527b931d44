//! `process.Process`: start, connect, list, input, signals, terminal size, over Cove's command
//! services. Processes are Cove commands: the pid is the command's real pid in the sandbox, and
//! a process outlives the stream that started it (only its timeout, `Connect-Timeout-Ms`, or a
//! signal ends it).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use cove_api_types::{Command, CommandState, CreateCommandRequest};
use cove_control_plane::ServiceError;
use futures::StreamExt;
use parking_lot::Mutex;

use super::paths::{home_of, resolve};
use super::{
    basic_user, connect_timeout, end_frame, keepalive_interval, message_frame, stream_error,
    stream_messages, stream_request, stream_response, unary_request, unary_response,
};
use crate::dispatch::Target;
use crate::error::{ConnectCode, ConnectError};
use crate::model::envd::{
    Empty, ListResponse, ProcessConfig, ProcessInfo, ProcessSelector, SelectRequest,
    SendInputRequest, SendSignalRequest, StartRequest, StreamInputRequest, UpdateRequest,
};
use crate::E2b;

mod events;

pub use events::end_event;
use events::pump;

/// How a process was started, and its tag.
type Started = (ProcessConfig, Option<String>);

/// What a process was started with (for `List`), and its tag; per Cove sandbox, per command.
#[derive(Clone, Default)]
pub struct Configs {
    inner: Arc<Mutex<HashMap<String, HashMap<String, Started>>>>,
}

impl Configs {
    fn remember(&self, sandbox: &str, cid: &str, config: ProcessConfig, tag: Option<String>) {
        let mut m = self.inner.lock();
        m.entry(sandbox.to_string())
            .or_default()
            .insert(cid.to_string(), (config, tag));
    }

    fn get(&self, sandbox: &str, cid: &str) -> Option<Started> {
        let m = self.inner.lock();
        m.get(sandbox).and_then(|s| s.get(cid)).cloned()
    }

    /// Drops what is kept for a sandbox.
    pub fn forget_sandbox(&self, sandbox: &str) {
        let mut m = self.inner.lock();
        m.remove(sandbox);
    }
}

/// `POST /process.Process/Start` (server stream).
pub async fn start(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match start_stream(&e2b, &t, &headers, body).await {
        Ok(resp) => resp,
        Err(e) => stream_error(e),
    }
}

async fn start_stream(
    e2b: &E2b,
    t: &Target,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ConnectError> {
    let req: StartRequest = stream_request(body).await?;
    let asked_user = basic_user(headers)?;
    let user = asked_user.clone().unwrap_or_else(|| t.default_user.clone());
    let p = req.process.clone();
    if p.cmd.is_empty() {
        return Err(ConnectError::new(
            ConnectCode::InvalidArgument,
            "process.cmd must not be empty",
        ));
    }
    let cwd = match p.cwd.as_deref() {
        Some(c) if !c.is_empty() => Some(resolve(c, &user)?),
        _ => asked_user.as_ref().map(|u| home_of(u)),
    };
    let mut argv = vec![p.cmd.clone()];
    argv.extend(p.args.iter().cloned());
    let (cols, rows) = match req.pty {
        Some(pty) => (
            Some(pty.size.cols.clamp(1, u16::MAX as u32) as u16),
            Some(pty.size.rows.clamp(1, u16::MAX as u32) as u16),
        ),
        None => (None, None),
    };
    let create = CreateCommandRequest {
        argv: Some(argv),
        shell: None,
        env: p.envs.clone(),
        cwd: cwd.clone(),
        user: asked_user,
        stdin: req.pty.is_some() || req.stdin.unwrap_or(true),
        timeout_s: connect_timeout(headers).map(|d| d.as_secs_f64()),
        pty: req.pty.is_some(),
        cols,
        rows,
    };
    let created = e2b
        .cp
        .create_command(&t.cove_id, create)
        .await
        .map_err(|e| match e {
            ServiceError::Invalid(i) if i.field == "cwd" => ConnectError::new(
                ConnectCode::InvalidArgument,
                format!("cwd '{}' does not exist", cwd.as_deref().unwrap_or("")),
            ),
            ServiceError::Invalid(i) if i.field == "user" => ConnectError::new(
                ConnectCode::Unauthenticated,
                format!("invalid username: '{user}'"),
            ),
            other => other.into(),
        })?;
    let cmd = created.command;
    e2b.configs
        .remember(&t.cove_id, &cmd.id, p, req.tag.clone());
    let events = e2b
        .cp
        .attach_output(&t.cove_id, &cmd.id, 0, true)
        .await
        .map_err(ConnectError::from)?;
    Ok(pump(
        cmd.pid,
        events,
        keepalive_interval(headers),
        cmd.pty,
        None,
        true,
    ))
}

/// The command a selector names: a running one when `running_only`, else the newest with that
/// pid or tag. `not_found` "process with pid N not found" otherwise.
async fn find(
    e2b: &E2b,
    t: &Target,
    sel: &ProcessSelector,
    running_only: bool,
) -> Result<Command, ConnectError> {
    let list = e2b
        .cp
        .list_commands(&t.cove_id, None)
        .await
        .map_err(ConnectError::from)?;
    let matches = |c: &Command| match (&sel.pid, &sel.tag) {
        (Some(pid), _) => c.pid == *pid,
        (None, Some(tag)) => e2b
            .configs
            .get(&t.cove_id, &c.id)
            .is_some_and(|(_, t)| t.as_deref() == Some(tag)),
        (None, None) => false,
    };
    let mut found: Vec<Command> = list.commands.into_iter().filter(matches).collect();
    found.sort_by_key(|c| (c.state == CommandState::Running, c.started_at));
    let best = found.pop();
    match best {
        Some(c) if !running_only || c.state == CommandState::Running => Ok(c),
        _ => Err(not_found(sel)),
    }
}

fn not_found(sel: &ProcessSelector) -> ConnectError {
    let what = match (&sel.pid, &sel.tag) {
        (Some(pid), _) => format!("process with pid {pid} not found"),
        (None, Some(tag)) => format!("process with tag {tag} not found"),
        (None, None) => "process selector is empty".to_string(),
    };
    ConnectError::new(ConnectCode::NotFound, what)
}

/// `POST /process.Process/Connect` (server stream): `start`, then new output only.
pub async fn connect(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let req: SelectRequest = stream_request(body).await?;
        let cmd = find(&e2b, &t, &req.process, false).await?;
        let keepalive = keepalive_interval(&headers);
        if cmd.state != CommandState::Running {
            let events = futures::stream::empty().boxed();
            return Ok(pump(cmd.pid, events, keepalive, cmd.pty, Some(cmd), false));
        }
        let events = e2b
            .cp
            .attach_output(&t.cove_id, &cmd.id, cmd.output_bytes, true)
            .await
            .map_err(ConnectError::from)?;
        Ok::<_, ConnectError>(pump(cmd.pid, events, keepalive, cmd.pty, None, false))
    };
    run.await.unwrap_or_else(stream_error)
}

/// `POST /process.Process/List`: every running process.
pub async fn list(State(e2b): State<E2b>, Extension(t): Extension<Target>) -> Response {
    let run = async {
        let list = e2b
            .cp
            .list_commands(&t.cove_id, Some(CommandState::Running))
            .await
            .map_err(ConnectError::from)?;
        let processes = list
            .commands
            .into_iter()
            .map(|c| {
                let (config, tag) = e2b.configs.get(&t.cove_id, &c.id).unwrap_or_else(|| {
                    let mut argv = c.argv.clone().into_iter();
                    let config = ProcessConfig {
                        cmd: argv.next().unwrap_or_default(),
                        args: argv.collect(),
                        envs: Default::default(),
                        cwd: Some(c.cwd.clone()),
                    };
                    (config, None)
                });
                ProcessInfo {
                    config,
                    pid: c.pid,
                    tag,
                }
            })
            .collect();
        Ok::<_, ConnectError>(unary_response(&ListResponse { processes }))
    };
    run.await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}

/// `POST /process.Process/SendInput`.
pub async fn send_input(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Bytes,
) -> Response {
    let run = async {
        let req: SendInputRequest = unary_request(&body)?;
        let cmd = find(&e2b, &t, &req.process, true).await?;
        write_input(&e2b, &t, &cmd, req.input).await?;
        Ok::<_, ConnectError>(unary_response(&Empty {}))
    };
    run.await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}

async fn write_input(
    e2b: &E2b,
    t: &Target,
    cmd: &Command,
    input: crate::model::envd::ProcessInput,
) -> Result<(), ConnectError> {
    let data = match (input.stdin, input.pty) {
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => return Ok(()),
    };
    e2b.cp
        .write_stdin(&t.cove_id, &cmd.id, Bytes::from(data))
        .await
        .map_err(|e| input_error(e, cmd.pid))
}

fn input_error(e: ServiceError, pid: u32) -> ConnectError {
    match e {
        ServiceError::CommandNotFound(_) => ConnectError::new(
            ConnectCode::NotFound,
            format!("process with pid {pid} not found"),
        ),
        other => other.into(),
    }
}

/// `POST /process.Process/StreamInput` (client stream).
pub async fn stream_input(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Body,
) -> Response {
    let run = async {
        let mut msgs = std::pin::pin!(stream_messages::<StreamInputRequest>(body));
        let mut cmd: Option<Command> = None;
        while let Some(msg) = msgs.next().await {
            let msg = msg?;
            if let Some(start) = msg.start {
                cmd = Some(find(&e2b, &t, &start.process, true).await?);
            } else if let Some(data) = msg.data {
                let Some(c) = &cmd else {
                    return Err(ConnectError::new(
                        ConnectCode::FailedPrecondition,
                        "the first message of StreamInput must be start",
                    ));
                };
                write_input(&e2b, &t, c, data.input).await?;
            }
        }
        Ok::<_, ConnectError>(stream_response(futures::stream::iter([
            message_frame(&Empty {}),
            end_frame(None),
        ])))
    };
    run.await.unwrap_or_else(stream_error)
}

/// `POST /process.Process/SendSignal`: SIGKILL or SIGTERM to the process group.
pub async fn send_signal(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Bytes,
) -> Response {
    let run = async {
        let req: SendSignalRequest = unary_request(&body)?;
        let signal = match &req.signal {
            serde_json::Value::String(s) if s == "SIGNAL_SIGKILL" => "SIGKILL",
            serde_json::Value::String(s) if s == "SIGNAL_SIGTERM" => "SIGTERM",
            serde_json::Value::Number(n) if n.as_u64() == Some(9) => "SIGKILL",
            serde_json::Value::Number(n) if n.as_u64() == Some(15) => "SIGTERM",
            other => {
                return Err(ConnectError::new(
                    ConnectCode::Unimplemented,
                    format!("signal {other} is not supported"),
                ))
            }
        };
        let cmd = find(&e2b, &t, &req.process, true).await?;
        e2b.cp
            .signal_command(&t.cove_id, &cmd.id, signal)
            .await
            .map_err(|e| input_error(e, cmd.pid))?;
        Ok::<_, ConnectError>(unary_response(&Empty {}))
    };
    run.await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}

/// `POST /process.Process/CloseStdin`: EOF on the pipe, or Ctrl-D on a terminal.
pub async fn close_stdin(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Bytes,
) -> Response {
    let run = async {
        let req: SelectRequest = unary_request(&body)?;
        let cmd = find(&e2b, &t, &req.process, true).await?;
        let result = if cmd.pty {
            e2b.cp
                .write_stdin(&t.cove_id, &cmd.id, Bytes::from_static(b"\x04"))
                .await
        } else {
            e2b.cp.close_stdin(&t.cove_id, &cmd.id).await
        };
        result.map_err(|e| input_error(e, cmd.pid))?;
        Ok::<_, ConnectError>(unary_response(&Empty {}))
    };
    run.await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}

/// `POST /process.Process/Update`: resizes the terminal.
pub async fn update(
    State(e2b): State<E2b>,
    Extension(t): Extension<Target>,
    body: Bytes,
) -> Response {
    let run = async {
        let req: UpdateRequest = unary_request(&body)?;
        let cmd = find(&e2b, &t, &req.process, true).await?;
        if let Some(pty) = req.pty {
            let cols = pty.size.cols.clamp(1, u16::MAX as u32) as u16;
            let rows = pty.size.rows.clamp(1, u16::MAX as u32) as u16;
            e2b.cp
                .resize_command(&t.cove_id, &cmd.id, cols, rows)
                .await
                .map_err(|e| input_error(e, cmd.pid))?;
        }
        Ok::<_, ConnectError>(unary_response(&Empty {}))
    };
    run.await
        .unwrap_or_else(axum::response::IntoResponse::into_response)
}
