//! gVisor's suspend that keeps memory, end to end: a server with `--runtime gvisor` and no
//! sandbox networks (`--network off`), whose suspends checkpoint the whole sandbox with
//! `runsc checkpoint` and whose wakes `runsc restore` it (see `docs/runtimes.md`, "gVisor").
//!
//! Checkpoints keep memory the same way (the sandbox is checkpointed and carries on from its
//! image in place), a rollback restores it, and a fork starts from the files only.
//!
//! Fails under `CI=true` without `runsc`; elsewhere skipped (passes with a message).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cove_api_types::{
    CreateCheckpointRequest, ForkRequest, Operation, OperationState, SandboxState,
};
use cove_client::Client;
use cove_e2e::{client_of, delete, have_runsc, root_sh, sandbox, server_with, sh, Server};

fn gvisor_server() -> &'static Server {
    server_with(|cfg| {
        cfg.runtime = cove_server::RuntimeChoice::Gvisor;
        cfg.network.mode = cove_server::NetworkMode::Off;
    })
}

async fn done(c: &Client, op: Operation) {
    let op = c
        .wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("operation ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?} failed: {:?}",
        op.kind,
        op.error
    );
}

/// Suspends and wakes `id`; returns the wake's `memory_restored`. Prints how long each took
/// (the operations as the API client sees them; not asserted).
async fn suspend_and_wake(c: &Client, id: &str) -> Option<bool> {
    let t0 = std::time::Instant::now();
    done(c, c.suspend_sandbox(id).await.expect("suspend")).await;
    let suspended = t0.elapsed();
    assert_eq!(
        c.get_sandbox(id).await.expect("get").state,
        SandboxState::Suspended
    );
    let t1 = std::time::Instant::now();
    done(c, c.wake_sandbox(id).await.expect("wake")).await;
    let woken = t1.elapsed();
    let s = c.get_sandbox(id).await.expect("get");
    assert_eq!(s.state, SandboxState::Running);
    eprintln!(
        "suspend {} ms, wake {} ms, memory_restored {:?}",
        suspended.as_millis(),
        woken.as_millis(),
        s.memory_restored
    );
    s.memory_restored
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// The counter's value in `/tmp/c` (gVisor's in-memory tmpfs: only a restored memory keeps it;
/// the loop renames each value into place, so a read never sees a file being rewritten).
async fn counter(c: &Client, id: &str) -> u64 {
    let o = sh(c, id, "cat /tmp/c").await;
    o.stdout_text()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("counter: {:?} {:?}", o.stdout_text(), o.stderr_text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_a_loopback_server_carry_on_after_suspend_and_wake() {
    if !have_runsc() {
        return;
    }
    let c = client_of(gvisor_server());
    let caps = c.capabilities().await.expect("capabilities");
    assert_eq!(
        (caps.runtime.as_str(), caps.network, caps.suspend_memory),
        ("gvisor", false, true),
        "without sandbox networks a gvisor node keeps memory"
    );
    let id = sandbox(&c, "base").await;
    let o = sh(
        &c,
        &id,
        "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.2; done' \
         </dev/null >/dev/null 2>&1 & \
         cd /tmp && setsid python3 -m http.server 8000 --bind 127.0.0.1 \
         </dev/null >/dev/null 2>&1 & echo $!",
    )
    .await;
    let server_pid = o.stdout_text().trim().to_string();
    assert!(!server_pid.is_empty(), "{}", o.stderr_text());
    let get = format!(
        "python3 -c 'import urllib.request as u; \
         print(u.urlopen(\"http://127.0.0.1:8000/\", timeout=10).status)'; \
         tr \"\\0\" \" \" < /proc/{server_pid}/cmdline"
    );
    // The server answers (give it a few tries to bind) and the counter counts.
    let mut answered = String::new();
    for _ in 0..50 {
        answered = sh(&c, &id, &get).await.stdout_text();
        if answered.starts_with("200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(answered.starts_with("200\n"), "{answered:?}");
    assert!(answered.contains("http.server"), "{answered:?}");
    let mut before = 0;
    for _ in 0..50 {
        before = counter(&c, &id).await;
        if before >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(before >= 5, "the counter counts: {before}");

    assert_eq!(suspend_and_wake(&c, &id).await, Some(true));

    // The clock is right on the first command after the wake.
    let host_before = now_secs();
    let o = sh(&c, &id, "date +%s.%N").await;
    let host_after = now_secs();
    let guest: f64 = o.stdout_text().trim().parse().expect("date");
    assert!(
        guest > host_before - 1.0 && guest < host_after + 1.0,
        "guest clock {guest} against host {host_before}..{host_after}"
    );
    // The counter carried on from its value, not from 1, and still counts.
    let after = counter(&c, &id).await;
    assert!(after >= before, "counter restarted: {before} then {after}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let later = counter(&c, &id).await;
    assert!(later > after, "counter stopped: {after} then {later}");
    // Pause (the freezer of the restored sandbox) and resume work on it.
    done(&c, c.pause_sandbox(&id).await.expect("pause")).await;
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Paused
    );
    done(&c, c.resume_sandbox(&id).await.expect("resume")).await;
    // The same server process answers.
    let o = sh(&c, &id, &get).await;
    assert!(
        o.stdout_text().starts_with("200\n") && o.stdout_text().contains("http.server"),
        "{:?} {:?}",
        o.stdout_text(),
        o.stderr_text()
    );
    // A second round works too (the agent quiesces again after listening again).
    assert_eq!(suspend_and_wake(&c, &id).await, Some(true));
    let second = counter(&c, &id).await;
    assert!(second >= later, "counter restarted: {later} then {second}");

    // A suspend that fails after the checkpoint (the snapshot store cannot write this
    // sandbox's objects: their directory is immutable) is rolled back: the sandbox carries on
    // from its checkpoint, in place.
    let objects = gvisor_server()
        .data_dir
        .join("snapshots/sandboxes")
        .join(&id);
    std::fs::create_dir_all(&objects).expect("objects dir");
    chattr("+i", &objects);
    let op = c.suspend_sandbox(&id).await.expect("suspend");
    let op = c
        .wait_operation(&op.id, Duration::from_secs(120))
        .await
        .expect("operation ends");
    chattr("-i", &objects);
    assert_eq!(op.state, OperationState::Failed, "{op:?}");
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    let resumed = counter(&c, &id).await;
    assert!(
        resumed >= second,
        "counter restarted: {second} then {resumed}"
    );
    let o = sh(&c, &id, &get).await;
    assert!(
        o.stdout_text().starts_with("200\n") && o.stdout_text().contains("http.server"),
        "{:?} {:?}",
        o.stdout_text(),
        o.stderr_text()
    );
    delete(&c, &id).await;
}

/// `chattr <flag> <path>` (the immutable attribute: even root cannot write into the directory).
fn chattr(flag: &str, path: &std::path::Path) {
    let ok = std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chattr {flag} {}", path.display());
}

/// Writes `/root/file.txt` and `/tmp/gone` in `id` and starts a process that holds a unix socket
/// bound on the sandbox's disk: a host socket (`--host-uds=create`), which gVisor cannot
/// checkpoint, so `runsc checkpoint` fails (and stops the sandbox).
async fn hold_a_host_socket(c: &Client, id: &str) {
    let o = root_sh(
        c,
        id,
        "echo kept > /root/file.txt; \
         setsid python3 -c 'import socket, time; s = socket.socket(socket.AF_UNIX); \
         s.bind(\"/root/hold.sock\"); s.listen(); time.sleep(100000)' \
         </dev/null >/dev/null 2>&1 & \
         for i in $(seq 50); do test -S /root/hold.sock && break; sleep 0.1; done; \
         echo 1 > /tmp/gone; test -S /root/hold.sock && echo bound",
    )
    .await;
    assert_eq!(o.stdout_text(), "bound\n", "{}", o.stderr_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_checkpoint_falls_back_to_the_files() {
    if !have_runsc() {
        return;
    }
    let c = client_of(gvisor_server());
    let id = sandbox(&c, "base").await;
    hold_a_host_socket(&c, &id).await;

    assert_eq!(suspend_and_wake(&c, &id).await, Some(false));
    // The sandbox is not lost: its files are back and it runs commands; memory is not
    // (`/tmp` is gVisor's tmpfs).
    let o = root_sh(
        &c,
        &id,
        "cat /root/file.txt; test -e /tmp/gone || echo fresh",
    )
    .await;
    assert_eq!(o.stdout_text(), "kept\nfresh\n", "{}", o.stderr_text());
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_fails_starts_the_sandbox_from_its_files() {
    if !have_runsc() {
        return;
    }
    let c = client_of(gvisor_server());
    let id = sandbox(&c, "base").await;
    let o = root_sh(
        &c,
        &id,
        "echo kept > /root/file.txt; echo 1 > /tmp/gone; echo ok",
    )
    .await;
    assert_eq!(o.stdout_text(), "ok\n", "{}", o.stderr_text());
    done(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    // The memory image no longer is one: garbage of the same length.
    let image = gvisor_server()
        .data_dir
        .join("snapshots/sandboxes")
        .join(&id)
        .join("gvisor-memory.img");
    let len = std::fs::metadata(&image).expect("memory image saved").len();
    std::fs::write(&image, vec![0x5a_u8; len as usize]).expect("damage the image");

    done(&c, c.wake_sandbox(&id).await.expect("wake")).await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(
        (s.state, s.memory_restored),
        (SandboxState::Running, Some(false))
    );
    let o = root_sh(
        &c,
        &id,
        "cat /root/file.txt; test -e /tmp/gone || echo fresh",
    )
    .await;
    assert_eq!(o.stdout_text(), "kept\nfresh\n", "{}", o.stderr_text());
    delete(&c, &id).await;
}

/// The counter's pid inside the sandbox (gVisor keeps guest pids over a restore).
async fn counter_pid(c: &Client, id: &str) -> String {
    let pid = root_sh(c, id, "cat /tmp/pid").await.stdout_text();
    assert!(!pid.trim().is_empty(), "no counter pid");
    pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_keeps_memory_and_running_and_a_rollback_brings_it_back() {
    if !have_runsc() {
        return;
    }
    let c = client_of(gvisor_server());
    let id = sandbox(&c, "base").await;
    let o = root_sh(
        &c,
        &id,
        "echo before > /root/f; \
         setsid sh -c 'echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' \
         </dev/null >/dev/null 2>&1 & echo ok",
    )
    .await;
    assert_eq!(o.stdout_text(), "ok\n", "{}", o.stderr_text());
    let mut at_checkpoint = 0;
    for _ in 0..50 {
        at_checkpoint = root_sh(&c, &id, "cat /tmp/c 2>/dev/null || echo 0")
            .await
            .stdout_text()
            .trim()
            .parse()
            .expect("counter");
        if at_checkpoint >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(at_checkpoint >= 5, "the counter counts: {at_checkpoint}");
    let pid = counter_pid(&c, &id).await;

    let r = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    done(&c, r.operation).await;
    let ck = c.get_checkpoint(&r.checkpoint.id).await.expect("get");
    assert!(
        ck.memory,
        "a gVisor sandbox without a network keeps memory: {ck:?}"
    );
    eprintln!("gvisor checkpoint pause: {:?} ms", ck.pause_ms);
    // The sandbox runs on after the checkpoint: the same counter process, counting on.
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    let after_checkpoint = counter(&c, &id).await;
    assert!(
        after_checkpoint >= at_checkpoint,
        "counter restarted: {at_checkpoint} then {after_checkpoint}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = counter(&c, &id).await;
    assert!(
        later > after_checkpoint,
        "the counter stopped after the checkpoint ({after_checkpoint} then {later})"
    );
    assert_eq!(counter_pid(&c, &id).await, pid);
    let o = root_sh(&c, &id, "echo after > /root/f; echo ok").await;
    assert_eq!(o.stdout_text(), "ok\n", "{}", o.stderr_text());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before_rollback = counter(&c, &id).await;

    done(&c, c.rollback_sandbox(&id, &ck.id).await.expect("rollback")).await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(
        (s.state, s.memory_restored),
        (SandboxState::Running, Some(true))
    );
    assert_eq!(
        root_sh(&c, &id, "cat /root/f").await.stdout_text(),
        "before\n"
    );
    // The counter is back where the checkpoint caught it, the same process, and counts on.
    let x = counter(&c, &id).await;
    assert!(
        x >= at_checkpoint && x < before_rollback,
        "the counter went back to the checkpoint ({at_checkpoint}..{after_checkpoint}): {x}, \
         was {before_rollback}"
    );
    assert_eq!(counter_pid(&c, &id).await, pid);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let y = counter(&c, &id).await;
    assert!(y > x, "the restored counter keeps counting ({x} then {y})");

    // A fork starts from the files of a fresh checkpoint with its own identity: the image
    // holds the parent's hostname and processes, so it is not restored under another id.
    let parent_hostname = root_sh(&c, &id, "hostname").await.stdout_text();
    let f = c
        .fork_sandbox(
            &id,
            &ForkRequest {
                count: 1,
                metadata: Default::default(),
            },
        )
        .await
        .expect("fork");
    done(&c, f.operation).await;
    let fork = &f.sandboxes[0];
    done(&c, fork.operation.clone()).await;
    let fid = &fork.sandbox.id;
    let fs = c.get_sandbox(fid).await.expect("get fork");
    assert_eq!(
        (fs.state, fs.memory_restored),
        (SandboxState::Running, Some(false))
    );
    let o = root_sh(
        &c,
        fid,
        "cat /root/f; hostname; test -e /tmp/c || echo fresh",
    )
    .await;
    assert_eq!(
        o.stdout_text(),
        format!("before\n{fid}\nfresh\n"),
        "{}",
        o.stderr_text()
    );
    assert_ne!(parent_hostname.trim(), fid.as_str());
    // The parent ran on through the fork's checkpoint.
    let z = counter(&c, &id).await;
    assert!(z >= y, "the parent's counter went back: {y} then {z}");
    assert_eq!(counter_pid(&c, &id).await, pid);

    delete(&c, fid).await;
    delete(&c, &id).await;
    for cid in [&ck.id, &f.checkpoint.id] {
        c.delete_checkpoint(cid).await.expect("delete checkpoint");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_whose_memory_cannot_be_saved_keeps_the_files_and_the_sandbox() {
    if !have_runsc() {
        return;
    }
    let c = client_of(gvisor_server());
    let id = sandbox(&c, "base").await;
    hold_a_host_socket(&c, &id).await;
    let r = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    done(&c, r.operation).await;
    let ck = c.get_checkpoint(&r.checkpoint.id).await.expect("get");
    assert!(!ck.memory, "runsc cannot checkpoint a host socket: {ck:?}");
    eprintln!(
        "failed memory checkpoint, files only: pause {:?} ms",
        ck.pause_ms
    );
    // The sandbox is not lost: the failed checkpoint stopped it and it started again from
    // its files (its processes and `/tmp`, gVisor's tmpfs, are new).
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    let o = root_sh(
        &c,
        &id,
        "cat /root/file.txt; test -e /tmp/gone || echo fresh; echo changed > /root/file.txt",
    )
    .await;
    assert_eq!(o.stdout_text(), "kept\nfresh\n", "{}", o.stderr_text());
    // The files-only checkpoint rolls back (without memory).
    done(&c, c.rollback_sandbox(&id, &ck.id).await.expect("rollback")).await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(
        (s.state, s.memory_restored),
        (SandboxState::Running, Some(false))
    );
    let o = root_sh(&c, &id, "cat /root/file.txt").await;
    assert_eq!(o.stdout_text(), "kept\n", "{}", o.stderr_text());
    delete(&c, &id).await;
    c.delete_checkpoint(&ck.id)
        .await
        .expect("delete checkpoint");
}
