//! Sandbox lifecycle end to end with real runc sandboxes: pause/resume keep processes and
//! output, suspend releases every node resource and keeps the files (whiteouts and opaque
//! directories included) in the snapshot store, wake restores them without memory, delete
//! removes the snapshot; concurrent calls are ordered; events, operation listing and cancel.
//! The clock is right on the first command after a resume or wake; a wake of files is a new
//! boot (a new boot id), a pause is not.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cove_api_types::{
    CommandState, CreateCommandRequest, CreateSandboxRequest, ErrorCode, EventType,
    LifecycleRequest, Operation, OperationKind, OperationState, SandboxState,
};
use cove_client::Client;
use cove_e2e::{
    client, collect, delete, ensure_template, mounts_with, runc_containers, sandbox, server, sh,
    shell,
};
use futures::StreamExt;

const WAIT: Duration = Duration::from_secs(120);

async fn done(c: &Client, op: Operation) -> Operation {
    let op = c
        .wait_operation(&op.id, WAIT)
        .await
        .expect("operation ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?} failed: {:?}",
        op.kind,
        op.error
    );
    op
}

fn as_root(shell_line: &str) -> CreateCommandRequest {
    CreateCommandRequest {
        user: Some("root".into()),
        ..shell(shell_line)
    }
}

/// Asserts that the sandbox's clock is within 1 s of the host's on the first command (the
/// host's time read before and after the command bounds the moment it ran).
async fn clock_is_right(c: &Client, id: &str, after: &str) {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    };
    let before = now();
    // Whole seconds: the `tiny` template's busybox `date` has no `%N`.
    let out = sh(c, id, "date +%s").await;
    let inside: f64 = out.stdout_text().trim().parse().expect("a time");
    let end = now();
    assert!(
        inside >= before.floor() - 1.0 && inside <= end + 1.0,
        "the clock after {after} is off: {inside} not within 1 s of [{before}, {end}]"
    );
}

/// The sandbox's `/proc/sys/kernel/random/boot_id` (`none` without one).
async fn boot_id(c: &Client, id: &str) -> String {
    sh(
        c,
        id,
        "cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo none",
    )
    .await
    .stdout_text()
    .trim()
    .to_string()
}

fn sandbox_dir(id: &str) -> PathBuf {
    server().data_dir.join("sandboxes").join(id)
}

fn snapshot_object(id: &str) -> PathBuf {
    server()
        .data_dir
        .join("snapshots/sandboxes")
        .join(id)
        .join("fs.tar")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_and_resume_keeps_commands_files_and_output() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let w = sh(&c, &id, "echo kept > /home/user/f.txt").await;
    assert_eq!(w.command.exit_code, Some(0));
    let started = c
        .create_command(&id, &shell("echo before-pause; sleep 100000"))
        .await
        .expect("start command");
    let cid = started.command.id.clone();
    // The output before the pause has been produced.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .get_command(&id, &cid, None)
        .await
        .expect("get")
        .output_bytes
        < 13
    {
        assert!(Instant::now() < deadline, "no output before the pause");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let boot = boot_id(&c, &id).await;
    let op = done(&c, c.pause_sandbox(&id).await.expect("pause")).await;
    assert_eq!(op.kind, OperationKind::PauseSandbox);
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Paused
    );
    let err = c
        .create_command(&id, &shell("true"))
        .await
        .expect_err("exec while paused");
    assert_eq!(err.status(), Some(409));
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::SandboxNotRunning)
    );
    // A pause of a paused sandbox is a no-op success; `wake` is the one verb for every resting
    // state, so a wake of a paused sandbox resumes it.
    done(&c, c.pause_sandbox(&id).await.expect("pause again")).await;
    done(&c, c.wake_sandbox(&id).await.expect("wake while paused")).await;
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    done(&c, c.pause_sandbox(&id).await.expect("pause after wake")).await;

    done(&c, c.resume_sandbox(&id).await.expect("resume")).await;
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );
    clock_is_right(&c, &id, "a resume").await;
    let cmd = c
        .get_command(&id, &cid, None)
        .await
        .expect("command after resume");
    assert_eq!(
        cmd.state,
        CommandState::Running,
        "the command survives the pause"
    );
    let listed = c.list_commands(&id).await.expect("list").commands;
    assert!(listed
        .iter()
        .any(|x| x.id == cid && x.state == CommandState::Running));
    assert_eq!(
        sh(&c, &id, "cat /home/user/f.txt").await.stdout_text(),
        "kept\n"
    );
    assert_eq!(boot_id(&c, &id).await, boot, "a pause is no reboot");

    c.kill(&id, &cid, Some(Duration::from_millis(100)))
        .await
        .expect("kill");
    let out = collect(&c, &started.attachment, 0, Instant::now()).await;
    assert_eq!(
        out.stdout_text(),
        "before-pause\n",
        "output before the pause is intact"
    );
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_releases_the_node_and_wake_restores_files_without_memory() {
    let c = client();
    let caps = c.capabilities().await.expect("capabilities");
    assert_eq!(
        (caps.runtime.as_str(), caps.pause, caps.suspend_memory),
        (cove_e2e::test_runtime().name(), true, false)
    );
    assert_eq!(caps.snapshot_store, "file");

    let id = sandbox(&c, "tiny").await;
    let prep = cove_e2e::run(
        &c,
        &id,
        as_root(
            "set -e; cd /home/user; echo one > a.txt; mkdir -p d/e; echo two > d/e/b.txt; \
             chmod 640 a.txt; chown 1000:1000 a.txt; ln -s d/e/b.txt link; \
             rm /etc/profile; rm -rf /usr/local; mkdir -p /usr/local/new; echo ok",
        ),
    )
    .await;
    assert_eq!(prep.stdout_text(), "ok\n", "{}", prep.stderr_text());
    let boot_before = boot_id(&c, &id).await;
    let bg = c
        .create_command(&id, &shell("sleep 100000"))
        .await
        .expect("background");

    let op = done(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    assert_eq!(op.kind, OperationKind::SuspendSandbox);
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(s.state, SandboxState::Suspended);
    assert!(!sandbox_dir(&id).exists(), "the sandbox dir is released");
    assert!(
        snapshot_object(&id).is_file(),
        "the snapshot object is stored"
    );
    assert!(
        !runc_containers(&server().data_dir).contains(&id),
        "no runc container"
    );
    assert!(mounts_with(&id).is_empty(), "no mounts");
    let err = c
        .create_command(&id, &shell("true"))
        .await
        .expect_err("exec while suspended");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::SandboxNotRunning)
    );
    let err = c
        .pause_sandbox(&id)
        .await
        .expect_err("pause while suspended");
    assert_eq!(err.status(), Some(409));
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::InvalidState)
    );
    // Suspending a suspended sandbox is a no-op success.
    done(&c, c.suspend_sandbox(&id).await.expect("suspend again")).await;

    done(&c, c.wake_sandbox(&id).await.expect("wake")).await;
    let s = c.get_sandbox(&id).await.expect("get");
    assert_eq!(s.state, SandboxState::Running);
    assert_eq!(s.memory_restored, Some(false));
    clock_is_right(&c, &id, "a wake").await;
    assert!(
        !snapshot_object(&id).exists(),
        "the snapshot is dropped once the files are back"
    );
    let check = cove_e2e::run(
        &c,
        &id,
        as_root(
            "cd /home/user; cat a.txt d/e/b.txt link; stat -c '%a %u %g' a.txt; readlink link; \
             test -e /etc/profile && echo profile-back; test -e /usr/local/bin && echo bin-back; \
             ls /usr/local; echo end",
        ),
    )
    .await;
    assert_eq!(
        check.stdout_text(),
        "one\ntwo\ntwo\n640 1000 1000\nd/e/b.txt\nnew\nend\n",
        "{}",
        check.stderr_text()
    );
    // A wake of files is a new boot: on runc the sandbox's boot id is its own, new at every
    // start (gVisor's kernel here has no boot id file).
    if cove_e2e::test_runtime().name() == "runc" {
        let host = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("host's");
        let boot_after = boot_id(&c, &id).await;
        assert_ne!(boot_before, host.trim(), "not the host's boot id");
        assert_ne!(boot_after, boot_before, "a new boot id after the wake");
        assert_eq!(boot_after.len(), 36, "{boot_after}");
    }
    // Processes do not survive a suspend on runc: the commands from before are gone.
    let listed = c.list_commands(&id).await.expect("list").commands;
    assert!(
        !listed.iter().any(|x| x.id == bg.command.id),
        "old commands are gone: {listed:?}"
    );
    let err = c
        .get_command(&id, &bg.command.id, None)
        .await
        .expect_err("old command");
    assert_eq!(err.status(), Some(404));
    // Waking a running sandbox is a no-op success.
    done(&c, c.wake_sandbox(&id).await.expect("wake again")).await;
    delete(&c, &id).await;
    assert!(!sandbox_dir(&id).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_suspended_sandbox_removes_its_snapshot() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    sh(&c, &id, "echo x > /home/user/x").await;
    done(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    assert!(snapshot_object(&id).is_file());
    delete(&c, &id).await;
    assert!(!snapshot_object(&id).exists(), "snapshot removed");
    assert!(
        !snapshot_object(&id).parent().expect("dir").exists(),
        "snapshot dir removed"
    );
    assert!(!sandbox_dir(&id).exists());
    let err = c.get_sandbox(&id).await.expect_err("gone");
    assert_eq!(err.status(), Some(404));
    let err = c.delete_sandbox(&id).await.expect_err("second delete");
    assert_eq!(err.status(), Some(404));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_serialised_in_acknowledgement_order() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    done(&c, c.pause_sandbox(&id).await.expect("pause")).await;

    // Five concurrent resumes of a paused sandbox: one resumes it, the others are no-ops.
    let resumes = (0..5).map(|_| {
        let c = c.clone();
        let id = id.clone();
        async move { c.resume_sandbox(&id).await }
    });
    let ops = futures::future::join_all(resumes).await;
    for op in ops {
        let op = op.expect("resume accepted (no 4xx/5xx)");
        done(&c, op).await;
    }
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running
    );

    // An acknowledged pause is never undone by an earlier resume that finishes later.
    for _ in 0..3 {
        let p1 = c.pause_sandbox(&id).await.expect("pause");
        let r = c.resume_sandbox(&id).await.expect("resume");
        let p2 = c.pause_sandbox(&id).await.expect("pause");
        for op in [p1, r, p2] {
            done(&c, op).await;
        }
        assert_eq!(
            c.get_sandbox(&id).await.expect("get").state,
            SandboxState::Paused
        );
        done(&c, c.resume_sandbox(&id).await.expect("resume")).await;
    }
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_idempotency_cancel_and_operation_listing() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    let bad = c
        .lifecycle(
            &id,
            "pause",
            &LifecycleRequest {
                deadline_s: Some(0),
            },
        )
        .await;
    assert_eq!(
        bad.expect_err("deadline 0").api_body().map(|b| b.code),
        Some(ErrorCode::InvalidArgument)
    );
    let op = c
        .lifecycle(
            &id,
            "pause",
            &LifecycleRequest {
                deadline_s: Some(60),
            },
        )
        .await
        .expect("pause with a deadline");
    let left = op.deadline - op.created_at;
    assert!((55..=65).contains(&left.num_seconds()), "deadline {left}");
    let op = done(&c, op).await;
    // Cancelling a finished operation returns it unchanged.
    let again = c.cancel_operation(&op.id).await.expect("cancel finished");
    assert_eq!(again.state, OperationState::Succeeded);
    done(&c, c.resume_sandbox(&id).await.expect("resume")).await;

    // The same Idempotency-Key and body give the same operation; another body is a 409.
    let http = reqwest::Client::new();
    let url = format!("{}/v1/sandboxes/{id}/resume", server().api_url);
    let post = |body: &'static str| {
        http.post(&url)
            .bearer_auth(&server().token)
            .header("idempotency-key", "resume-1")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first: Operation = post("{}").await.expect("post").json().await.expect("op");
    let again: Operation = post("{}").await.expect("post").json().await.expect("op");
    assert_eq!(first.id, again.id);
    let other = post(r#"{"deadline_s": 5}"#).await.expect("post");
    assert_eq!(other.status().as_u16(), 409);
    let body: serde_json::Value = other.json().await.expect("error body");
    assert_eq!(body["code"], "idempotency_mismatch");
    done(&c, first).await;

    let listed = c.list_operations(Some(&id), None).await.expect("list");
    let kinds: Vec<OperationKind> = listed.iter().map(|o| o.kind).collect();
    assert_eq!(
        kinds,
        vec![
            OperationKind::ResumeSandbox,
            OperationKind::ResumeSandbox,
            OperationKind::PauseSandbox,
            OperationKind::CreateSandbox
        ],
        "newest first"
    );
    assert_eq!(
        c.list_operations(Some(&id), Some(1))
            .await
            .expect("list")
            .len(),
        1
    );
    assert!(!c
        .list_operations(None, Some(5))
        .await
        .expect("list all")
        .is_empty());
    let err = c
        .cancel_operation("op-0000000000000000")
        .await
        .expect_err("unknown");
    assert_eq!(err.status(), Some(404));
    delete(&c, &id).await;

    // A create cancelled right after it was accepted leaves nothing behind.
    ensure_template(&c, "tiny").await;
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let created = c.create_sandbox(&req, None).await.expect("create");
    let cancelled = c
        .cancel_operation(&created.operation.id)
        .await
        .expect("cancel");
    let cancelled = c.wait_operation(&cancelled.id, WAIT).await.expect("ends");
    let sid = created.sandbox.id;
    if cancelled.state == OperationState::Cancelled {
        assert_eq!(
            cancelled.error.as_ref().map(|e| e.code),
            Some(ErrorCode::Cancelled)
        );
        let err = c
            .get_sandbox(&sid)
            .await
            .expect_err("cancelled create is gone");
        assert_eq!(err.status(), Some(404));
        assert!(!sandbox_dir(&sid).exists(), "no sandbox dir");
        assert!(
            !runc_containers(&server().data_dir).contains(&sid),
            "no container"
        );
    } else {
        // The create finished before the cancel reached it.
        assert_eq!(cancelled.state, OperationState::Succeeded);
        delete(&c, &sid).await;
    }
    // A delete cannot be cancelled.
    let id = sandbox(&c, "tiny").await;
    let del = c.delete_sandbox(&id).await.expect("delete");
    let err = c.cancel_operation(&del.id).await;
    if let Err(err) = err {
        assert_eq!(
            err.api_body().map(|b| b.code),
            Some(ErrorCode::FailedPrecondition)
        );
    }
    done(&c, del).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_every_transition_and_resume_after_a_seq() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    done(&c, c.pause_sandbox(&id).await.expect("pause")).await;
    done(&c, c.resume_sandbox(&id).await.expect("resume")).await;
    done(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    done(&c, c.wake_sandbox(&id).await.expect("wake")).await;
    delete(&c, &id).await;

    let want = [
        EventType::SandboxCreated,
        EventType::SandboxRunning,
        EventType::SandboxPaused,
        EventType::SandboxResumed,
        EventType::SandboxSuspended,
        EventType::SandboxWoken,
        EventType::SandboxDeleted,
    ];
    let mut seen = Vec::new();
    let mut stream = std::pin::pin!(c.events(None));
    let until = Instant::now() + Duration::from_secs(30);
    while seen.len() < want.len() {
        let left = until.saturating_duration_since(Instant::now());
        let ev = tokio::time::timeout(left, stream.next())
            .await
            .expect("events in time")
            .expect("stream open")
            .expect("event");
        if ev.sandbox_id == id {
            seen.push(ev);
        }
    }
    let kinds: Vec<EventType> = seen.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, want);
    assert!(
        seen.windows(2).all(|w| w[0].seq < w[1].seq),
        "seq increases"
    );
    assert!(seen.iter().all(|e| e
        .operation_id
        .as_deref()
        .is_some_and(|o| o.starts_with("op-"))));

    // Resuming after a seq gives only what came later.
    let after = seen[3].seq;
    let mut resumed = std::pin::pin!(c.events(Some(after)));
    let mut later = Vec::new();
    while later.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), resumed.next())
            .await
            .expect("in time")
            .expect("open")
            .expect("event");
        assert!(ev.seq > after);
        if ev.sandbox_id == id {
            later.push(ev.kind);
        }
    }
    assert_eq!(later, want[4..].to_vec());
}

/// State of a sandbox read from the listing, which (unlike `GET /v1/sandboxes/{id}`) does not
/// count as access to it.
async fn listed_state(c: &Client, id: &str) -> Option<SandboxState> {
    let list = c
        .list_sandboxes(&cove_client::ListSandboxes {
            limit: Some(500),
            ..Default::default()
        })
        .await
        .expect("list");
    list.sandboxes
        .into_iter()
        .find(|s| s.id == id)
        .map(|s| s.state)
}

/// C12: files and processes across pause/resume cycles; the third cycle is an idle suspend
/// (idle timeout 2 s) and a wake. Cove's choice where the case allows two behaviours: after a
/// pause, P survives (listed, `kill -0` prints 0); after a suspend and wake on runc, memory is
/// not restored, so P is gone (not listed, `kill -0` prints 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c12_files_and_processes_survive_pause_and_idle_suspend_cycles() {
    let c = client();
    let req = CreateSandboxRequest {
        idle_timeout_s: Some(2),
        ..Default::default()
    };
    let id = cove_e2e::sandbox_with(&c, "tiny", req).await;
    let p = c
        .create_command(&id, &shell("exec sleep 100000"))
        .await
        .expect("start P");
    let (pcid, pid) = (p.command.id.clone(), p.command.pid);
    assert!(pid > 1);

    for i in 1..=3u32 {
        let w = sh(
            &c,
            &id,
            &format!("printf 'v%s' {i} > /home/user/cycle-{i}.txt; echo {i} >> /home/user/log.txt"),
        )
        .await;
        assert_eq!(w.command.exit_code, Some(0), "{}", w.stderr_text());
        if i < 3 {
            done(&c, c.pause_sandbox(&id).await.expect("pause")).await;
            assert_eq!(
                c.get_sandbox(&id).await.expect("get").state,
                SandboxState::Paused
            );
            done(&c, c.resume_sandbox(&id).await.expect("resume")).await;
        } else {
            // A running command is activity: P keeps the sandbox from idling.
            tokio::time::sleep(Duration::from_millis(3500)).await;
            assert_eq!(
                listed_state(&c, &id).await,
                Some(SandboxState::Running),
                "P keeps it active"
            );
            c.kill(&id, &pcid, Some(Duration::from_millis(100)))
                .await
                .expect("stop P");
            let until = Instant::now() + Duration::from_secs(20);
            loop {
                if listed_state(&c, &id).await == Some(SandboxState::Suspended) {
                    break;
                }
                assert!(
                    Instant::now() < until,
                    "the idle timeout did not suspend the sandbox"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let ops = c.list_operations(Some(&id), Some(1)).await.expect("ops");
            assert_eq!(ops[0].kind, OperationKind::SuspendSandbox);
            done(&c, c.wake_sandbox(&id).await.expect("wake")).await;
            assert_eq!(
                c.get_sandbox(&id).await.expect("get").memory_restored,
                Some(false)
            );
        }
        let out = sh(
            &c,
            &id,
            "cat /home/user/cycle-*.txt; echo; wc -l < /home/user/log.txt",
        )
        .await;
        let text = out.stdout_text();
        let (cycles, count) = text.split_once('\n').expect("two lines");
        let want: String = (1..=i).map(|k| format!("v{k}")).collect();
        assert_eq!(cycles, want, "cycle {i}");
        assert_eq!(count.trim(), i.to_string(), "line count after cycle {i}");

        let listed = c
            .list_commands(&id)
            .await
            .expect("list")
            .commands
            .iter()
            .any(|x| x.id == pcid && x.state == CommandState::Running);
        let alive = sh(&c, &id, &format!("kill -0 {pid} 2>/dev/null; echo $?"))
            .await
            .stdout_text();
        assert!(
            (listed && alive == "0\n") || (!listed && alive == "1\n"),
            "cycle {i}: P listed={listed} kill -0 printed {alive:?}"
        );
        assert_eq!(
            listed,
            i < 3,
            "cycle {i}: P survives pauses, not a suspend on runc"
        );
    }
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_is_deleted_when_its_ttl_is_reached() {
    let c = client();
    let req = CreateSandboxRequest {
        ttl_s: Some(1),
        ..Default::default()
    };
    let id = cove_e2e::sandbox_with(&c, "tiny", req).await;
    assert_eq!(c.get_sandbox(&id).await.expect("get").ttl_s, Some(1));
    let until = Instant::now() + Duration::from_secs(20);
    while listed_state(&c, &id).await.is_some() {
        assert!(Instant::now() < until, "the TTL did not end the sandbox");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = c.get_sandbox(&id).await.expect_err("deleted");
    assert_eq!(err.status(), Some(404));
    assert!(!sandbox_dir(&id).exists());
    let bad = CreateSandboxRequest {
        ttl_s: Some(0),
        ..Default::default()
    };
    let err = c.create_sandbox(&bad, None).await.expect_err("ttl 0");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::InvalidArgument)
    );
}

/// A sandbox with its own disk image (`disk_mib`): suspend saves the files in the image, wake
/// restores them into a new image, whiteouts and opaque directories included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_and_wake_a_sandbox_with_its_own_disk() {
    let c = client();
    let req = CreateSandboxRequest {
        resources: Some(cove_api_types::ResourcesRequest {
            disk_mib: Some(64),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = cove_e2e::sandbox_with(&c, "tiny", req).await;
    let prep = cove_e2e::run(
        &c,
        &id,
        as_root(
            "set -e; echo kept > /home/user/k.txt; rm /etc/profile; rm -rf /usr/local; \
             mkdir /usr/local; echo ok",
        ),
    )
    .await;
    assert_eq!(prep.stdout_text(), "ok\n", "{}", prep.stderr_text());
    done(&c, c.suspend_sandbox(&id).await.expect("suspend")).await;
    assert!(
        !sandbox_dir(&id).exists(),
        "the sandbox dir and its disk image are released"
    );
    assert!(snapshot_object(&id).is_file());
    done(&c, c.wake_sandbox(&id).await.expect("wake")).await;
    let check = sh(
        &c,
        &id,
        "cat /home/user/k.txt; test -e /etc/profile && echo profile-back; \
         test -e /usr/local/bin && echo bin-back; echo end",
    )
    .await;
    assert_eq!(
        check.stdout_text(),
        "kept\nend\n",
        "{}",
        check.stderr_text()
    );
    delete(&c, &id).await;
    assert!(!sandbox_dir(&id).exists());
    assert!(
        mounts_with(&id).is_empty(),
        "no overlay or disk mounts left"
    );
}
