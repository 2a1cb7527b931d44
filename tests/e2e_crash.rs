//! Crash safety: the real server runs as its own process (`cove-e2e-server`) and is killed
//! with SIGKILL at several points of creates, pauses, suspends, wakes and deletes, then
//! restarted on the same data dir. After each restart:
//! - every operation has ended, `succeeded`, or `failed`/`cancelled` with a reason;
//! - running sandboxes are re-adopted with their commands (the earlier command is still listed
//!   and its output is intact);
//! - nothing is orphaned: `runc list` holds exactly the running and paused sandboxes, so do the
//!   overlay mounts and the sandbox directories; the snapshot store holds exactly the
//!   suspended sandboxes, and no half-written snapshot.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command as Process;
use std::time::{Duration, Instant};

use cove_api_types::{
    BuildReleaseRequest, CommandState, CreateCommandRequest, CreateSandboxRequest, Operation,
    OperationState, SandboxState,
};
use cove_client::{Client, ListSandboxes};
use cove_e2e::server_process::{dir_names, overlay_mounts, signal, ServerProcess};

/// The server binary of this package.
fn server_process(reconcile_ms: u64) -> ServerProcess {
    ServerProcess::new(
        Path::new(env!("CARGO_BIN_EXE_cove-e2e-server")),
        reconcile_ms,
    )
}

const WAIT: Duration = Duration::from_secs(120);

/// Every file below `dir` (relative paths).
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.display().to_string());
            }
        }
    }
    out
}

async fn created(c: &Client) -> String {
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let resp = c.create_sandbox(&req, None).await.expect("create");
    let op = c
        .wait_operation(&resp.operation.id, WAIT)
        .await
        .expect("create ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    resp.sandbox.id
}

async fn finished(c: &Client, op: Operation) {
    let op = c.wait_operation(&op.id, WAIT).await.expect("ends");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{:?} {:?}",
        op.kind,
        op.error
    );
}

/// Checks every invariant after a restart; returns the states of all sandboxes.
async fn check_invariants(c: &Client, data_dir: &Path, ops: &[String], round: &str) {
    for id in ops {
        let op = c.get_operation(id).await.expect("operation kept");
        assert!(
            op.state.is_final(),
            "{round}: {:?} {} still {:?}",
            op.kind,
            op.id,
            op.state
        );
        if op.state != OperationState::Succeeded {
            let reason = op
                .error
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_default();
            assert!(
                !reason.is_empty(),
                "{round}: {:?} {} ended {:?} without a reason",
                op.kind,
                op.id,
                op.state
            );
        }
    }
    for op in c.list_operations(None, Some(500)).await.expect("list ops") {
        assert!(
            op.state.is_final(),
            "{round}: {:?} {} unfinished",
            op.kind,
            op.id
        );
    }
    let all = c
        .list_sandboxes(&ListSandboxes {
            limit: Some(500),
            ..Default::default()
        })
        .await
        .expect("list")
        .sandboxes;
    let with = |states: &[SandboxState]| -> BTreeSet<String> {
        all.iter()
            .filter(|s| states.contains(&s.state))
            .map(|s| s.id.clone())
            .collect()
    };
    for s in &all {
        assert!(
            matches!(
                s.state,
                SandboxState::Running
                    | SandboxState::Paused
                    | SandboxState::Suspended
                    | SandboxState::Failed
            ),
            "{round}: sandbox {} left {:?}",
            s.id,
            s.state
        );
    }
    let live = with(&[SandboxState::Running, SandboxState::Paused]);
    assert_eq!(
        cove_e2e::runc_containers(data_dir),
        live,
        "{round}: runc containers = running + paused sandboxes"
    );
    assert_eq!(
        overlay_mounts(data_dir),
        live,
        "{round}: overlay mounts = running + paused sandboxes"
    );
    assert_eq!(
        dir_names(&data_dir.join("sandboxes")),
        live,
        "{round}: sandbox dirs = running + paused"
    );
    let suspended = with(&[SandboxState::Suspended]);
    let snapshots = data_dir.join("snapshots/sandboxes");
    assert_eq!(
        dir_names(&snapshots),
        suspended,
        "{round}: snapshots = suspended sandboxes"
    );
    // A snapshot is runc's one artifact plus the manifest that completes it; nothing else.
    for f in files_below(&snapshots) {
        assert!(
            f.ends_with("/fs.tar") || f.ends_with("/snapshot.json"),
            "{round}: stray snapshot file {f}"
        );
    }
    for id in &suspended {
        assert!(
            snapshots.join(id).join("snapshot.json").exists(),
            "{round}: snapshot of {id} has its manifest"
        );
    }
    check_network(data_dir, &live, round).await;
}

/// Sandbox networks after a restart: a network record exactly for each running or paused
/// sandbox, and every namespace of the server's prefix plumbed (a veth end in the gateway and an
/// nft element each), so no interface was orphaned: attached ones = the live sandboxes, the rest
/// the prepared pool. Waits up to 20 s for the pool's refill to settle.
async fn check_network(data_dir: &Path, live: &BTreeSet<String>, round: &str) {
    let records: BTreeSet<String> = dir_names(&data_dir.join("network"))
        .into_iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    assert_eq!(
        &records, live,
        "{round}: network records = running + paused"
    );
    let prefix = cove_server::network_prefix_for(data_dir);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let inv = cove_network::inventory(&prefix).expect("inventory");
        let sandbox_ns = inv.namespaces.len().saturating_sub(1);
        let settled = inv.namespaces.contains(&format!("{prefix}-gw"))
            && inv.gateway_links == 1 + sandbox_ns
            && inv.nft_elements == sandbox_ns
            && sandbox_ns >= live.len()
            && sandbox_ns - live.len() <= 8;
        if settled {
            return;
        }
        assert!(
            Instant::now() < until,
            "{round}: network namespaces do not match the sandboxes ({} live): {inv:?}",
            live.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_lifecycle_operations_then_restart_leaves_nothing_behind() {
    let mut server = server_process(30_000);
    let data_dir = server.data_dir.clone();
    let mut c = server.start().await;
    cove_e2e::build_template(&c, "tiny").await;

    // A sandbox whose command must survive every crash, with output.
    let keeper = created(&c).await;
    let cmd = c
        .create_command(
            &keeper,
            &CreateCommandRequest {
                shell: Some("echo hello-before-crash; exec sleep 100000".into()),
                ..Default::default()
            },
        )
        .await
        .expect("command");
    let cid = cmd.command.id;

    let mut all_ops: Vec<String> = Vec::new();
    // Delays after the last 202 before SIGKILL: at once, early, mid-way, late.
    for (round, delay_ms) in [0u64, 40, 150, 400].into_iter().enumerate() {
        let name = format!("round {round} (kill after {delay_ms} ms)");
        let running = created(&c).await;
        let to_suspend = created(&c).await;
        // Big enough (60 MB) that some kills land in the middle of the snapshot upload.
        let blob = "head -c 60000000 /dev/urandom > /home/user/blob; echo done";
        assert_eq!(
            cove_e2e::sh(&c, &to_suspend, blob).await.stdout_text(),
            "done\n"
        );
        let suspended = created(&c).await;
        finished(&c, c.suspend_sandbox(&suspended).await.expect("suspend")).await;

        let req = CreateSandboxRequest {
            template: Some("tiny".into()),
            ..Default::default()
        };
        let mut ops = vec![
            c.create_sandbox(&req, None)
                .await
                .expect("create")
                .operation,
            c.pause_sandbox(&running).await.expect("pause"),
            c.suspend_sandbox(&to_suspend).await.expect("suspend"),
        ];
        ops.push(if round % 2 == 0 {
            c.wake_sandbox(&suspended).await.expect("wake")
        } else {
            c.delete_sandbox(&suspended).await.expect("delete")
        });
        ops.push(
            c.delete_sandbox(&running)
                .await
                .expect("delete after pause"),
        );
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        server.kill9();
        all_ops.extend(ops.into_iter().map(|o| o.id));

        c = server.start().await;
        check_invariants(&c, &data_dir, &all_ops, &name).await;
        for id in &all_ops[all_ops.len() - 5..] {
            let op = c.get_operation(id).await.expect("op");
            let why = op.error.map(|e| e.message).unwrap_or_default();
            eprintln!("{name}: {:?} -> {:?} {why}", op.kind, op.state);
        }

        // The keeper was re-adopted with its command and output.
        let k = c.get_sandbox(&keeper).await.expect("keeper");
        assert_eq!(k.state, SandboxState::Running, "{name}: keeper adopted");
        let listed = c.list_commands(&keeper).await.expect("commands").commands;
        let kept = listed
            .iter()
            .find(|x| x.id == cid)
            .expect("the earlier command is listed");
        assert_eq!(kept.state, CommandState::Running, "{name}");
        let att = c.new_attachment(&keeper, &cid).await.expect("attachment");
        let mut events = std::pin::pin!(c.attach(&att, 0));
        let first = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut events),
        )
        .await
        .expect("output in time")
        .expect("an event")
        .expect("ok");
        match first {
            cove_client::AttachEvent::Stdout { data, .. } => {
                assert_eq!(&data[..], b"hello-before-crash\n", "{name}")
            }
            other => panic!("{name}: unexpected {other:?}"),
        }
        // A new command works after the restart, and the sandbox kept its network.
        let out = cove_e2e::sh(&c, &keeper, "echo alive").await;
        assert_eq!(out.stdout_text(), "alive\n");
        if c.capabilities().await.expect("caps").network {
            let out = cove_e2e::sh(&c, &keeper, "cat /sys/class/net/eth0/operstate").await;
            assert_eq!(
                out.stdout_text(),
                "up\n",
                "{name}: eth0 of the adopted keeper"
            );
        }
    }

    // Clean up through the API, then stop the server gracefully.
    let all = c
        .list_sandboxes(&ListSandboxes {
            limit: Some(500),
            ..Default::default()
        })
        .await
        .expect("list")
        .sandboxes;
    for s in all {
        finished(&c, c.delete_sandbox(&s.id).await.expect("delete")).await;
    }
    assert!(cove_e2e::runc_containers(&data_dir).is_empty());
    assert!(overlay_mounts(&data_dir).is_empty());
    assert!(dir_names(&data_dir.join("sandboxes")).is_empty());
    assert!(files_below(&data_dir.join("snapshots")).is_empty());
    if let Some(mut child) = server.child.take() {
        signal(child.id(), "TERM");
        let _ = child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_creates_leaves_no_orphan_interfaces() {
    let mut server = server_process(30_000);
    let data_dir = server.data_dir.clone();
    let host_links = cove_network::inventory("none")
        .expect("inventory")
        .host_links;
    let mut c = server.start().await;
    if !c.capabilities().await.expect("caps").network {
        eprintln!("skipped: sandbox networks are off on this host");
        return;
    }
    cove_e2e::build_template(&c, "tiny").await;
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let mut all_ops = Vec::new();
    for (round, delay_ms) in [0u64, 30, 80, 200, 500].into_iter().enumerate() {
        let name = format!("creates round {round} (kill after {delay_ms} ms)");
        // More creates at once than namespaces are prepared, so some plumb on demand.
        let mut creates = Vec::new();
        for _ in 0..10 {
            creates.push(c.create_sandbox(&req, None));
        }
        for r in futures::future::join_all(creates).await {
            all_ops.push(r.expect("create").operation.id);
        }
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        server.kill9();
        c = server.start().await;
        check_invariants(&c, &data_dir, &all_ops, &name).await;
    }
    // Delete everything; then only the gateway and the prepared pool remain, and the host
    // namespace has no link more than before.
    let all = c
        .list_sandboxes(&ListSandboxes {
            limit: Some(500),
            ..Default::default()
        })
        .await
        .expect("list")
        .sandboxes;
    for s in all {
        finished(&c, c.delete_sandbox(&s.id).await.expect("delete")).await;
    }
    check_network(&data_dir, &BTreeSet::new(), "after deleting everything").await;
    assert_eq!(
        cove_network::inventory("none")
            .expect("inventory")
            .host_links,
        host_links,
        "no link leaked into the host namespace"
    );
}

/// A secret keeps working across a `kill -9` of the server: the sandbox is adopted with its
/// namespace, its placeholder stays the same, and the gateway, re-armed with the value from the
/// store and the same CA key, still substitutes it for a client that trusts the old CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_survives_kill_9_of_the_server() {
    const VALUE: &str = "sk-crash-0123456789";
    let lab_prefix = format!("k{:x}", std::process::id() % 0xff_ffff);
    /// Removes the fake internet's namespaces even when the test fails.
    struct LabGuard(String);
    impl Drop for LabGuard {
        fn drop(&mut self) {
            let _ = cove_network::lab::destroy_namespaces(&self.0);
        }
    }
    let _guard = LabGuard(lab_prefix.clone());
    let lab = cove_network::lab::FakeInternet::create(&lab_prefix)
        .await
        .expect("fake internet");
    let mut server = server_process(30_000);
    let roots = server.data_dir.with_extension("lab-ca.pem");
    std::fs::write(&roots, &lab.ca_pem).expect("lab CA");
    server.env = vec![
        ("COVE_E2E_UPSTREAM_NS".into(), lab.upstream_ns.clone()),
        ("COVE_E2E_TLS_ROOTS".into(), roots.display().to_string()),
        // Everything the server logs, to check the value is not among it.
        ("RUST_LOG".into(), "debug".into()),
    ];
    let mut c = server.start().await;
    let build = c
        .build_release("base", &BuildReleaseRequest::default())
        .await
        .expect("build");
    let op = c
        .wait_operation(&build.operation.id, Duration::from_secs(1800))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let req = CreateSandboxRequest {
        secrets: [(
            "API_KEY".to_string(),
            cove_api_types::SecretRequest {
                value: VALUE.into(),
                hosts: vec!["allowed.test".parse().expect("host")],
            },
        )]
        .into(),
        ..Default::default()
    };
    let resp = c.create_sandbox(&req, None).await.expect("create");
    finished(&c, resp.operation).await;
    let id = resp.sandbox.id;
    let call = "curl -fsS -m 8 -H \"Authorization: Bearer $API_KEY\" https://allowed.test/";
    let placeholder = cove_e2e::sh(&c, &id, "printf %s \"$API_KEY\"")
        .await
        .stdout_text();
    assert!(
        placeholder.starts_with("cove-placeholder-"),
        "{placeholder}"
    );
    // The server receives the value; its echo reaches the sandbox with the placeholder back.
    let want = format!("site=tls-allowed.test host=allowed.test auth=Bearer {placeholder}");
    let received = format!("Bearer {VALUE}");
    assert_eq!(cove_e2e::sh(&c, &id, call).await.stdout_text(), want);
    assert_eq!(lab.seen.authorizations().last(), Some(&received));
    // The node records the counters every 5 s: wait (bounded) until the record holds them.
    let record = server.data_dir.join("network").join(format!("{id}.json"));
    let mut recorded = serde_json::Value::Null;
    for _ in 0..100 {
        recorded = std::fs::read(&record)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map(|r| r["counters"].clone())
            .unwrap_or_default();
        if recorded["connections_allowed"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recorded_allowed = recorded["connections_allowed"].as_u64().unwrap_or(0);
    let recorded_in = recorded["bytes_in"].as_u64().unwrap_or(0);
    assert!(recorded_allowed >= 1, "counters recorded: {recorded}");

    server.kill9();
    c = server.start().await;
    assert_eq!(
        c.get_sandbox(&id).await.expect("get").state,
        SandboxState::Running,
        "adopted"
    );
    let counters = c.sandbox_network(&id).await.expect("network").counters;
    assert!(
        counters.connections_allowed >= recorded_allowed && counters.bytes_in >= recorded_in,
        "counters carried over the restart: {counters:?} after {recorded}"
    );
    let after = cove_e2e::sh(&c, &id, "printf %s \"$API_KEY\"")
        .await
        .stdout_text();
    assert_eq!(after, placeholder, "the placeholder is kept");
    let out = cove_e2e::sh(&c, &id, call).await;
    assert_eq!(out.stdout_text(), want, "{}", out.stderr_text());
    assert_eq!(lab.seen.authorizations().last(), Some(&received));
    finished(&c, c.delete_sandbox(&id).await.expect("delete")).await;
    let log = std::fs::read_to_string(server.data_dir.join("server.log")).expect("log");
    assert!(
        log.contains("secret substitution armed"),
        "the log is the server's"
    );
    assert!(!log.contains(VALUE), "the server logged the secret's value");
    drop(server);
    let _ = std::fs::remove_file(&roots);
    lab.destroy().expect("destroy the fake internet");
}

/// While serving, reconciliation every 500 ms: a sandbox whose container vanished but whose
/// files are there is repaired on them (`degraded`, then `running`: the repair controller),
/// and leftovers no sandbox wants (a sandbox directory, a snapshot) are removed. (A sandbox
/// whose files are gone too ends `failed`: the fake-node tests cover it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_reconciliation_repairs_vanished_containers_and_removes_orphans() {
    let mut server = server_process(500);
    let data_dir = server.data_dir.clone();
    let c = server.start().await;
    cove_e2e::build_template(&c, "tiny").await;
    let kept = created(&c).await;
    let lost = created(&c).await;
    assert_eq!(
        cove_e2e::sh(&c, &lost, "echo mine > /home/user/f && echo ok")
            .await
            .stdout_text(),
        "ok\n"
    );

    // The container disappears behind the server's back.
    let root = data_dir.join("runc");
    let killed = Process::new("runc")
        .arg("--root")
        .arg(&root)
        .args(["delete", "-f", &lost])
        .status()
        .expect("runc delete");
    assert!(killed.success());
    // Leftovers nobody wants.
    let orphan = "sb-0rphan0000000000";
    std::fs::create_dir_all(data_dir.join("sandboxes").join(orphan).join("upper"))
        .expect("orphan dir");
    let orphan_snapshot = data_dir.join("snapshots/sandboxes").join(orphan);
    std::fs::create_dir_all(&orphan_snapshot).expect("orphan snapshot dir");
    std::fs::write(orphan_snapshot.join("fs.tar"), b"not a sandbox").expect("orphan snapshot");

    let until = Instant::now() + Duration::from_secs(40);
    loop {
        let lost_now = c.get_sandbox(&lost).await.expect("lost");
        let repaired = lost_now.state == SandboxState::Running
            && lost_now
                .state_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("repaired"));
        let dirs = dir_names(&data_dir.join("sandboxes"));
        let snapshots = dir_names(&data_dir.join("snapshots/sandboxes"));
        if repaired && !dirs.contains(orphan) && snapshots.is_empty() {
            break;
        }
        assert!(
            lost_now.state != SandboxState::Failed,
            "repaired, not failed: {lost_now:?}"
        );
        assert!(
            Instant::now() < until,
            "not reconciled: lost is {lost_now:?}, dirs {dirs:?}, snapshots {snapshots:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cove_e2e::sh(&c, &lost, "cat /home/user/f")
            .await
            .stdout_text(),
        "mine\n",
        "its files are kept"
    );
    assert_eq!(
        c.get_sandbox(&kept).await.expect("kept").state,
        SandboxState::Running
    );
    assert_eq!(
        cove_e2e::sh(&c, &kept, "echo ok").await.stdout_text(),
        "ok\n"
    );
    for id in [kept, lost] {
        finished(&c, c.delete_sandbox(&id).await.expect("delete")).await;
    }
    assert!(cove_e2e::runc_containers(&data_dir).is_empty());
    assert!(dir_names(&data_dir.join("sandboxes")).is_empty());
    assert!(overlay_mounts(&data_dir).is_empty());
}
