//! A command's life after the fork: pump its output, enforce its timeout, collect its exit.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use cove_guest_protocol::Stream;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;
use tracing::{debug, error, info};

use super::{kill, now_ms, Command, EOF_WAIT, KILLED_EOF_WAIT};
use crate::pty::PtyMaster;
use crate::reaper::ExitStatus;

/// Bytes read from a pipe at once; each read is appended (and sent to attachers) right away.
const READ_BUF: usize = 64 * 1024;

/// Where a command's output is read from.
pub enum Source {
    /// A pipe carrying one stream.
    Pipe(pipe::Receiver, Stream),
    /// The master side of its terminal (everything is `Stdout`).
    Pty(Arc<PtyMaster>),
}

impl Source {
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Pipe(rx, _) => rx.read(buf).await,
            Source::Pty(master) => master.read(buf).await,
        }
    }

    fn stream(&self) -> Stream {
        match self {
            Source::Pipe(_, s) => *s,
            Source::Pty(_) => Stream::Stdout,
        }
    }
}

/// Runs until the command has exited and is finished.
pub async fn supervise(
    command: Arc<Command>,
    mut exit: oneshot::Receiver<ExitStatus>,
    sources: Vec<Source>,
    timeout: Option<Duration>,
) {
    let mut pumps: Vec<_> = sources
        .into_iter()
        .map(|s| tokio::spawn(pump(command.clone(), s)))
        .collect();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let status = match timeout {
        None => (&mut exit).await,
        Some(t) => {
            tokio::select! {
                s = &mut exit => s,
                _ = tokio::time::sleep(t) => {
                    info!(command_id = %command.id, "command timed out; killing its process tree");
                    command.status.lock().timed_out = true;
                    command.mark_killing();
                    let tree = command.tree();
                    tokio::spawn(async move { kill::kill_tree_now(tree).await });
                    (&mut exit).await
                }
            }
        }
    };
    let wait = if command.killing.load(Ordering::SeqCst) {
        KILLED_EOF_WAIT
    } else {
        EOF_WAIT
    };
    let drained = tokio::time::timeout(wait, async {
        for p in &mut pumps {
            let _ = p.await;
        }
    })
    .await;
    if drained.is_err() {
        debug!(command_id = %command.id, "output still open after the leader exited; finishing");
    }
    finish(&command, status.ok());
    let tree = command.tree();
    if let Ok(false) = tokio::task::spawn_blocking(move || tree.alive()).await {
        command.mark_tree_gone();
        return;
    }
    // The leader is gone but processes it left (in its session or its cgroup) still run: the
    // timeout bounds them too.
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline).await;
        if let Some(tree) = command.live_tree() {
            let t = tree.clone();
            let alive = tokio::task::spawn_blocking(move || t.alive()).await;
            if let Ok(true) = alive {
                info!(command_id = %command.id, "timeout: killing processes left by the command");
                kill::kill_tree_now(tree).await;
            }
            command.mark_tree_gone();
        }
    }
}

/// Reads one source to EOF, appending to the log (dropped once the command finished).
async fn pump(command: Arc<Command>, mut source: Source) {
    let stream = source.stream();
    let mut buf = vec![0u8; READ_BUF];
    loop {
        match source.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => command.append_output(stream, &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                debug!(command_id = %command.id, error = %e, "reading output failed");
                return;
            }
        }
    }
}

fn finish(command: &Command, status: Option<ExitStatus>) {
    command.log.lock().close();
    {
        let mut st = command.status.lock();
        st.exited = true;
        st.ended_at_ms = Some(now_ms());
        match status {
            Some(ExitStatus::Code(c)) => st.exit_code = Some(c),
            Some(ExitStatus::Signal(s)) => st.signal = Some(s),
            None => {
                error!(command_id = %command.id, "exit status lost");
                st.exit_code = Some(255);
            }
        }
        if !command.killing.load(Ordering::SeqCst) {
            st.oom_killed = match &command.cgroup {
                // Counted for this command's processes alone.
                Some(cg) => cg.oom_kills().is_some_and(|n| n > 0),
                None => crate::oom::was_oom_kill(
                    command.oom_kills_at_start,
                    crate::oom::kills(),
                    st.exit_code,
                    st.signal,
                ),
            };
            if st.oom_killed {
                info!(command_id = %command.id, "command was killed by the OOM killer");
            }
        }
    }
    command.stdin.close();
    if let Some(script) = &command.script {
        let _ = std::fs::remove_file(script);
    }
    command.progress.send_replace(true);
}
