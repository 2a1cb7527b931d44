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

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cove_api_types::SandboxState;
use cove_client::Client;
use cove_e2e::{guest_agent, runc_containers, sandbox, sh};

mod netns;
use netns::TestNet;

const TOKEN: &str = "test-join-token-0123456789";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);

/// A free loopback port (bound, then released for the process to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Cluster {
    root: PathBuf,
    server: tokio::process::Child,
    nodes: Vec<(String, tokio::process::Child)>,
    client: Client,
    token: String,
    node_url: String,
    net: TestNet,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.server.start_kill();
        for (_, n) in &mut self.nodes {
            let _ = n.start_kill();
        }
        for name in NODES {
            let dir = self.root.join(name);
            for id in runc_containers(&dir) {
                let _ = std::process::Command::new("runc")
                    .arg("--root")
                    .arg(dir.join("runc"))
                    .args(["delete", "-f", &id])
                    .output();
            }
            if let Ok(entries) = std::fs::read_dir(dir.join("sandboxes")) {
                for e in entries.flatten() {
                    // The overlay, the idmapped release under it, the sandbox's own disk.
                    for mount in ["rootfs", "lower", "disk"] {
                        let _ = std::process::Command::new("umount")
                            .arg("-l")
                            .arg(e.path().join(mount))
                            .output();
                    }
                    // Its user namespace range (claims are machine-wide, holding the id).
                    let id = e.file_name().to_string_lossy().into_owned();
                    if let Ok(claims) = std::fs::read_dir("/run/cove/userns") {
                        for c in claims.flatten() {
                            if std::fs::read_to_string(c.path()).is_ok_and(|owner| owner == id) {
                                let _ = std::fs::remove_file(c.path());
                            }
                        }
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn cove(data_dir: &Path, args: &[&str]) -> tokio::process::Command {
    cove_in(None, data_dir, args)
}

/// `cove --data-dir DATA_DIR ARGS`, in network namespace `netns` if given (with `nsenter`,
/// which, unlike `ip netns exec`, leaves /sys and its cgroup mounts alone for runc).
fn cove_in(netns: Option<&str>, data_dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = tokio::process::Command::new("nsenter");
            c.arg(format!("--net=/run/netns/{ns}"))
                .arg(env!("CARGO_BIN_EXE_cove"));
            c
        }
        None => tokio::process::Command::new(env!("CARGO_BIN_EXE_cove")),
    };
    cmd.arg("--data-dir")
        .arg(data_dir)
        .args(args)
        // `COVE_TEST_LOG=info` shows the processes' logs when a run needs explaining.
        .env(
            "RUST_LOG",
            std::env::var("COVE_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Starts node `name` (the `i`-th) in its namespace of `net`, listening on its address there.
fn node_process(
    root: &Path,
    net: &TestNet,
    i: usize,
    name: &str,
    node_url: &str,
) -> tokio::process::Child {
    let cache = std::env::var("COVE_TEST_CACHE_DIR")
        .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
    let listen = format!("{}:{}", net.node_address(i), free_port());
    let snapshots = format!("file://{}", root.join("snapshots").display());
    cove_in(
        Some(&net.namespace(i)),
        &root.join(name),
        &[
            "node",
            "--control-plane",
            node_url,
            "--join-token",
            TOKEN,
            "--name",
            name,
            "--node-listen",
            &listen,
            "--network",
            "off",
            "--snapshot-store",
            &snapshots,
            "--cache-dir",
            &cache,
        ],
    )
    .arg("--guest-agent")
    .arg(guest_agent())
    .spawn()
    .unwrap()
}

/// Polls `check` every 100 ms until it holds (at most `limit`).
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start() -> Cluster {
    let root = tempfile::Builder::new()
        .prefix("cove-nodes-")
        .tempdir()
        .unwrap()
        .keep();
    std::fs::create_dir_all(root.join("snapshots")).unwrap();
    let net = TestNet::create(NODES.len());
    let (api, dp, node_port) = (free_port(), free_port(), free_port());
    let node_url = format!("https://{}:{node_port}", net.host());
    let snapshots = format!("file://{}", root.join("snapshots").display());
    let server = cove(
        &root.join("cp"),
        &[
            "server",
            "--listen",
            &format!("127.0.0.1:{api}"),
            "--data-plane-listen",
            &format!("127.0.0.1:{dp}"),
            "--proxy-listen",
            "127.0.0.1:0",
            "--join-token",
            TOKEN,
            "--node-listen",
            &format!("{}:{node_port}", net.host()),
            "--no-local-node",
            "--heartbeat-interval-ms",
            "500",
            "--heartbeat-timeout-ms",
            &HEARTBEAT_TIMEOUT.as_millis().to_string(),
            "--controller-interval-ms",
            "250",
            "--network",
            "off",
            "--snapshot-store",
            &snapshots,
        ],
    )
    .spawn()
    .unwrap();
    let token_file = root.join("cp").join("admin.token");
    until("the admin token", Duration::from_secs(30), || async {
        token_file.is_file()
    })
    .await;
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    let client = Client::new(&format!("http://127.0.0.1:{api}"), token.clone()).unwrap();
    let nodes = NODES
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), node_process(&root, &net, i, n, &node_url)))
        .collect();
    let cluster = Cluster {
        root,
        server,
        nodes,
        client,
        token,
        node_url,
        net,
    };
    until("three ready nodes", Duration::from_secs(60), || async {
        cluster.client.nodes().await.is_ok_and(|l| {
            l.nodes.len() == 3
                && l.nodes
                    .iter()
                    .all(|n| n.state == cove_api_types::NodeState::Ready)
        })
    })
    .await;
    cluster
}

impl Cluster {
    /// The node whose data dir holds sandbox `id`.
    fn node_of(&self, id: &str) -> Option<&'static str> {
        NODES
            .into_iter()
            .find(|n| self.root.join(n).join("sandboxes").join(id).is_dir())
    }

    async fn wait_op(&self, op: cove_api_types::Operation) {
        let done = self
            .client
            .wait_operation(&op.id, Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(
            done.state,
            cove_api_types::OperationState::Succeeded,
            "{done:?}"
        );
    }

    async fn state(&self, id: &str) -> (SandboxState, Option<String>) {
        let s = self.client.get_sandbox(id).await.unwrap();
        (s.state, s.state_reason)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_agents_place_spread_wake_elsewhere_and_survive_a_lost_node() {
    let mut c = start().await;
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
    let node_url = c.node_url.clone();
    let i = NODES.iter().position(|n| *n == victim).unwrap();
    let back = node_process(&c.root, &c.net, i, victim, &node_url);
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
    let c = start().await;
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
