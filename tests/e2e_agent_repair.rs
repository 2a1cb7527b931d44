//! Issue 12, item 2: a guest agent killed from the host (`kill -9`, as the OOM killer would)
//! is detected, the sandbox reports `degraded` with the reason, and the node repairs it
//! without losing its files: it runs again, its file is there, new commands work, and the
//! command that ran when the agent died ended with a clear reason (`guest_restarted`).

use std::time::{Duration, Instant};

use cove_api_types::{ErrorCode, EventType, SandboxState};
use cove_client::Client;
use cove_e2e::{client_of, delete, sandbox, server_with, sh};
use futures::StreamExt;

/// Checks agents every 500 ms so the test runs in seconds.
fn tweak(cfg: &mut cove_server::Config) {
    cfg.lifecycle.agent_check_interval = Some(Duration::from_millis(500));
}

fn client() -> Client {
    client_of(server_with(tweak))
}

/// Host pid of sandbox `id`'s init (its guest agent), from runc's state.
fn agent_pid(id: &str) -> i32 {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(server_with(tweak).data_dir.join("runc"))
        .args(["state", id])
        .output()
        .expect("runc state");
    assert!(out.status.success(), "runc state {id} failed");
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).expect("state json");
    let pid = state["pid"].as_i64().expect("pid") as i32;
    assert!(pid > 1, "a real pid: {state}");
    pid
}

/// Reads a command's SSE output stream until it ends or `limit` passes; returns its text.
async fn raw_stream(url: &str, token: &str, limit: Duration) -> String {
    let resp = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("attach");
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let until = Instant::now() + limit;
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout(until.saturating_duration_since(Instant::now()), body.next()).await
    {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if text.contains("event: error") || text.contains("event: exit") {
            break;
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_is_reported_degraded_and_repaired_with_files_kept() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let wrote = sh(&c, &id, "echo kept > /home/user/f && echo ok").await;
    assert_eq!(wrote.stdout_text(), "ok\n", "{}", wrote.stderr_text());
    // A command that is running when the agent dies, with a reader on its output.
    let req = cove_api_types::CreateCommandRequest {
        shell: Some("echo started; sleep 300".into()),
        ..Default::default()
    };
    let running = c.create_command(&id, &req).await.expect("start sleeper");
    let att = running.attachment.clone();
    let reader =
        tokio::spawn(
            async move { raw_stream(&att.url, &att.token, Duration::from_secs(60)).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;

    let pid = agent_pid(&id);
    let t0 = Instant::now();
    // From the host, as the OOM killer or an operator would.
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());

    // The sandbox reports degraded (polled), then runs again (bounded waits).
    let mut seen_degraded = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = c.get_sandbox(&id).await.expect("get");
        if s.state == SandboxState::Degraded && seen_degraded.is_none() {
            seen_degraded = Some(s.state_reason.clone().unwrap_or_default());
        }
        if s.state == SandboxState::Running && t0.elapsed() > Duration::from_millis(200) {
            // Running again after the kill only counts once the repair was recorded.
            if seen_degraded.is_some()
                || s.state_reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with("repaired"))
            {
                break;
            }
        }
        assert!(
            s.state != SandboxState::Failed,
            "the sandbox failed: {:?}",
            s.state_reason
        );
        assert!(Instant::now() < deadline, "not repaired within 60 s: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let repaired_after = t0.elapsed();

    // The event log tells the story: degraded with its reason, then repaired.
    let mut events = Box::pin(c.events(Some(0)));
    let mut story = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while let Ok(Some(ev)) = tokio::time::timeout(
        until.saturating_duration_since(Instant::now()),
        events.next(),
    )
    .await
    {
        let ev = ev.expect("event");
        if ev.sandbox_id != id {
            continue;
        }
        let last = ev.kind == EventType::SandboxRepaired;
        story.push((ev.kind, ev.reason));
        if last {
            break;
        }
    }
    let degraded = story
        .iter()
        .find(|(k, _)| *k == EventType::SandboxDegraded)
        .unwrap_or_else(|| panic!("no sandbox.degraded event: {story:?}"));
    let reason = degraded.1.clone().unwrap_or_default();
    assert!(reason.contains("guest agent"), "reason: {reason}");
    assert!(
        !reason.contains("/var/") && !reason.contains("/tmp/"),
        "no host path: {reason}"
    );
    assert_eq!(story.last().map(|e| e.0), Some(EventType::SandboxRepaired));
    if let Some(r) = &seen_degraded {
        assert_eq!(r, &reason);
    }

    // The files are kept, new commands work, the sandbox has a new init.
    assert_eq!(
        sh(&c, &id, "cat /home/user/f").await.stdout_text(),
        "kept\n"
    );
    assert_eq!(sh(&c, &id, "echo again").await.stdout_text(), "again\n");
    assert_ne!(agent_pid(&id), pid);

    // The command that ran ended with a clear reason, on its stream and when asked for.
    let stream = tokio::time::timeout(Duration::from_secs(70), reader)
        .await
        .expect("reader ends")
        .expect("reader");
    assert!(stream.contains("started"), "{stream}");
    assert!(
        stream.contains("event: error") && stream.contains("guest_restarted"),
        "the stream says why it ended: {stream}"
    );
    let err = c
        .get_command(&id, &running.command.id, None)
        .await
        .expect_err("the command ended with its agent");
    let api = err.api_body().expect("an API error");
    assert_eq!(api.code, ErrorCode::GuestRestarted, "{api:?}");
    eprintln!(
        "agent killed → running again in {:.2} s (degraded seen by polling: {})",
        repaired_after.as_secs_f64(),
        seen_degraded.is_some()
    );
    delete(&c, &id).await;
}
