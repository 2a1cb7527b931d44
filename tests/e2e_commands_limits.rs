//! C13: an OOM and a fork bomb are stopped by the sandbox's cgroup limits; the command result
//! says what happened, the guest agent stays responsive, and another sandbox is unaffected.
//!
//! Shape of the case with smaller numbers, so it runs in seconds on this machine: the sandbox has
//! 256 MiB of memory (the case says 1 GiB) and fills it with `tail` of 1 GiB of newline-free input
//! (the case: 3 GiB), and a process limit of 256 (default 1024) for the fork bomb.

use std::time::{Duration, Instant};

use cove_api_types::{
    CommandState, CreateCommandRequest, CreateSandboxRequest, ResourcesRequest, SandboxState,
};
use cove_e2e::{client, collect, delete, sandbox, sandbox_with, sh};

fn shell_with_timeout(s: &str, timeout_s: f64) -> CreateCommandRequest {
    CreateCommandRequest {
        shell: Some(s.to_string()),
        timeout_s: Some(timeout_s),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c13_oom_and_fork_bomb_are_contained_and_reported() {
    let c = client();
    let id = sandbox_with(
        &c,
        "base",
        CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                memory_mib: Some(256),
                pids_max: Some(256),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let control = sandbox(&c, "base").await;

    // Step 1: OOM.
    let t0 = Instant::now();
    let started = c
        .create_command(
            &id,
            &shell_with_timeout("head -c 1G /dev/zero | tail > /dev/null", 60.0),
        )
        .await
        .expect("start the OOM");
    let o = collect(&c, &started.attachment, 0, t0).await;
    assert!(o.elapsed < Duration::from_secs(60), "{:?}", o.elapsed);
    let killed = o.command.exit_code == Some(137) || o.command.signal.as_deref() == Some("SIGKILL");
    assert!(killed, "{:?}", o.command);
    assert!(o.command.oom_killed, "{:?}", o.command);
    assert!(!o.command.timed_out);

    // Step 2: the agent survived.
    let t0 = Instant::now();
    assert_eq!(sh(&c, &id, "echo ok").await.stdout_text(), "ok\n");
    assert!(t0.elapsed() < Duration::from_secs(10));
    let fine = sh(&c, &id, "echo fine").await.command;
    assert!(!fine.oom_killed);

    // Step 3: a fork bomb with a 20 s timeout; step 4: meanwhile and 30 s after, the control
    // sandbox answers within 2 s every 2 s, and the bombed sandbox stays `running`.
    let bomb_started = Instant::now();
    let bomb = c
        .create_command(&id, &shell_with_timeout("sh -c 'b(){ b & b & }; b'", 20.0))
        .await
        .expect("start the bomb");
    let bomb_result = {
        let c = c.clone();
        let att = bomb.attachment.clone();
        tokio::spawn(async move { collect(&c, &att, 0, bomb_started).await })
    };
    let mut checks = 0;
    while bomb_started.elapsed() < Duration::from_secs(50) {
        let t = Instant::now();
        let ok = tokio::time::timeout(Duration::from_secs(2), sh(&c, &control, "echo ok"))
            .await
            .expect("the control sandbox answers within 2 s");
        assert_eq!(ok.stdout_text(), "ok\n");
        let bombed = c.get_sandbox(&id).await.expect("get the bombed sandbox");
        assert_eq!(bombed.state, SandboxState::Running);
        checks += 1;
        tokio::time::sleep(Duration::from_secs(2).saturating_sub(t.elapsed())).await;
    }
    assert!(checks >= 15, "{checks} checks");
    let o = bomb_result.await.expect("bomb result");
    assert!(
        o.elapsed < Duration::from_secs(25),
        "the bomb's call returns within its timeout: {:?}",
        o.elapsed
    );
    assert_eq!(o.command.state, CommandState::Exited);
    // The leader returns at once (its function forks and returns) and the forks it makes fail
    // at the process limit; if it were still there at the deadline, it would be killed.
    let stderr = o.stderr_text();
    let forks_failed = stderr.contains("fork") || stderr.contains("Resource temporarily");
    assert!(
        o.command.timed_out || forks_failed,
        "{:?} {stderr}",
        o.command
    );
    eprintln!(
        "fork bomb: result after {:?} (exit {:?}, timed out {}); stderr starts {:?}",
        o.elapsed,
        o.command.exit_code,
        o.command.timed_out,
        stderr.lines().next()
    );
    // The timeout also bounds what the bomb left running after its leader exited.
    assert_eq!(
        sh(&c, &id, "pgrep -f '[b] & b'; echo rc=$?")
            .await
            .stdout_text(),
        "rc=1\n"
    );

    // Step 5: the bombed sandbox runs commands again.
    let t0 = Instant::now();
    loop {
        let r = c
            .create_command(
                &id,
                &CreateCommandRequest {
                    shell: Some("echo ok".into()),
                    ..Default::default()
                },
            )
            .await;
        match r {
            Ok(started) => {
                let o = collect(&c, &started.attachment, 0, Instant::now()).await;
                assert_eq!(o.stdout_text(), "ok\n");
                break;
            }
            Err(e) => {
                // A clear, typed refusal while processes drain; never a bare 5xx.
                let body = e.api_body().expect("an API error body");
                assert!(!body.message.is_empty());
                assert!(t0.elapsed() < Duration::from_secs(60), "{e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    delete(&c, &id).await;
    delete(&c, &control).await;
}
