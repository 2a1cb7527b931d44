//! Several machines' worth of Cove on this one, as real processes: `cove server --join-token
//! --no-local-node` and three `cove node` agents (each its own data dir and its own network
//! namespace and address on a bridge the test made, `--network off`, one shared snapshot
//! directory) over gRPC with TLS (pinned certificates).
//! Placement spreads; a suspended sandbox wakes on another node with its files; `cove node
//! ls|drain`; SIGKILL a node → its running sandboxes end `failed (node_lost)` within the
//! heartbeat timeout, its suspended one stays suspended, and new creates go elsewhere; cutting
//! a node's link does the same, and when the link is back the node removes what failed. A
//! release built from a file is built on one node over the wire and runs on the others, which
//! fetch it from the shared store.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use cove_api_types::SandboxState;
use cove_e2e::{runc_containers, sandbox, sh};

mod cluster;
mod netns;
use cluster::{cove, start, until, Cluster, Snapshots, HEARTBEAT_TIMEOUT};

const NODES: [&str; 3] = ["n1", "n2", "n3"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_agents_place_spread_wake_elsewhere_and_survive_a_lost_node() {
    let mut c = start(&NODES, Snapshots::Directory).await;
    let ids = [
        sandbox(&c.client, "tiny").await,
        sandbox(&c.client, "tiny").await,
        sandbox(&c.client, "tiny").await,
    ];
    let mut placed: Vec<_> = ids.iter().map(|id| c.node_of(id).unwrap()).collect();
    placed.sort();
    assert_eq!(placed, NODES, "one sandbox per node");
    // The link is TLS: the control plane's certificate and key are kept in its data dir (the
    // key readable by root only), and the nodes joined by pinning that certificate.
    let key = std::fs::metadata(c.root.join("cp").join("node-link.key")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777,
        0o600
    );
    assert!(c.root.join("cp").join("node-link.crt").is_file());
    // Commands and their output cross the node's gRPC link.
    let out = sh(&c.client, &ids[0], "echo hello from $(hostname)").await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("hello from {}", ids[0])
    );

    // Suspend on one node, drain it, wake: the sandbox comes back on another node with its
    // files (the snapshot directory is shared).
    let moved = &ids[0];
    let from = c.node_of(moved).unwrap();
    c.client
        .upload(
            moved,
            "/tmp/keep.txt",
            "kept across nodes".to_string(),
            &Default::default(),
        )
        .await
        .unwrap();
    c.wait_op(c.client.suspend_sandbox(moved).await.unwrap())
        .await;
    let drain = cove(&c.root.join("cp"), &["node", "drain", from])
        .env("COVE_URL", c.client.base_url().as_str())
        .env("COVE_TOKEN", &c.token)
        .status()
        .await
        .unwrap();
    assert!(drain.success());
    c.wait_op(c.client.wake_sandbox(moved).await.unwrap()).await;
    let to = c.node_of(moved).unwrap();
    assert_ne!(to, from, "woken on another node");
    assert_eq!(
        c.client.read_file(moved, "/tmp/keep.txt").await.unwrap(),
        b"kept across nodes"
    );

    // SIGKILL a node that holds a running sandbox and a suspended one (created while `from`
    // drains, so spread puts it on the third node, the victim).
    let victim = NODES.into_iter().find(|n| *n != to && *n != from).unwrap();
    let running = ids.iter().find(|id| c.node_of(id) == Some(victim)).unwrap();
    let suspended = sandbox(&c.client, "tiny").await;
    assert_eq!(c.node_of(&suspended), Some(victim));
    c.client.ready_node(from).await.unwrap();
    c.wait_op(c.client.suspend_sandbox(&suspended).await.unwrap())
        .await;
    let pid = c
        .nodes
        .iter()
        .find(|(n, _)| n == victim)
        .and_then(|(_, p)| p.id())
        .unwrap();
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until(
        "the lost node's sandbox to fail",
        HEARTBEAT_TIMEOUT + Duration::from_secs(10),
        || async { c.state(running).await.0 == SandboxState::Failed },
    )
    .await;
    let reason = c.state(running).await.1.unwrap_or_default();
    assert!(reason.starts_with("node_lost"), "{reason}");
    eprintln!(
        "node lost → sandbox failed after {:?} (timeout {HEARTBEAT_TIMEOUT:?})",
        killed.elapsed()
    );
    assert_eq!(c.state(&suspended).await.0, SandboxState::Suspended);
    let listed = c.client.nodes().await.unwrap().nodes;
    let lost = listed.iter().find(|n| n.name == victim).unwrap();
    assert_eq!(lost.state, cove_api_types::NodeState::Lost);
    for _ in 0..2 {
        let id = sandbox(&c.client, "tiny").await;
        assert_ne!(c.node_of(&id), Some(victim), "no placement on a lost node");
    }
    // The suspended sandbox wakes on a node that is not lost.
    c.wait_op(c.client.wake_sandbox(&suspended).await.unwrap())
        .await;
    assert_ne!(c.node_of(&suspended), Some(victim));

    // The node comes back on its data dir: it is ready again, and the sandbox that failed
    // meanwhile (its runc container still ran there) is removed from it.
    let leftover = c.root.join(victim).join("sandboxes").join(running);
    assert!(
        leftover.is_dir(),
        "the killed node's sandbox is still on disk"
    );
    let i = NODES.iter().position(|n| *n == victim).unwrap();
    let back = c.node_process(i);
    c.nodes.push((victim.to_string(), back));
    until(
        "the returning node to reconcile",
        Duration::from_secs(30),
        || async { !leftover.exists() },
    )
    .await;
    let back = c.client.nodes().await.unwrap().nodes;
    assert_eq!(
        back.iter().find(|n| n.name == victim).unwrap().state,
        cove_api_types::NodeState::Ready
    );
    assert!(runc_containers(&c.root.join(victim)).is_empty());

    // Cut a node's link (the process keeps running): its running sandbox fails `node_lost`
    // as a killed node's does; with the link back the same process is ready again and
    // removes that sandbox.
    let cut_id = sandbox(&c.client, "tiny").await;
    let cut = c.node_of(&cut_id).unwrap();
    let i = NODES.iter().position(|n| *n == cut).unwrap();
    c.net.set_link(i, false);
    until(
        "the cut node's sandbox to fail",
        HEARTBEAT_TIMEOUT + Duration::from_secs(10),
        || async { c.state(&cut_id).await.0 == SandboxState::Failed },
    )
    .await;
    let reason = c.state(&cut_id).await.1.unwrap_or_default();
    assert!(reason.starts_with("node_lost"), "{reason}");
    let listed = c.client.nodes().await.unwrap().nodes;
    assert_eq!(
        listed.iter().find(|n| n.name == cut).unwrap().state,
        cove_api_types::NodeState::Lost
    );
    c.net.set_link(i, true);
    let leftover = c.root.join(cut).join("sandboxes").join(&cut_id);
    until(
        "the reconnected node to reconcile",
        Duration::from_secs(60),
        || async { !leftover.exists() },
    )
    .await;
    let back = c.client.nodes().await.unwrap().nodes;
    assert_eq!(
        back.iter().find(|n| n.name == cut).unwrap().state,
        cove_api_types::NodeState::Ready
    );
    assert!(!runc_containers(&c.root.join(cut)).contains(&cut_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_release_builds_on_one_node_and_runs_on_the_others_from_the_store() {
    let c = start(&NODES, Snapshots::Directory).await;
    // Always built: the harness's "built once" record is per process, and the other test of
    // this binary has a cluster of its own.
    cove_e2e::build_template(&c.client, "tiny").await;
    let file = b"FROM tiny\nRUN echo built-once > /hello.txt\n";
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(file.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "Dockerfile", &file[..])
        .unwrap();
    let query = cove_api_types::CreateTemplateQuery {
        name: "fromfile".into(),
        ..Default::default()
    };
    // Over the wire to a remote node (there is no local one), which keeps it in the store.
    let built = c
        .client
        .create_template(&query, tar.into_inner().unwrap())
        .await
        .unwrap();
    c.wait_op(built.operation).await;
    let holders = |c: &Cluster| -> Vec<&'static str> {
        NODES
            .into_iter()
            .filter(|n| c.root.join(n).join("releases/fromfile/1/rootfs").is_dir())
            .collect()
    };
    let built_on = holders(&c);
    assert_eq!(built_on.len(), 1, "built on one node: {built_on:?}");
    assert!(c.root.join("snapshots/releases").is_dir());
    c.client.drain_node(built_on[0]).await.unwrap();
    for _ in 0..2 {
        let resp = c
            .client
            .create_sandbox(
                &cove_api_types::CreateSandboxRequest {
                    template: Some("fromfile".into()),
                    ..Default::default()
                },
                None,
            )
            .await
            .unwrap();
        c.wait_op(resp.operation).await;
        let id = resp.sandbox.id;
        assert_ne!(c.node_of(&id), Some(built_on[0]));
        assert_eq!(
            sh(&c.client, &id, "cat /hello.txt").await.stdout_text(),
            "built-once\n"
        );
    }
    assert!(holders(&c).len() >= 2, "fetched: {:?}", holders(&c));
}
