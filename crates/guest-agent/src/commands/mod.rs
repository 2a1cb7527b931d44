//! Commands: processes the agent started, their state and their output.
//!
//! A command is `Exited` only once its leader has been reaped and both output pipes reached EOF,
//! so its output is complete. A background process may keep the pipes open after the leader
//! exited; then the agent waits at most [`EOF_WAIT`] (2 s) for EOF before it finishes the command
//! ([`KILLED_EOF_WAIT`], 0.5 s, when the agent killed the tree itself). Bytes such a process
//! writes later are read and dropped, so it does not die of `SIGPIPE`.
//!
//! This file holds the command model ([`Command`], [`CommandTable`]); each request has its own
//! file ([`start`], [`attach`], [`write_stdin`], [`kill`], [`list`], [`resize`]), which the
//! model never imports.

pub mod attach;
pub mod kill;
pub mod list;
pub mod login_path;
pub mod resize;
pub mod start;
pub mod stdin;
mod supervise;
pub mod tree;
pub mod write_stdin;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cove_guest_protocol::{CommandInfo, CommandState, Stream};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::AgentError;
use crate::output_log::OutputLog;

pub use stdin::{Stdin, StdinWriter};

/// Longest wait for the output pipes' EOF after the leader exited.
pub const EOF_WAIT: Duration = Duration::from_secs(2);
/// Longest wait for EOF after the agent killed the tree (timeout or kill).
pub const KILLED_EOF_WAIT: Duration = Duration::from_millis(500);

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Debug, Default)]
struct Status {
    exited: bool,
    ended_at_ms: Option<u64>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    oom_killed: bool,
}

/// One started process and everything the agent keeps about it.
pub struct Command {
    id: String,
    pid: i32,
    argv: Vec<String>,
    user: String,
    cwd: String,
    started_at_ms: u64,
    log: Mutex<OutputLog>,
    status: Mutex<Status>,
    /// `true` once exited; modified (to wake attachers) on every append.
    progress: watch::Sender<bool>,
    stdin: Stdin,
    /// The agent is killing the tree (timeout or kill request).
    killing: AtomicBool,
    /// The command exited and no process of its session was left. Its pid may then be reused
    /// by another session, so the agent never signals this session again.
    tree_gone: AtomicBool,
    /// Script file of a long shell command, removed at exit.
    script: Option<PathBuf>,
    /// The master side of the command's terminal, when it runs on one.
    pty: Option<Arc<crate::pty::PtyMaster>>,
    /// The sandbox's OOM-kill counter when the command started (used without a cgroup).
    oom_kills_at_start: Option<u64>,
    /// The command's own cgroups, where the sandbox delegates them.
    cgroup: Option<Arc<crate::command_cgroup::CommandCgroup>>,
}

impl Command {
    /// The leader pid, which is also the process group and session id.
    pub fn sid(&self) -> i32 {
        self.pid
    }

    /// Notes that the agent is killing the tree (shortens the wait for output EOF).
    fn mark_killing(&self) {
        self.killing.store(true, Ordering::SeqCst);
    }

    /// Everything the command started.
    pub fn tree(&self) -> tree::Tree {
        tree::Tree::new(self.pid, self.cgroup.clone())
    }

    /// The tree to signal, or `None` once the command and its whole tree are gone.
    pub fn live_tree(&self) -> Option<tree::Tree> {
        (!self.tree_gone.load(Ordering::SeqCst)).then(|| self.tree())
    }

    /// Records that the command exited and its tree is empty, and removes its cgroup.
    fn mark_tree_gone(&self) {
        if self.exited() {
            self.tree_gone.store(true, Ordering::SeqCst);
            if let Some(c) = &self.cgroup {
                c.remove();
            }
        }
    }

    /// Whether the command has finished.
    pub fn exited(&self) -> bool {
        self.status.lock().exited
    }

    /// The wire description.
    pub fn info(&self) -> CommandInfo {
        let (output_bytes, truncated) = {
            let log = self.log.lock();
            (log.total(), log.truncated())
        };
        let st = self.status.lock();
        CommandInfo {
            command_id: self.id.clone(),
            pid: self.pid as u32,
            argv: self.argv.clone(),
            user: self.user.clone(),
            cwd: self.cwd.clone(),
            started_at_ms: self.started_at_ms,
            ended_at_ms: st.ended_at_ms,
            state: if st.exited {
                CommandState::Exited
            } else {
                CommandState::Running
            },
            exit_code: st.exit_code,
            signal: st.signal,
            timed_out: st.timed_out,
            output_bytes,
            truncated,
            stdin_open: self.stdin.is_open(),
            oom_killed: st.oom_killed,
            pty: self.pty.is_some(),
        }
    }

    fn append_output(&self, stream: Stream, data: &[u8]) {
        let kept = self.log.lock().append(stream, data);
        if kept > 0 {
            self.progress.send_modify(|_| ());
        }
    }

    /// Waits until the command has exited.
    pub async fn wait_exited(&self) {
        let mut rx = self.progress.subscribe();
        let _ = rx.wait_for(|exited| *exited).await;
    }
}

#[derive(Default)]
struct Table {
    commands: HashMap<String, Arc<Command>>,
    reserved: HashSet<String>,
}

/// Every command the agent keeps, by id.
#[derive(Default)]
pub struct CommandTable {
    inner: Mutex<Table>,
}

/// A command id held while its process starts; released on drop unless committed.
pub struct Reservation<'a> {
    table: &'a CommandTable,
    id: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.table.inner.lock().reserved.remove(&self.id);
    }
}

impl Reservation<'_> {
    fn commit(self, command: Arc<Command>) {
        let mut t = self.table.inner.lock();
        t.commands.insert(command.id.clone(), command);
    }
}

impl CommandTable {
    /// The command with this id, or `NotFound`.
    pub fn get(&self, id: &str) -> Result<Arc<Command>, AgentError> {
        self.inner
            .lock()
            .commands
            .get(id)
            .cloned()
            .ok_or_else(|| AgentError::not_found(format!("no command {id:?}")))
    }

    /// Every command.
    pub fn all(&self) -> Vec<Arc<Command>> {
        self.inner.lock().commands.values().cloned().collect()
    }

    fn reserve(&self, id: &str) -> Result<Reservation<'_>, AgentError> {
        let mut t = self.inner.lock();
        if t.commands.contains_key(id) || !t.reserved.insert(id.to_string()) {
            return Err(AgentError::new(
                cove_guest_protocol::ErrorCode::AlreadyExists,
                format!("command {id:?} already exists"),
            ));
        }
        Ok(Reservation {
            table: self,
            id: id.to_string(),
        })
    }

    fn remove(&self, id: &str) -> Option<Arc<Command>> {
        self.inner.lock().commands.remove(id)
    }
}
