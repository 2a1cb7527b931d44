//! `NodeCommands` of the fake node: commands behave as scripted ([`Script`]): their output is
//! there at once, and they exit at once, run until killed, or echo stdin until it closes.

use async_trait::async_trait;
use bytes::Bytes;
use cove_domain::CommandState;
use cove_node_api::{
    AttachEvent, CommandInfo, NodeCommands, NodeError, OutputStream, Program, PtySize, SpawnRequest,
};
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::files::{home, resolve};
use crate::{Call, FakeNode, State};

/// How a scripted command ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Exits at once with this code.
    Exit(i32),
    /// Dies at once of this signal number.
    Signal(i32),
    /// Runs until it is killed or signalled (or [`FakeNode::finish_command`]).
    Run,
    /// Like `cat`: writes its stdin to stdout and exits 0 when stdin is closed.
    Cat,
}

/// What a command does: its output (available at once) and how it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// Bytes written to stdout first.
    pub stdout: Bytes,
    /// Bytes written to stderr after stdout.
    pub stderr: Bytes,
    /// How it ends.
    pub end: End,
}

impl Script {
    /// Exits with `code` at once.
    pub fn exit(code: i32) -> Script {
        Script {
            stdout: Bytes::new(),
            stderr: Bytes::new(),
            end: End::Exit(code),
        }
    }

    /// Runs until killed.
    pub fn running() -> Script {
        Script {
            end: End::Run,
            ..Script::exit(0)
        }
    }

    /// Echoes stdin to stdout until stdin is closed.
    pub fn cat() -> Script {
        Script {
            end: End::Cat,
            ..Script::exit(0)
        }
    }

    /// Writes `s` to stdout.
    pub fn stdout(mut self, s: impl Into<Bytes>) -> Script {
        self.stdout = s.into();
        self
    }

    /// Writes `s` to stderr.
    pub fn stderr(mut self, s: impl Into<Bytes>) -> Script {
        self.stderr = s.into();
        self
    }
}

/// A command on the fake node.
pub(crate) struct FakeCommand {
    info: CommandInfo,
    /// Output chunks at their offsets of the combined output.
    chunks: Vec<(u64, OutputStream, Bytes)>,
    stdin: Vec<u8>,
    end: End,
}

impl FakeCommand {
    fn push(&mut self, stream: OutputStream, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let at = self.info.output_bytes;
        self.info.output_bytes += data.len() as u64;
        self.chunks.push((at, stream, data));
    }

    fn exit(&mut self, now: u64, code: Option<i32>, signal: Option<i32>) {
        if self.info.state != CommandState::Running {
            return;
        }
        self.info.state = CommandState::Exited;
        self.info.exit_code = code;
        self.info.signal = signal;
        self.info.ended_at_ms = Some(now);
        self.info.stdin_open = false;
    }

    /// The next event for a reader at `offset`: output from there, or the end.
    fn next_event(&self, offset: u64, follow: bool) -> Option<AttachEvent> {
        for (at, stream, data) in &self.chunks {
            let end = at + data.len() as u64;
            if end > offset {
                let skip = offset.saturating_sub(*at) as usize;
                return Some(AttachEvent::Output {
                    offset: at + skip as u64,
                    stream: *stream,
                    data: data.slice(skip..),
                });
            }
        }
        match self.info.state {
            CommandState::Exited => Some(AttachEvent::Exited(self.info.clone())),
            CommandState::Running if !follow => Some(AttachEvent::End),
            CommandState::Running => None,
        }
    }
}

fn command_mut<'a>(
    st: &'a mut State,
    sandbox_id: &str,
    cid: &str,
) -> Result<&'a mut FakeCommand, NodeError> {
    st.serving(sandbox_id)?
        .commands
        .get_mut(cid)
        .ok_or_else(|| NodeError::CommandNotFound(cid.to_string()))
}

impl FakeNode {
    /// Ends a running command with exit `code` (as if it finished by itself).
    pub fn finish_command(&self, sandbox_id: &str, cid: &str, code: i32) {
        let mut st = self.lock();
        let now = st.tick();
        if let Ok(c) = command_mut(&mut st, sandbox_id, cid) {
            c.exit(now, Some(code), None);
        }
        drop(st);
        self.bump();
    }

    /// Ends a running command with exit `code` at `ended_at_ms` (Unix milliseconds), for
    /// retention tests that need a real end time.
    pub fn finish_command_at(&self, sandbox_id: &str, cid: &str, code: i32, ended_at_ms: u64) {
        let mut st = self.lock();
        if let Ok(c) = command_mut(&mut st, sandbox_id, cid) {
            c.exit(ended_at_ms, Some(code), None);
        }
        drop(st);
        self.bump();
    }

    /// Everything written to a command's stdin so far.
    pub fn stdin_of(&self, sandbox_id: &str, cid: &str) -> Vec<u8> {
        let mut st = self.lock();
        command_mut(&mut st, sandbox_id, cid)
            .map(|c| c.stdin.clone())
            .unwrap_or_default()
    }
}

#[async_trait]
impl NodeCommands for FakeNode {
    async fn spawn(&self, sandbox_id: &str, req: SpawnRequest) -> Result<CommandInfo, NodeError> {
        self.run(Call::Spawn, sandbox_id, None, move |st| {
            let now = st.tick();
            let pid = st.next_pid;
            let user = req.user.clone().unwrap_or_else(|| "user".into());
            let home = home(&user)?;
            let cwd = match &req.cwd {
                Some(p) => resolve(p.as_bytes(), &user)?,
                None => home.as_bytes().to_vec(),
            };
            let (text, argv) = match &req.program {
                Program::Argv(argv) => (argv.join(" "), argv.clone()),
                Program::Shell(s) => (
                    s.clone(),
                    vec!["bash".into(), "-l".into(), "-c".into(), s.clone()],
                ),
            };
            let script = st
                .scripts
                .iter()
                .rev()
                .find(|(p, _)| *p == text)
                .map_or_else(|| Script::exit(0), |(_, s)| s.clone());
            let sb = st.serving(sandbox_id)?;
            let shown = String::from_utf8_lossy(&cwd).into_owned();
            match sb.files.is_dir(&cwd) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(NodeError::WrongType {
                        field: "cwd".into(),
                        message: format!("{shown} is not a directory"),
                    })
                }
                Err(_) => {
                    return Err(NodeError::InvalidArgument {
                        field: "cwd".into(),
                        message: format!("{shown}: no such directory"),
                    })
                }
            }
            if sb.commands.contains_key(&req.command_id) {
                return Err(NodeError::AlreadyExists(format!(
                    "command {} exists",
                    req.command_id
                )));
            }
            let mut cmd = FakeCommand {
                info: CommandInfo {
                    command_id: req.command_id.clone(),
                    pid,
                    argv,
                    user,
                    cwd: shown,
                    started_at_ms: now,
                    ended_at_ms: None,
                    state: CommandState::Running,
                    exit_code: None,
                    signal: None,
                    timed_out: false,
                    output_bytes: 0,
                    truncated: false,
                    stdin_open: req.stdin,
                    oom_killed: false,
                    pty: req.pty.is_some(),
                },
                chunks: Vec::new(),
                stdin: Vec::new(),
                end: script.end.clone(),
            };
            cmd.push(OutputStream::Stdout, script.stdout);
            cmd.push(OutputStream::Stderr, script.stderr);
            match script.end {
                End::Exit(code) => cmd.exit(now, Some(code), None),
                End::Signal(sig) => cmd.exit(now, None, Some(sig)),
                End::Run | End::Cat => {}
            }
            let info = cmd.info.clone();
            sb.order.push(req.command_id.clone());
            sb.commands.insert(req.command_id, cmd);
            st.next_pid += 1;
            Ok(info)
        })
        .await
    }

    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError> {
        self.run(Call::Command, sandbox_id, None, |st| {
            Ok(command_mut(st, sandbox_id, command_id)?.info.clone())
        })
        .await
    }

    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError> {
        self.run(Call::Commands, sandbox_id, None, |st| {
            let sb = st.serving(sandbox_id)?;
            Ok(sb
                .order
                .iter()
                .filter_map(|id| sb.commands.get(id))
                .map(|c| c.info.clone())
                .collect())
        })
        .await
    }

    async fn signal(
        &self,
        sandbox_id: &str,
        command_id: &str,
        signal: i32,
    ) -> Result<(), NodeError> {
        self.run(Call::Signal, sandbox_id, None, |st| {
            let now = st.tick();
            let c = command_mut(st, sandbox_id, command_id)?;
            if signal != 0 {
                c.exit(now, None, Some(signal));
            }
            Ok(())
        })
        .await
    }

    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        _grace_ms: u64,
    ) -> Result<CommandInfo, NodeError> {
        self.run(Call::Kill, sandbox_id, None, |st| {
            let now = st.tick();
            let c = command_mut(st, sandbox_id, command_id)?;
            // SIGTERM ends every scripted command within the grace period.
            c.exit(now, None, Some(15));
            Ok(c.info.clone())
        })
        .await
    }

    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
        follow: bool,
    ) -> Result<BoxStream<'static, Result<AttachEvent, NodeError>>, NodeError> {
        self.run(Call::Attach, sandbox_id, None, |st| {
            command_mut(st, sandbox_id, command_id).map(|_| ())
        })
        .await?;
        let node = self.clone();
        let (sid, cid) = (sandbox_id.to_string(), command_id.to_string());
        let rx = self.subscribe();
        let stream = futures::stream::unfold((offset, false, rx), move |(offset, done, mut rx)| {
            let (node, sid, cid) = (node.clone(), sid.clone(), cid.clone());
            async move {
                if done {
                    return None;
                }
                loop {
                    rx.borrow_and_update();
                    let next = {
                        let mut st = node.lock();
                        command_mut(&mut st, &sid, &cid).map(|c| c.next_event(offset, follow))
                    };
                    match next {
                        Err(e) => return Some((Err(e), (offset, true, rx))),
                        Ok(Some(ev @ AttachEvent::Output { .. })) => {
                            let AttachEvent::Output {
                                offset: at, data, ..
                            } = &ev
                            else {
                                return None;
                            };
                            let next_offset = at + data.len() as u64;
                            return Some((Ok(ev), (next_offset, false, rx)));
                        }
                        Ok(Some(ev)) => return Some((Ok(ev), (offset, true, rx))),
                        Ok(None) => {
                            if rx.changed().await.is_err() {
                                return None;
                            }
                        }
                    }
                }
            }
        });
        Ok(stream.boxed())
    }

    async fn stdin_write(
        &self,
        sandbox_id: &str,
        command_id: &str,
        data: Bytes,
    ) -> Result<(), NodeError> {
        self.run(Call::StdinWrite, sandbox_id, None, |st| {
            let c = command_mut(st, sandbox_id, command_id)?;
            if !c.info.stdin_open {
                return Err(NodeError::FailedPrecondition("stdin is closed".into()));
            }
            c.stdin.extend_from_slice(&data);
            if c.end == End::Cat {
                c.push(OutputStream::Stdout, data);
            }
            Ok(())
        })
        .await
    }

    async fn stdin_close(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.run(Call::StdinClose, sandbox_id, None, |st| {
            let now = st.tick();
            let c = command_mut(st, sandbox_id, command_id)?;
            c.info.stdin_open = false;
            if c.end == End::Cat {
                c.exit(now, Some(0), None);
            }
            Ok(())
        })
        .await
    }

    async fn resize(
        &self,
        sandbox_id: &str,
        command_id: &str,
        _size: PtySize,
    ) -> Result<(), NodeError> {
        self.run(Call::Resize, sandbox_id, None, |st| {
            let c = command_mut(st, sandbox_id, command_id)?;
            if !c.info.pty {
                return Err(NodeError::FailedPrecondition(
                    "the command has no terminal".into(),
                ));
            }
            Ok(())
        })
        .await
    }

    async fn forget(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.run(Call::Forget, sandbox_id, None, |st| {
            let c = command_mut(st, sandbox_id, command_id)?;
            if c.info.state == CommandState::Running {
                return Err(NodeError::FailedPrecondition(format!(
                    "command {command_id} is still running"
                )));
            }
            let sb = st.serving(sandbox_id)?;
            sb.commands.remove(command_id);
            sb.order.retain(|id| id != command_id);
            Ok(())
        })
        .await
    }
}
