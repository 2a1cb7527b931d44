//! Issue 12, item 4: one cgroup per command. Everything a command started, including daemons
//! that left its session (`setsid` after a double fork), is ended by kill and by timeout; an OOM
//! kill is reported on the command whose process was killed, not on another command that
//! happened to end by SIGKILL meanwhile, and the sandbox survives.

use std::time::{Duration, Instant};

use cove_api_types::{CommandState, CreateCommandRequest, CreateSandboxRequest, ResourcesRequest};
use cove_e2e::{client, collect, delete, root_sh, sandbox, sandbox_with, sh};

/// Starts a daemon that leaves the command's session and process group: a subshell forks it,
/// `setsid` gives it a session of its own, and the subshell exits so it is reparented to PID 1.
fn daemon(marker: u32) -> String {
    format!("(setsid sleep {marker} </dev/null >/dev/null 2>&1 &)")
}

/// How many processes of `sleep <marker>` run in the sandbox (as root, so every one is seen).
async fn sleepers(c: &cove_client::Client, id: &str, marker: u32) -> usize {
    let out = root_sh(c, id, &format!("pgrep -xf 'sleep {marker}' | wc -l")).await;
    out.stdout_text().trim().parse().expect("a count")
}

/// Waits until the daemon of `marker` is seen (it starts asynchronously).
async fn wait_started(c: &cove_client::Client, id: &str, marker: u32) {
    let t0 = Instant::now();
    while sleepers(c, id, marker).await == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "daemon {marker} never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_forked_daemon_is_killed_with_its_command() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let own = root_sh(&c, &id, "cat /proc/self/cgroup")
        .await
        .stdout_text();
    for hierarchy in ["freezer", "memory"] {
        assert!(
            own.lines()
                .any(|l| l.contains(&format!(":{hierarchy}:/cove-commands/"))),
            "a command runs in its own {hierarchy} cgroup: {own}"
        );
    }

    // Kill: the leader still runs; its daemon is in another session.
    let req = CreateCommandRequest {
        shell: Some(format!("{}; sleep 1000", daemon(7771))),
        ..Default::default()
    };
    let started = c.create_command(&id, &req).await.expect("start");
    wait_started(&c, &id, 7771).await;
    // The daemon really left the command's session.
    let sessions = root_sh(
        &c,
        &id,
        "for p in $(pgrep -xf 'sleep 7771'); do ps -o sid= -p $p; done; ps -o sid= -p $(pgrep -xf 'sleep 1000')",
    )
    .await
    .stdout_text();
    let sids: Vec<&str> = sessions.split_whitespace().collect();
    assert_eq!(sids.len(), 2, "{sessions:?}");
    assert_ne!(sids[0], sids[1], "the daemon has its own session");
    let killed = c
        .kill(&id, &started.command.id, Some(Duration::from_millis(500)))
        .await
        .expect("kill");
    assert_eq!(killed.state, CommandState::Exited);
    assert_eq!(
        sleepers(&c, &id, 7771).await,
        0,
        "the daemon died with its command"
    );

    // Timeout, leader still running.
    let req = CreateCommandRequest {
        shell: Some(format!("{}; sleep 1000", daemon(7772))),
        timeout_s: Some(3.0),
        ..Default::default()
    };
    let t0 = Instant::now();
    let started = c.create_command(&id, &req).await.expect("start");
    let o = collect(&c, &started.attachment, 0, t0).await;
    assert!(o.command.timed_out, "{:?}", o.command);
    assert_eq!(
        sleepers(&c, &id, 7772).await,
        0,
        "the daemon died at the timeout"
    );

    // Timeout, leader gone at once: the daemon is still bounded by the command's deadline.
    let req = CreateCommandRequest {
        shell: Some(daemon(7773)),
        timeout_s: Some(3.0),
        ..Default::default()
    };
    let t0 = Instant::now();
    let started = c.create_command(&id, &req).await.expect("start");
    let o = collect(&c, &started.attachment, 0, t0).await;
    assert_eq!(o.command.exit_code, Some(0), "{:?}", o.command);
    wait_started(&c, &id, 7773).await;
    let gone_by = Instant::now() + Duration::from_secs(15);
    while sleepers(&c, &id, 7773).await > 0 {
        assert!(
            Instant::now() < gone_by,
            "the daemon outlived its command's deadline by 12 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        t0.elapsed() >= Duration::from_secs(3),
        "not before the deadline"
    );

    // Without a timeout, a daemon a command leaves behind keeps running (servers started in
    // the background are a feature).
    sh(&c, &id, &daemon(7774)).await;
    wait_started(&c, &id, 7774).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sleepers(&c, &id, 7774).await, 1);
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_is_reported_on_its_own_command_only() {
    let c = client();
    let id = sandbox_with(
        &c,
        "base",
        CreateSandboxRequest {
            resources: Some(ResourcesRequest {
                memory_mib: Some(256),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    // A bystander that ends by SIGKILL (its own doing) after the OOM kill below.
    let bystander = c
        .create_command(
            &id,
            &CreateCommandRequest {
                shell: Some("sleep 6; kill -9 $$".to_string()),
                ..Default::default()
            },
        )
        .await
        .expect("start the bystander");
    let t0 = Instant::now();
    let hog = c
        .create_command(
            &id,
            &CreateCommandRequest {
                shell: Some("head -c 1G /dev/zero | tail > /dev/null".to_string()),
                timeout_s: Some(60.0),
                ..Default::default()
            },
        )
        .await
        .expect("start the hog");
    let o = collect(&c, &hog.attachment, 0, t0).await;
    assert!(o.command.oom_killed, "{:?}", o.command);
    assert!(!o.command.timed_out);

    let b = collect(&c, &bystander.attachment, 0, t0).await;
    let sigkilled =
        b.command.signal.as_deref() == Some("SIGKILL") || b.command.exit_code == Some(137);
    assert!(sigkilled, "{:?}", b.command);
    assert!(
        !b.command.oom_killed,
        "a SIGKILL during another command's OOM is not an OOM kill: {:?}",
        b.command
    );
    // The sandbox survived and runs commands.
    assert_eq!(sh(&c, &id, "echo ok").await.stdout_text(), "ok\n");
    delete(&c, &id).await;
}
