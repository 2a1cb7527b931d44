//! Running a build tool: its output lines become [`BuildEvent::Log`]s, cancellation kills its
//! whole process group, and a failure keeps the last lines as the error detail.

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{BuildError, BuildEvent};

/// Longest output line passed on, in bytes (the rest is cut).
const MAX_LINE_BYTES: usize = 4096;
/// Output lines kept for a failure's detail.
const TAIL_LINES: usize = 20;
/// How long to wait for a killed process group to disappear.
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(2);

/// The event stream of one build, with its cancellation token and monotonic progress.
pub(crate) struct Events {
    tx: mpsc::Sender<BuildEvent>,
    cancel: CancellationToken,
    percent: u8,
}

impl Events {
    pub(crate) fn new(tx: mpsc::Sender<BuildEvent>, cancel: CancellationToken) -> Self {
        Events {
            tx,
            cancel,
            percent: 0,
        }
    }

    pub(crate) fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// `Err(Cancelled)` once the build is cancelled.
    pub(crate) fn check_cancelled(&self) -> Result<(), BuildError> {
        if self.cancel.is_cancelled() {
            Err(BuildError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// Sends an event; a gone receiver is fine, a full one waits (unless cancelled).
    async fn send(&self, event: BuildEvent) {
        tokio::select! {
            _ = self.tx.send(event) => {}
            _ = self.cancel.cancelled() => {}
        }
    }

    pub(crate) async fn log(&self, line: impl Into<String>) {
        self.send(BuildEvent::Log(line.into())).await;
    }

    /// Reports progress; values lower than the last one are raised to it.
    pub(crate) async fn progress(&mut self, percent: u8, phase: &str) {
        self.percent = self.percent.max(percent.min(100));
        let percent = self.percent;
        self.send(BuildEvent::Progress {
            percent,
            phase: phase.to_string(),
        })
        .await;
    }
}

/// A build tool and how to install it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool {
    pub name: &'static str,
    pub hint: &'static str,
}

/// Runs `cmd` to completion in its own process group, streaming its stdout and stderr lines as
/// log events; `phase_of` may turn a line into a progress report.
pub(crate) async fn run(
    step: &str,
    tool: Tool,
    mut cmd: Command,
    events: &mut Events,
    phase_of: impl Fn(&str) -> Option<(u8, &'static str)>,
) -> Result<(), BuildError> {
    events.check_cancelled()?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            BuildError::ToolMissing {
                tool: tool.name.to_string(),
                hint: tool.hint.to_string(),
            }
        } else {
            BuildError::Io {
                context: format!("start {}", tool.name),
                source,
            }
        }
    })?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let _guard = GroupGuard(group);

    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(BuildError::Failed {
            step: step.to_string(),
            detail: "no output pipes".to_string(),
        });
    };
    let mut out = LineReader::new(stdout);
    let mut err = LineReader::new(stderr);
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let cancel = events.cancel().clone();
    while !(out.done && err.done) {
        let line = tokio::select! {
            _ = cancel.cancelled() => {
                kill_group(group, &mut child).await;
                return Err(BuildError::Cancelled);
            }
            line = out.next(), if !out.done => line,
            line = err.next(), if !err.done => line,
        };
        let Some(line) = line else { continue };
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line.clone());
        if let Some((percent, phase)) = phase_of(&line) {
            events.progress(percent, phase).await;
        }
        events.log(line).await;
    }
    let status = tokio::select! {
        _ = cancel.cancelled() => {
            kill_group(group, &mut child).await;
            return Err(BuildError::Cancelled);
        }
        status = child.wait() => status.map_err(|source| BuildError::Io {
            context: format!("wait for {}", tool.name),
            source,
        })?,
    };
    // Nothing of the tool may outlive it (a stray process could still write into the tree).
    kill_group(group, &mut child).await;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Failed {
            step: step.to_string(),
            detail: format!(
                "{} exited with {status}: {}",
                tool.name,
                tail.into_iter().collect::<Vec<_>>().join("\n")
            ),
        })
    }
}

/// Kills the process group and waits (bounded) until it is gone.
async fn kill_group(group: Option<Pid>, child: &mut tokio::process::Child) {
    if let Some(pg) = group {
        let _ = killpg(pg, Signal::SIGKILL);
    }
    let _ = child.wait().await;
    let Some(pg) = group else { return };
    let began = Instant::now();
    while began.elapsed() < GROUP_EXIT_WAIT {
        match killpg(pg, Signal::SIGKILL) {
            Err(Errno::ESRCH) => return,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Kills the process group if the build future is dropped midway.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pg) = self.0 {
            let _ = killpg(pg, Signal::SIGKILL);
        }
    }
}

/// Reads lines (lossily decoded, cut at [`MAX_LINE_BYTES`]); cancel-safe across `select!`.
struct LineReader<R> {
    reader: BufReader<R>,
    buf: Vec<u8>,
    done: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(reader: R) -> Self {
        LineReader {
            reader: BufReader::new(reader),
            buf: Vec::new(),
            done: false,
        }
    }

    /// The next line, or `None` at the end (or on a read error, which ends the stream).
    async fn next(&mut self) -> Option<String> {
        match self.reader.read_until(b'\n', &mut self.buf).await {
            Ok(0) | Err(_) => {
                self.done = true;
                if self.buf.is_empty() {
                    return None;
                }
            }
            Ok(_) => {}
        }
        let mut bytes = std::mem::take(&mut self.buf);
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        bytes.truncate(MAX_LINE_BYTES);
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> (Events, mpsc::Receiver<BuildEvent>, CancellationToken) {
        let (tx, rx) = mpsc::channel(64);
        let cancel = CancellationToken::new();
        (Events::new(tx, cancel.clone()), rx, cancel)
    }

    const SH: Tool = Tool {
        name: "sh",
        hint: "apt-get install dash",
    };

    #[tokio::test]
    async fn missing_tool_is_reported_with_its_hint() {
        let (mut ev, _rx, _cancel) = events();
        let tool = Tool {
            name: "cove-no-such-tool",
            hint: "apt-get install cove-no-such-tool",
        };
        let err = run("x", tool, Command::new(tool.name), &mut ev, |_| None)
            .await
            .expect_err("missing");
        assert!(
            matches!(&err, BuildError::ToolMissing { hint, .. } if hint == tool.hint),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn output_lines_become_events_and_failures_keep_the_tail() {
        let (mut ev, mut rx, _cancel) = events();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 'I: step one'; echo oops >&2; exit 3"]);
        let err = run("demo", SH, cmd, &mut ev, |l| {
            (l == "I: step one").then_some((50, "one"))
        })
        .await
        .expect_err("fails");
        match err {
            BuildError::Failed { step, detail } => {
                assert_eq!(step, "demo");
                assert!(detail.contains("oops"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        drop(ev);
        let mut got = Vec::new();
        while let Some(e) = rx.recv().await {
            got.push(e);
        }
        assert!(got.contains(&BuildEvent::Progress {
            percent: 50,
            phase: "one".to_string()
        }));
        assert!(got.contains(&BuildEvent::Log("oops".to_string())));
    }

    #[tokio::test]
    async fn cancel_kills_the_whole_process_group() {
        let (mut ev, _rx, cancel) = events();
        let marker = format!("cove-cancel-test-{}", std::process::id());
        let mut cmd = Command::new("sh");
        // A grandchild that would outlive a kill of the shell alone.
        cmd.args([
            "-c",
            &format!("sh -c 'sleep 30; : {marker}' & echo started; wait"),
        ]);
        let canceller = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                cancel.cancel();
            })
        };
        let began = Instant::now();
        let err = run("sleep", SH, cmd, &mut ev, |_| None)
            .await
            .expect_err("cancelled");
        assert!(matches!(err, BuildError::Cancelled), "{err:?}");
        assert!(began.elapsed() < Duration::from_secs(10));
        canceller.await.expect("join");
        let left = std::process::Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .expect("pgrep");
        assert!(left.stdout.is_empty(), "left running: {:?}", left.stdout);
    }
}
