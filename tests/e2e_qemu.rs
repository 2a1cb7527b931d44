//! The qemu runtime end to end: a server started with `--runtime qemu` (TCG here), the `tiny`
//! template as a VM. A subset of the command/file suite plus what only a VM does: its own
//! kernel, pause/resume through QMP, suspend → wake with memory (a background counter keeps
//! counting, the clock is set from the host), clones of the base snapshot with their own
//! randomness, a guest kernel panic ending in `failed`, and VMs re-adopted after the server is
//! SIGKILLed.
//!
//! At most two VMs run at once: two tests at a time hold a slot, each runs one VM at a time. Skipped (passes with a message)
//! without `qemu-system-x86_64`.

use std::time::{Duration, Instant};

use cove_api_types::{CreateCommandRequest, OperationState, SandboxState};
use cove_client::{Client, UploadOptions};
use cove_e2e::server_process::ServerProcess;
use cove_e2e::{client_of, delete, have_qemu, sandbox, server_with, sh, shell, Server};

fn qemu_server() -> &'static Server {
    server_with(|cfg| {
        cfg.runtime = cove_server::RuntimeChoice::Qemu;
        cfg.lifecycle.reconcile_interval = Some(Duration::from_millis(500));
    })
}

/// At most two VM tests at once, whatever `--test-threads` says (TCG on two cores).
static VM_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

fn as_root(line: &str) -> CreateCommandRequest {
    CreateCommandRequest {
        user: Some("root".into()),
        ..shell(line)
    }
}

async fn wait_ok(c: &Client, op: cove_api_types::Operation) {
    let op = c
        .wait_operation(&op.id, Duration::from_secs(180))
        .await
        .expect("operation ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?}: {:?}",
        op.kind,
        op.error
    );
}

fn qemu_processes(id: &str) -> usize {
    let name = format!("cove-{id}");
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| c.split(|b| *b == 0).any(|a| a == name.as_bytes()))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_runs_commands_files_pause_and_suspend_wake_with_memory() {
    if !have_qemu() {
        return;
    }
    let _slot = VM_SLOTS.acquire().await.expect("slot");
    let c = client_of(qemu_server());
    let caps = c.capabilities().await.expect("capabilities");
    assert_eq!(caps.runtime, "qemu");
    assert_eq!(caps.boundary, "vm");
    assert!(caps.suspend_memory);

    let t = Instant::now();
    let id = sandbox(&c, "tiny").await;
    eprintln!("create: {:?}", t.elapsed());
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(s.runtime, "qemu");

    let t = Instant::now();
    let out = sh(&c, &id, "uname -r; hostname").await;
    eprintln!("first exec: {:?}", t.elapsed());
    assert_eq!(out.command.exit_code, Some(0), "{}", out.stderr_text());
    assert!(
        out.stdout_text().contains("cloud-amd64"),
        "its own kernel: {}",
        out.stdout_text()
    );
    assert!(
        out.stdout_text().contains(&id),
        "hostname: {}",
        out.stdout_text()
    );
    let t = Instant::now();
    let out = sh(&c, &id, "true").await;
    eprintln!("exec true: {:?}", t.elapsed());
    assert_eq!(out.command.exit_code, Some(0));

    // Files both ways, with binary content.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    c.upload(&id, "/tmp/in/blob", data.clone(), &UploadOptions::default())
        .await
        .expect("upload");
    assert_eq!(c.read_file(&id, "/tmp/in/blob").await.expect("read"), data);
    let out = sh(&c, &id, "wc -c < /tmp/in/blob").await;
    assert_eq!(out.stdout_text().trim(), "300000");

    // A background counter that must survive pause and suspend.
    let counter = c
        .create_command(
            &id,
            &as_root("i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done"),
        )
        .await
        .expect("counter");
    tokio::time::sleep(Duration::from_millis(800)).await;

    let t = Instant::now();
    wait_ok(&c, c.pause_sandbox(&id).await.expect("pause")).await;
    eprintln!("pause op: {:?}", t.elapsed());
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Paused
    );
    wait_ok(&c, c.resume_sandbox(&id).await.expect("resume")).await;
    let before: u64 = sh(&c, &id, "cat /tmp/count")
        .await
        .stdout_text()
        .trim()
        .parse()
        .expect("n");

    let t = Instant::now();
    wait_ok(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    eprintln!("suspend op: {:?}", t.elapsed());
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Suspended
    );
    assert_eq!(qemu_processes(&id), 0, "no VM while suspended");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t = Instant::now();
    wait_ok(&c, c.wake_sandbox(&id).await.expect("wake")).await;
    eprintln!("wake op: {:?}", t.elapsed());
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(s.state, SandboxState::Running);
    assert_eq!(s.memory_restored, Some(true));
    // With memory restored the command itself survived: the API still knows it, running.
    let kept = c
        .get_command(&id, &counter.command.id, None)
        .await
        .expect("the counter command survives a memory-preserving suspend");
    assert_eq!(kept.state, cove_api_types::CommandState::Running);
    let host_before = unix_now();
    let out = sh(&c, &id, "cat /tmp/count; wc -c < /tmp/in/blob; date +%s").await;
    let text = out.stdout_text();
    let mut lines = text.lines();
    let after: u64 = lines.next().unwrap_or("").parse().expect("count");
    assert_eq!(lines.next(), Some("300000"), "files survive");
    let guest_now: i64 = lines.next().unwrap_or("").parse().expect("date");
    let host_after = unix_now();
    // Bracketed by host times taken around the command: under load its round trip alone
    // takes seconds, while a clock not set on wake is behind by the time spent suspended.
    assert!(
        guest_now >= host_before - 2 && guest_now <= host_after + 1,
        "guest clock {guest_now} outside host [{host_before}, {host_after}]"
    );
    assert!(
        after >= before,
        "the counter's memory survived: {before} → {after}"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later: u64 = sh(&c, &id, "cat /tmp/count")
        .await
        .stdout_text()
        .trim()
        .parse()
        .expect("n");
    assert!(later > after, "and it keeps counting: {after} → {later}");

    delete(&c, &id).await;
    assert_eq!(qemu_processes(&id), 0, "no QEMU left after delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_kernel_panic_fails_the_sandbox_with_the_reason() {
    if !have_qemu() {
        return;
    }
    let _slot = VM_SLOTS.acquire().await.expect("slot");
    let c = client_of(qemu_server());
    let id = sandbox(&c, "tiny").await;
    // The guest may die before it answers the spawn; either way it panics.
    let _ = c
        .create_command(&id, &as_root("echo c > /proc/sysrq-trigger"))
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = loop {
        let s = c.get_sandbox(&id).await.expect("get");
        if s.state == SandboxState::Failed || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(s.state, SandboxState::Failed);
    let reason = s.state_reason.unwrap_or_default();
    assert!(reason.contains("panic"), "reason names the panic: {reason}");
    assert_eq!(qemu_processes(&id), 0);
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_cloned_from_the_base_snapshot_differ_in_randomness_and_know_the_time() {
    if !have_qemu() {
        return;
    }
    let _slot = VM_SLOTS.acquire().await.expect("slot");
    let c = client_of(qemu_server());
    let mut seen = Vec::new();
    // One at a time: at most two VMs run at once on this machine (the other test may hold one).
    for _ in 0..3 {
        let t = Instant::now();
        let id = sandbox(&c, "tiny").await;
        eprintln!("create: {:?}", t.elapsed());
        let host_before = unix_now();
        let out = sh(
            &c,
            &id,
            "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; hostname; date +%s",
        )
        .await;
        let text = out.stdout_text();
        let mut lines = text.lines();
        let random = lines.next().unwrap_or("").to_string();
        assert_eq!(random.len(), 32, "{text}");
        assert_eq!(
            lines.next(),
            Some(id.as_str()),
            "each clone has its own hostname"
        );
        let guest_now: i64 = lines.next().unwrap_or("").parse().expect("date");
        let host_after = unix_now();
        // Bracketed by host times taken around the command: under load its round trip alone
        // takes seconds, while a clock not set on wake is behind by the time spent suspended.
        assert!(
            guest_now >= host_before - 2 && guest_now <= host_after + 1,
            "guest clock {guest_now} outside host [{host_before}, {host_after}]"
        );
        assert!(
            !seen.contains(&random),
            "clones share random state: {random}"
        );
        seen.push(random);
        delete(&c, &id).await;
    }
}

fn qemu_pid(data_dir: &std::path::Path, id: &str) -> Option<String> {
    std::fs::read_to_string(data_dir.join("qemu").join(id).join("qemu.pid")).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vms_are_readopted_after_the_server_is_killed() {
    if !have_qemu() {
        return;
    }
    let _slot = VM_SLOTS.acquire().await.expect("slot");
    // Its own server process (to be SIGKILLed) with the qemu runtime; dropping it stops the
    // server and removes its VMs, mounts and network namespaces.
    let mut server = ServerProcess::new(
        std::path::Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")),
        500,
    );
    server.env.push(("COVE_E2E_RUNTIME".into(), "qemu".into()));
    let data_dir = server.data_dir.clone();
    let c = server.start().await;
    wait_ok(
        &c,
        c.build_release("tiny", &Default::default())
            .await
            .expect("build")
            .operation,
    )
    .await;
    let id = sandbox(&c, "tiny").await;
    let out = sh(&c, &id, "echo before > /tmp/mark; echo ok").await;
    assert_eq!(out.stdout_text(), "ok\n");
    let pid = qemu_pid(&data_dir, &id).expect("pid file");

    // SIGKILL: the VM keeps running without its server.
    server.kill9();
    assert_eq!(qemu_processes(&id), 1, "the VM outlives the server");

    let c = server.start().await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(
        s.state,
        SandboxState::Running,
        "re-adopted: {:?}",
        s.state_reason
    );
    assert_eq!(
        qemu_pid(&data_dir, &id),
        Some(pid),
        "the same VM, not a new one"
    );
    let out = sh(&c, &id, "cat /tmp/mark").await;
    assert_eq!(
        out.stdout_text(),
        "before\n",
        "its memory and files are intact"
    );
    delete(&c, &id).await;
    assert_eq!(qemu_processes(&id), 0, "nothing orphaned");
    let left = server.stop();
    assert!(left.is_empty(), "left after the stop: {left:?}");
}

/// The host's wall clock in whole seconds since the epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
