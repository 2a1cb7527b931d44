//! A cluster of real processes for the multi-node tests: `cove server --join-token
//! --no-local-node` and one `cove node` agent per name, each with its own data dir, its own
//! network namespace and address on a bridge the test made ([`crate::netns`]), `--network off`,
//! and one snapshot store they all share: a directory, or a real S3 server (`s3s-fs`) listening
//! on the bridge's address. Everything is killed and removed on drop.
//!
//! Shared by several test binaries, each using a part of it.
#![allow(dead_code)]

use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cove_api_types::SandboxState;
use cove_client::Client;
use cove_e2e::s3::{S3Server, BUCKET};
use cove_e2e::{guest_agent, runc_containers};

use crate::netns::TestNet;

pub const TOKEN: &str = "test-join-token-0123456789";
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where the cluster keeps its snapshots.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Snapshots {
    /// A directory every process reads (`file://`).
    Directory,
    /// A bucket of a real S3 server on the bridge's address (`s3://`).
    S3,
}

/// A free loopback port (bound, then released for the process to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Cluster {
    pub root: PathBuf,
    pub server: tokio::process::Child,
    pub nodes: Vec<(String, tokio::process::Child)>,
    pub client: Client,
    pub token: String,
    pub node_url: String,
    pub names: &'static [&'static str],
    /// The snapshot store's URL and the environment that reaches it.
    snapshots: (String, Vec<(String, String)>),
    pub s3: Option<S3Server>,
    pub net: TestNet,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.server.start_kill();
        for (_, n) in &mut self.nodes {
            let _ = n.start_kill();
        }
        for name in self.names {
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

pub fn cove(data_dir: &Path, args: &[&str]) -> tokio::process::Command {
    cove_in(None, data_dir, args)
}

/// `cove --data-dir DATA_DIR ARGS`, in network namespace `netns` if given (with `nsenter`,
/// which, unlike `ip netns exec`, leaves /sys and its cgroup mounts alone for runc).
pub fn cove_in(netns: Option<&str>, data_dir: &Path, args: &[&str]) -> tokio::process::Command {
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

/// Polls `check` every 100 ms until it holds (at most `limit`).
pub async fn until<F, Fut>(what: &str, limit: Duration, mut check: F)
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

/// Starts the control plane and one node agent per name, sharing `snapshots`; returns once
/// every node is `ready`.
pub async fn start(names: &'static [&'static str], snapshots: Snapshots) -> Cluster {
    let root = tempfile::Builder::new()
        .prefix("cove-nodes-")
        .tempdir()
        .unwrap()
        .keep();
    let net = TestNet::create(names.len());
    let (s3, snapshots) = match snapshots {
        Snapshots::Directory => {
            std::fs::create_dir_all(root.join("snapshots")).unwrap();
            let url = format!("file://{}", root.join("snapshots").display());
            (None, (url, Vec::new()))
        }
        Snapshots::S3 => {
            // On the bridge: the one address both the host and the nodes' namespaces reach.
            let s3 = S3Server::start_on(IpAddr::V4(net.host()));
            let url = format!("s3://{BUCKET}/cluster");
            let env = s3.env(&url);
            (Some(s3), (url, env))
        }
    };
    let (api, dp, node_port) = (free_port(), free_port(), free_port());
    let node_url = format!("https://{}:{node_port}", net.host());
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
            &snapshots.0,
        ],
    )
    .envs(snapshots.1.clone())
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
    let mut cluster = Cluster {
        root,
        server,
        nodes: Vec::new(),
        client,
        token,
        node_url,
        names,
        snapshots,
        s3,
        net,
    };
    for (i, name) in names.iter().enumerate() {
        let child = cluster.node_process(i);
        cluster.nodes.push((name.to_string(), child));
    }
    until("every node ready", Duration::from_secs(60), || async {
        cluster.client.nodes().await.is_ok_and(|l| {
            l.nodes.len() == names.len()
                && l.nodes
                    .iter()
                    .all(|n| n.state == cove_api_types::NodeState::Ready)
        })
    })
    .await;
    cluster
}

impl Cluster {
    /// Starts node `i` in its namespace, listening on its address there.
    pub fn node_process(&self, i: usize) -> tokio::process::Child {
        let cache = std::env::var("COVE_TEST_CACHE_DIR")
            .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
        let listen = format!("{}:{}", self.net.node_address(i), free_port());
        let name = self.names[i];
        cove_in(
            Some(&self.net.namespace(i)),
            &self.root.join(name),
            &[
                "node",
                "--control-plane",
                &self.node_url,
                "--join-token",
                TOKEN,
                "--name",
                name,
                "--node-listen",
                &listen,
                "--network",
                "off",
                "--snapshot-store",
                &self.snapshots.0,
                "--cache-dir",
                &cache,
            ],
        )
        .arg("--guest-agent")
        .arg(guest_agent())
        .envs(self.snapshots.1.clone())
        .spawn()
        .unwrap()
    }

    /// The node whose data dir holds sandbox `id`.
    pub fn node_of(&self, id: &str) -> Option<&'static str> {
        self.names
            .iter()
            .copied()
            .find(|n| self.root.join(n).join("sandboxes").join(id).is_dir())
    }

    pub async fn wait_op(&self, op: cove_api_types::Operation) {
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

    pub async fn state(&self, id: &str) -> (SandboxState, Option<String>) {
        let s = self.client.get_sandbox(id).await.unwrap();
        (s.state, s.state_reason)
    }
}
