//! A template file's `START` and `READY` when a sandbox of its release starts (or wakes
//! without its memory): `START` is spawned as the sandbox's default user in its working
//! directory with its environment, then the `READY` check runs every [`READY_INTERVAL`]
//! until it exits 0 or its timeout passes. Neither is a command of the API (they are the
//! sandbox's own). When the sandbox does not become ready, the operation's log gets the last
//! `READY` attempt's exit and output and what `START` printed (and whether it exited), and
//! the failure's reason (the `failed` event's) ends with a one-line summary of both; the
//! output is bounded ([`TAIL_BYTES`], [`TAIL_LINES`]) and read with a time limit.

use std::time::{Duration, Instant};

use cove_domain::ids;
use cove_node_api::{AttachEvent, Program, SpawnRequest};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{ControlPlane, ServiceError};

/// Pause between two `READY` attempts.
pub const READY_INTERVAL: Duration = Duration::from_millis(200);
/// Longest single `READY` attempt.
const READY_ATTEMPT_MAX: Duration = Duration::from_secs(10);
/// Most output of one command kept for the log (its end).
pub const TAIL_BYTES: usize = 8 * 1024;
/// Most lines of one command's output written to the operation log.
pub const TAIL_LINES: usize = 40;
/// Longest one-line summary of a command's output in a failure's reason.
const SUMMARY_CHARS: usize = 200;
/// Longest wait for what `START` printed so far.
const START_READ_TIME: Duration = Duration::from_secs(2);

/// The end of a command's output (stdout and stderr interleaved as they came), and how it
/// ended.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
    cut: bool,
    exit: Option<String>,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
        if self.bytes.len() > TAIL_BYTES {
            let drop = self.bytes.len() - TAIL_BYTES;
            self.bytes.drain(..drop);
            self.cut = true;
        }
    }

    /// Its last [`TAIL_LINES`] lines (lossy UTF-8, control characters but tabs dropped).
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.bytes);
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                l.chars()
                    .filter(|c| !c.is_control() || *c == '\t')
                    .collect()
            })
            .collect();
        let skip = lines.len().saturating_sub(TAIL_LINES);
        lines.into_iter().skip(skip).collect()
    }

    /// Its last non-empty line, shortened.
    fn summary(&self) -> Option<String> {
        let last = self
            .lines()
            .into_iter()
            .rev()
            .find(|l| !l.trim().is_empty())?;
        let mut s: String = last.trim().chars().take(SUMMARY_CHARS).collect();
        if last.trim().chars().count() > SUMMARY_CHARS {
            s.push('…');
        }
        Some(s)
    }
}

impl ControlPlane {
    /// Starts `START` and waits for `READY` of the sandbox's release, if it has them.
    ///
    /// # Errors
    /// `failed_precondition` naming what failed (START could not start, READY did not pass in
    /// time); `cancelled`.
    pub(crate) async fn run_startup(
        &self,
        sandbox_id: &str,
        op_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        let s = self.store().get_sandbox(sandbox_id).await?;
        let Some(defaults) = self
            .store()
            .list_releases(&s.template)
            .await?
            .into_iter()
            .find(|r| r.number == s.release)
            .and_then(|r| r.defaults)
        else {
            return Ok(());
        };
        let spawn = |program: String, timeout: Option<Duration>| SpawnRequest {
            command_id: ids::new_command_id(),
            program: Program::Argv(vec!["/bin/sh".into(), "-c".into(), program]),
            env: s.env.clone(),
            cwd: Some(s.cwd.as_str().into()),
            user: Some(s.user.clone()),
            stdin: false,
            timeout_ms: timeout.map(|t| t.as_millis() as u64),
            pty: None,
        };
        let mut start_cid = None;
        if let Some(start) = &defaults.start {
            let req = spawn(start.clone(), None);
            let cid = req.command_id.clone();
            self.node()
                .spawn(sandbox_id, req)
                .await
                .map_err(|e| ServiceError::FailedPrecondition(format!("START: {e}")))?;
            info!(sandbox_id, "start command started");
            start_cid = Some(cid);
        }
        let Some(ready) = &defaults.ready else {
            return Ok(());
        };
        let began = Instant::now();
        let deadline = began + Duration::from_secs(ready.timeout_s);
        let mut last = Tail::default();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let mut reason = format!("READY did not pass within {} s", ready.timeout_s);
                self.log_attempt(op_id, "READY", &ready.command, &last)
                    .await;
                if let Some(summary) = last.summary() {
                    reason.push_str(&format!(
                        " (last attempt {}: {summary})",
                        last.exit.as_deref().unwrap_or("did not end")
                    ));
                } else if let Some(exit) = &last.exit {
                    reason.push_str(&format!(" (last attempt {exit})"));
                }
                if let (Some(cid), Some(start)) = (&start_cid, &defaults.start) {
                    let tail = self.start_output(sandbox_id, cid).await;
                    self.log_attempt(op_id, "START", start, &tail).await;
                    if let Some(exit) = &tail.exit {
                        reason.push_str(&format!("; START {exit}"));
                        if let Some(summary) = tail.summary() {
                            reason.push_str(&format!(": {summary}"));
                        }
                    }
                }
                return Err(ServiceError::FailedPrecondition(reason));
            }
            let req = spawn(ready.command.clone(), Some(left.min(READY_ATTEMPT_MAX)));
            let cid = req.command_id.clone();
            let passed = match self.node().spawn(sandbox_id, req).await {
                Ok(_) => {
                    last = self.attempt(sandbox_id, &cid, cancel).await?;
                    last.exit.as_deref() == Some("exited with code 0")
                }
                Err(e) => {
                    last = Tail {
                        exit: Some(format!("could not start: {e}")),
                        ..Tail::default()
                    };
                    false
                }
            };
            let _ = self.node().forget(sandbox_id, &cid).await;
            if passed {
                info!(
                    sandbox_id,
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "sandbox ready"
                );
                return Ok(());
            }
            tokio::select! {
                _ = cancel.cancelled() => {
                    return Err(ServiceError::Cancelled("cancelled by request".into()))
                }
                _ = tokio::time::sleep(READY_INTERVAL.min(left)) => {}
            }
        }
    }

    /// Writes what `what` (`START` or `READY`) printed and how it ended to the operation log.
    async fn log_attempt(&self, op_id: &str, what: &str, command: &str, tail: &Tail) {
        let ops = self.operations();
        let ended = tail.exit.as_deref().unwrap_or("is still running");
        ops.log(op_id, &format!("{what} `{command}` {ended}")).await;
        if tail.cut {
            ops.log(op_id, &format!("{what} output (its end):")).await;
        }
        for line in tail.lines() {
            ops.log(op_id, &format!("{what} | {line}")).await;
        }
    }

    /// What `START` printed so far and whether it ended, read without following it.
    async fn start_output(&self, sandbox_id: &str, command_id: &str) -> Tail {
        let mut tail = Tail::default();
        let Ok(mut events) = self.node().attach(sandbox_id, command_id, 0, false).await else {
            return tail;
        };
        let read = async {
            while let Some(Ok(ev)) = events.next().await {
                match ev {
                    AttachEvent::Output { data, .. } => tail.push(&data),
                    AttachEvent::Exited(info) => {
                        tail.exit = Some(ended(info.exit_code, info.signal));
                        break;
                    }
                    AttachEvent::End => break,
                    AttachEvent::Gap { .. } => tail.cut = true,
                }
            }
        };
        let _ = tokio::time::timeout(START_READ_TIME, read).await;
        tail
    }

    /// Waits for a `READY` attempt to end; its output's end and how it ended.
    async fn attempt(
        &self,
        sandbox_id: &str,
        command_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Tail, ServiceError> {
        let mut tail = Tail::default();
        let Ok(mut events) = self.node().attach(sandbox_id, command_id, 0, true).await else {
            return Ok(tail);
        };
        loop {
            tokio::select! {
                _ = cancel.cancelled() => {
                    return Err(ServiceError::Cancelled("cancelled by request".into()))
                }
                ev = events.next() => match ev {
                    Some(Ok(AttachEvent::Output { data, .. })) => tail.push(&data),
                    Some(Ok(AttachEvent::Gap { .. })) => tail.cut = true,
                    Some(Ok(AttachEvent::Exited(info))) => {
                        tail.exit = Some(ended(info.exit_code, info.signal));
                        return Ok(tail);
                    }
                    Some(Ok(AttachEvent::End)) => {}
                    Some(Err(_)) | None => return Ok(tail),
                },
            }
        }
    }
}

/// How a command ended, for the log: `exited with code N` or `was killed by signal N`.
fn ended(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".into(),
    }
}
