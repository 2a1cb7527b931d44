//! The event stream of a started or connected process: `start{pid}`, output as `data` events
//! (`stdout`/`stderr`, or `pty`), keepalives when idle, the `end` event with Go's
//! `ProcessState` texts, then the end-of-stream frame.

use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use base64::Engine;
use cove_api_types::Command;
use cove_control_plane::attach::{OutputEvent, OutputSource, OutputStream};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::super::{end_frame, message_frame, stream_response};
use crate::error::{ConnectCode, ConnectError};
use crate::model::envd::{EndEvent, ProcessData, ProcessEvent, ProcessStreamMessage};

/// Streams `start{pid}`, then the output and the end event, then the end-of-stream frame.
/// `ended` short-cuts a process that already exited (a `Connect` after its end). With
/// `own_deadline` (the `Start` stream, whose `Connect-Timeout-Ms` is the process's timeout), a
/// process its timeout ended closes the stream as Go's envd does when the request's context
/// expires: `deadline_exceeded` and no `end` event (the SDK raises `TimeoutException`).
pub(super) fn pump(
    pid: u32,
    mut events: OutputStream,
    keepalive: Duration,
    pty: bool,
    ended: Option<Command>,
    own_deadline: bool,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        if tx
            .send(message_frame(&ProcessStreamMessage {
                event: ProcessEvent::Start { pid },
            }))
            .await
            .is_err()
        {
            return;
        }
        if let Some(cmd) = ended {
            let _ = tx.send(end_message(&cmd)).await;
            let _ = tx.send(end_frame(None)).await;
            return;
        }
        loop {
            let frame = match tokio::time::timeout(keepalive, events.next()).await {
                Err(_) => message_frame(&ProcessStreamMessage {
                    event: ProcessEvent::Keepalive {},
                }),
                Ok(Some(Ok(OutputEvent::Output { source, data, .. }))) => {
                    let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
                    let data = match (pty, source) {
                        (true, _) => ProcessData::Pty(b64),
                        (false, OutputSource::Stdout) => ProcessData::Stdout(b64),
                        (false, OutputSource::Stderr) => ProcessData::Stderr(b64),
                    };
                    message_frame(&ProcessStreamMessage {
                        event: ProcessEvent::Data(data),
                    })
                }
                Ok(Some(Ok(OutputEvent::Gap { .. } | OutputEvent::End))) => continue,
                Ok(Some(Ok(OutputEvent::Exited(cmd)))) if own_deadline && cmd.timed_out => {
                    let _ = tx.send(end_frame(Some(&timed_out()))).await;
                    return;
                }
                Ok(Some(Ok(OutputEvent::Exited(cmd)))) => {
                    let _ = tx.send(end_message(&cmd)).await;
                    let _ = tx.send(end_frame(None)).await;
                    return;
                }
                Ok(Some(Err(e))) => {
                    tracing::debug!(pid, error = %e, "process stream broke off");
                    let err = ConnectError::new(
                        ConnectCode::Unavailable,
                        "the process stream broke off: the sandbox stopped while the request \
                         was in flight",
                    );
                    let _ = tx.send(end_frame(Some(&err))).await;
                    return;
                }
                Ok(None) => {
                    let err = ConnectError::new(
                        ConnectCode::Unavailable,
                        "the process stream ended before the process did",
                    );
                    let _ = tx.send(end_frame(Some(&err))).await;
                    return;
                }
            };
            if tx.send(frame).await.is_err() {
                // The client went away; the process keeps running.
                return;
            }
        }
    });
    stream_response(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (b, rx))
    }))
}

/// The stream error of a process its timeout ended (Go's `context.DeadlineExceeded` text).
fn timed_out() -> ConnectError {
    ConnectError::new(ConnectCode::DeadlineExceeded, "context deadline exceeded")
}

fn end_message(cmd: &Command) -> Bytes {
    message_frame(&ProcessStreamMessage {
        event: ProcessEvent::End(end_event(cmd)),
    })
}

/// Go `ProcessState` semantics: `exit status N`, or `-1` and `signal: killed`.
pub fn end_event(c: &Command) -> EndEvent {
    match (c.exit_code, c.signal.as_deref()) {
        (Some(n), _) => EndEvent {
            exit_code: n,
            exited: true,
            status: format!("exit status {n}"),
            error: (n != 0).then(|| format!("exit status {n}")),
        },
        (None, sig) => {
            let text = format!("signal: {}", sig.map_or("killed", go_signal_text));
            EndEvent {
                exit_code: -1,
                exited: false,
                status: text.clone(),
                error: Some(text),
            }
        }
    }
}

/// Go's `syscall.Signal.String()` for the usual signals.
fn go_signal_text(sig: &str) -> &str {
    match sig {
        "SIGHUP" => "hangup",
        "SIGINT" => "interrupt",
        "SIGQUIT" => "quit",
        "SIGILL" => "illegal instruction",
        "SIGTRAP" => "trace/breakpoint trap",
        "SIGABRT" => "aborted",
        "SIGBUS" => "bus error",
        "SIGFPE" => "floating point exception",
        "SIGKILL" => "killed",
        "SIGUSR1" => "user defined signal 1",
        "SIGSEGV" => "segmentation fault",
        "SIGUSR2" => "user defined signal 2",
        "SIGPIPE" => "broken pipe",
        "SIGALRM" => "alarm clock",
        "SIGTERM" => "terminated",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cmd(exit_code: Option<i32>, signal: Option<&str>) -> Command {
        serde_json::from_value(json!({
            "id": "cmd-x", "sandbox_id": "sb-x", "argv": ["true"], "user": "user",
            "cwd": "/", "pid": 7, "state": "exited", "exit_code": exit_code,
            "signal": signal, "timed_out": false, "truncated": false, "output_bytes": 0,
            "stdin_open": false, "started_at": "2026-01-01T00:00:00Z", "ended_at": null,
            "oom_killed": false, "pty": false
        }))
        .expect("command")
    }

    #[test]
    fn end_events_follow_go_process_state() {
        let ok = end_event(&cmd(Some(0), None));
        assert_eq!((ok.exit_code, ok.exited, ok.error), (0, true, None));
        let failed = end_event(&cmd(Some(3), None));
        assert_eq!(failed.status, "exit status 3");
        assert_eq!(failed.error.as_deref(), Some("exit status 3"));
        let killed = end_event(&cmd(None, Some("SIGKILL")));
        assert_eq!(killed.exit_code, -1);
        assert!(!killed.exited);
        assert_eq!(killed.status, "signal: killed");
        assert_eq!(
            end_event(&cmd(None, Some("SIGTERM"))).status,
            "signal: terminated"
        );
    }

    /// The body of a `pump` answer, as text (the envelopes' JSON shows in it).
    async fn body_of(events: Vec<OutputEvent>, own_deadline: bool) -> String {
        let stream = futures::stream::iter(events.into_iter().map(Ok)).boxed();
        let resp = pump(
            7,
            stream,
            Duration::from_secs(60),
            false,
            None,
            own_deadline,
        );
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[tokio::test]
    async fn a_start_its_timeout_ended_is_deadline_exceeded_not_an_exit() {
        let mut timed_out = cmd(None, Some("SIGKILL"));
        timed_out.timed_out = true;
        let body = body_of(vec![OutputEvent::Exited(Box::new(timed_out.clone()))], true).await;
        assert!(body.contains(r#""code":"deadline_exceeded""#), "{body}");
        assert!(!body.contains(r#""end""#), "{body}");
        // A Connect stream (another request's deadline) reports the process's end.
        let body = body_of(vec![OutputEvent::Exited(Box::new(timed_out))], false).await;
        assert!(body.contains(r#""end""#), "{body}");
        assert!(!body.contains("deadline_exceeded"), "{body}");
        // An ordinary exit is an end event on the Start stream too.
        let body = body_of(
            vec![OutputEvent::Exited(Box::new(cmd(Some(0), None)))],
            true,
        )
        .await;
        assert!(body.contains(r#""status":"exit status 0""#), "{body}");
    }
}
