//! The one place that waits for children: a SIGCHLD-driven `waitpid(-1, WNOHANG)` loop.
//!
//! The agent is PID 1 of the sandbox (or a child subreaper when it runs on a host for tests), so
//! every orphan of the sandbox becomes its child. The reaper collects all of them, so no zombie
//! stays, and hands the status of a command's leader to that command.
//!
//! A leader is registered under the same lock the reaper holds while it waits, and the fork
//! happens under that lock, so a child that dies at once is never reaped before its status has a
//! receiver.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;
use tracing::{debug, warn};

/// How a reaped leader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called `exit` with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

type Waiters = HashMap<i32, oneshot::Sender<ExitStatus>>;

/// Handle to the reaper; cheap to clone.
#[derive(Clone)]
pub struct Reaper {
    waiters: Arc<Mutex<Waiters>>,
}

/// Proof that the caller holds the reaper's lock: no child is reaped while it lives.
pub struct ReapLock<'a> {
    guard: MutexGuard<'a, Waiters>,
}

impl ReapLock<'_> {
    /// Registers `pid` so its exit status goes to the returned receiver.
    pub fn register(&mut self, pid: i32) -> oneshot::Receiver<ExitStatus> {
        let (tx, rx) = oneshot::channel();
        self.guard.insert(pid, tx);
        rx
    }
}

/// Backstop interval of the reaping loop. SIGCHLD drives it: tokio's signal driver keeps a
/// SIGCHLD that arrives after the last `waitpid(WNOHANG)` saw nothing, so the next `recv()`
/// returns, and coalesced signals are covered by `reap_all` looping until no child is left.
/// The timer only bounds the cost of a bug there; it is long because every idle sandbox's
/// agent wakes for it (500 ms was 2,000 wake-ups/s across 1,000 idle sandboxes).
const POLL_INTERVAL: Duration = Duration::from_secs(10);

impl Reaper {
    /// Installs the SIGCHLD handler and starts the reaping task. Call before the first fork.
    pub fn start() -> std::io::Result<Self> {
        let mut sigchld = signal(SignalKind::child())?;
        let reaper = Self {
            waiters: Arc::new(Mutex::new(HashMap::new())),
        };
        let r = reaper.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL_INTERVAL);
            loop {
                tokio::select! {
                    _ = sigchld.recv() => {}
                    _ = tick.tick() => {}
                }
                r.reap_all();
            }
        });
        Ok(reaper)
    }

    /// Takes the reaper's lock (for the duration of a fork and its registration).
    pub fn lock(&self) -> ReapLock<'_> {
        ReapLock {
            guard: self.waiters.lock(),
        }
    }

    /// Reaps every child that has ended.
    fn reap_all(&self) {
        let mut waiters = self.waiters.lock();
        loop {
            let mut raw: libc::c_int = 0;
            // SAFETY: waitpid writes the status into `raw`, a valid local for the whole call.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid == 0 {
                return;
            }
            if pid < 0 {
                let err = std::io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ECHILD) => return,
                    _ => {
                        warn!(error = %err, "waitpid failed");
                        return;
                    }
                }
            }
            let status = if libc::WIFEXITED(raw) {
                ExitStatus::Code(libc::WEXITSTATUS(raw))
            } else if libc::WIFSIGNALED(raw) {
                ExitStatus::Signal(libc::WTERMSIG(raw))
            } else {
                continue;
            };
            match waiters.remove(&pid) {
                Some(tx) => {
                    let _ = tx.send(status);
                }
                None => debug!(pid, ?status, "reaped orphan"),
            }
        }
    }
}
