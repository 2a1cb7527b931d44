//! Two control-plane replicas on one PostgreSQL, as real processes: `cove server --store
//! postgres://... --join-token --no-local-node` twice (each its own data dir and ports, one
//! schema of the database at `COVE_TEST_POSTGRES_URL`) and one `cove node` agent that reaches
//! them through a TCP forwarder standing in for a Kubernetes Service (first replica A, B once A
//! is gone). Creates and suspends go through A, which is SIGKILLed at once: B takes the
//! leadership and the operations over and finishes them (sandboxes `running` and
//! `suspended`), and through B the node takes new sandboxes, a suspended one wakes and a
//! command runs. Then A starts again, B is SIGKILLed in the middle of a wake and a delete, and
//! A finishes those, and settles a sandbox left `deleting` with no operation.
//!
//! And E2B timeouts set through one replica fire after the other replica restarts and after a
//! restart of the one that set them (they live in the store, not in a replica's memory).

#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cove_api_types::{CreateSandboxRequest, NodeState, OperationState, SandboxState};
use cove_client::Client;
use cove_e2e::{build_template, guest_agent, runc_containers, sh};

const TOKEN: &str = "test-join-token-ha-0123456789";
const URL_VAR: &str = "COVE_TEST_POSTGRES_URL";

/// The PostgreSQL URL; `None` (skip, with the reason printed) outside CI, a failure in CI.
fn postgres_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").unwrap_or_default();
            assert!(
                ci.is_empty() || ci == "false" || ci == "0",
                "{URL_VAR} is unset under CI (scripts/test.sh starts a cluster and sets it)"
            );
            eprintln!("skipping: {URL_VAR} is unset");
            None
        }
    }
}

fn psql(url: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-tAc", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cove(data_dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cove"));
    cmd.arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    cmd
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

/// A replica: its process and the ports of its API and E2B listeners.
struct Replica {
    process: tokio::process::Child,
    api: u16,
    e2b: u16,
}

struct Setup {
    root: PathBuf,
    url: String,
    schema: String,
    /// The store URL the replicas are given (the schema's search path).
    store: String,
    /// The node listener ports of A and B.
    node_ports: [u16; 2],
    replicas: Vec<Replica>,
    node: Option<tokio::process::Child>,
    forwarder: tokio::task::JoinHandle<()>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.forwarder.abort();
        for r in &mut self.replicas {
            let _ = r.process.start_kill();
        }
        if let Some(n) = &mut self.node {
            let _ = n.start_kill();
        }
        let dir = self.root.join("n1");
        for id in runc_containers(&dir) {
            let _ = std::process::Command::new("runc")
                .arg("--root")
                .arg(dir.join("runc"))
                .args(["delete", "-f", &id])
                .output();
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("sandboxes")) {
            for e in entries.flatten() {
                for mount in ["rootfs", "lower", "disk"] {
                    let _ = std::process::Command::new("umount")
                        .arg("-l")
                        .arg(e.path().join(mount))
                        .output();
                }
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
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::process::Command::new("psql")
            .args([
                self.url.as_str(),
                "-tAc",
                &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
            ])
            .output();
    }
}

/// A TCP forwarder on `listen`: each connection goes to the first of `targets` that accepts
/// (what a Kubernetes Service does for the node agents: a dead replica is skipped).
fn forwarder(listen: TcpListener, targets: Vec<u16>) -> tokio::task::JoinHandle<()> {
    listen.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listen).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let targets = targets.clone();
            tokio::spawn(async move {
                for port in targets {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        return;
                    }
                }
            });
        }
    })
}

fn replica(root: &Path, name: &str, store: &str, node_port: u16) -> Replica {
    let (api, dp, e2b) = (free_port(), free_port(), free_port());
    let snapshots = format!("file://{}", root.join("snapshots").display());
    let process = cove(
        &root.join(name),
        &[
            "server",
            "--store",
            store,
            "--listen",
            &format!("127.0.0.1:{api}"),
            "--data-plane-listen",
            &format!("127.0.0.1:{dp}"),
            "--proxy-listen",
            "127.0.0.1:0",
            "--e2b-listen",
            &format!("127.0.0.1:{e2b}"),
            "--join-token",
            TOKEN,
            "--node-listen",
            &format!("127.0.0.1:{node_port}"),
            "--no-local-node",
            "--heartbeat-interval-ms",
            "500",
            "--heartbeat-timeout-ms",
            "8000",
            "--operation-lease-ms",
            "2000",
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
    Replica { process, api, e2b }
}

fn client(api: u16, token: &str) -> Client {
    Client::new(&format!("http://127.0.0.1:{api}"), token.to_string()).unwrap()
}

async fn ready_node(c: &Client) -> bool {
    c.nodes()
        .await
        .is_ok_and(|l| l.nodes.len() == 1 && l.nodes[0].state == NodeState::Ready)
}

/// Two replicas (A, then B) on a schema of their own at `url`, and a node that joined them
/// through the forwarder, ready at both: the setup, the admin token and a client of each.
async fn two_replicas(url: &str) -> (Setup, String, Client, Client) {
    let schema = format!(
        "cove_ha_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    psql(url, &format!("CREATE SCHEMA {schema}"));
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = format!("{url}{sep}options[search_path]={schema}");
    let root = tempfile::Builder::new()
        .prefix("cove-ha-")
        .tempdir()
        .unwrap()
        .keep();
    std::fs::create_dir_all(root.join("snapshots")).unwrap();
    let (a_nodes, b_nodes) = (free_port(), free_port());
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let front_url = format!("https://{}", front.local_addr().unwrap());
    let mut setup = Setup {
        root: root.clone(),
        url: url.to_string(),
        schema: schema.clone(),
        store: store.clone(),
        node_ports: [a_nodes, b_nodes],
        replicas: Vec::new(),
        node: None,
        forwarder: forwarder(front, vec![a_nodes, b_nodes]),
    };

    // Replica A first: it makes the admin token and the node link identity both replicas use.
    setup.replicas.push(replica(&root, "cp-a", &store, a_nodes));
    let token_file = root.join("cp-a").join("admin.token");
    until("A's admin token", Duration::from_secs(30), || async {
        token_file.is_file()
    })
    .await;
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    let a = client(setup.replicas[0].api, &token);
    setup.replicas.push(replica(&root, "cp-b", &store, b_nodes));
    let b = client(setup.replicas[1].api, &token);
    let cache = std::env::var("COVE_TEST_CACHE_DIR")
        .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
    let snapshots = format!("file://{}", root.join("snapshots").display());
    let node_listen = format!("127.0.0.1:{}", free_port());
    setup.node = Some(
        cove(
            &root.join("n1"),
            &[
                "node",
                "--control-plane",
                &front_url,
                "--join-token",
                TOKEN,
                "--name",
                "n1",
                "--node-listen",
                &node_listen,
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
        .unwrap(),
    );
    // The node joined A; B knows it from the shared registry.
    until("the node ready at A", Duration::from_secs(30), || {
        ready_node(&a)
    })
    .await;
    until("the node ready at B", Duration::from_secs(30), || {
        ready_node(&b)
    })
    .await;

    (setup, token, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_creates_and_suspends_is_taken_over_by_the_other() {
    let Some(url) = postgres_url() else { return };
    let test_start = Instant::now();
    let (mut setup, token, a, b) = two_replicas(&url).await;
    let (root, store, schema) = (
        setup.root.clone(),
        setup.store.clone(),
        setup.schema.clone(),
    );
    let a_nodes = setup.node_ports[0];
    build_template(&a, "tiny").await;
    let req = CreateSandboxRequest {
        template: Some("tiny".into()),
        ..Default::default()
    };
    let mut resting = Vec::new();
    for _ in 0..2 {
        let made = a.create_sandbox(&req, None).await.unwrap();
        let op = a
            .wait_operation(&made.operation.id, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
        resting.push(made.sandbox.id);
    }

    // Creates and suspends through A, then A dies before they finish.
    let mut creates = Vec::new();
    for _ in 0..3 {
        let made = a.create_sandbox(&req, None).await.unwrap();
        creates.push((made.sandbox.id, made.operation.id));
    }
    let mut suspends = Vec::new();
    for id in &resting {
        suspends.push((id.clone(), a.suspend_sandbox(id).await.unwrap().id));
    }
    setup.replicas[0].process.start_kill().unwrap();
    let _ = setup.replicas[0].process.wait().await;

    // B finishes every one of them.
    for (id, op) in creates.iter().chain(&suspends) {
        let done = b.wait_operation(op, Duration::from_secs(40)).await.unwrap();
        assert_eq!(done.state, OperationState::Succeeded, "{id}: {done:?}");
    }
    for (id, _) in &creates {
        assert_eq!(
            b.get_sandbox(id).await.unwrap().state,
            SandboxState::Running
        );
    }
    for (id, _) in &suspends {
        assert_eq!(
            b.get_sandbox(id).await.unwrap().state,
            SandboxState::Suspended
        );
    }
    // The node is used through B: it stays ready, runs commands, wakes, takes new sandboxes.
    until("the node ready at B", Duration::from_secs(15), || {
        ready_node(&b)
    })
    .await;
    let out = sh(&b, &creates[0].0, "echo through b").await;
    assert_eq!(out.stdout_text(), "through b\n");
    let woke = b.wake_sandbox(&resting[0]).await.unwrap();
    let woke = b
        .wait_operation(&woke.id, Duration::from_secs(40))
        .await
        .unwrap();
    assert_eq!(woke.state, OperationState::Succeeded, "{:?}", woke.error);
    let out = sh(&b, &resting[0], "echo woken").await;
    assert_eq!(out.stdout_text(), "woken\n");
    let made = b.create_sandbox(&req, None).await.unwrap();
    let op = b
        .wait_operation(&made.operation.id, Duration::from_secs(40))
        .await
        .unwrap();
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);

    // At least one was left unfinished by A and run to its end by B: its owner is B's.
    let ops: Vec<String> = creates
        .iter()
        .chain(&suspends)
        .map(|(_, op)| format!("'{op}'"))
        .collect();
    let taken: u32 = psql(
        &url,
        &format!(
            "SELECT count(*) FROM {schema}.operations WHERE id IN ({}) AND owner = \
             (SELECT owner FROM {schema}.operations WHERE id = '{}')",
            ops.join(","),
            made.operation.id
        ),
    )
    .parse()
    .unwrap();
    assert!(taken >= 1, "B took over none of A's operations");

    // A comes back as a new process; B dies in the middle of a wake and a delete, and A
    // finishes them.
    setup.replicas[0] = replica(&root, "cp-a", &store, a_nodes);
    let a = client(setup.replicas[0].api, &token);
    until("A serving again", Duration::from_secs(30), || {
        ready_node(&a)
    })
    .await;
    let wake = b.wake_sandbox(&resting[1]).await.unwrap();
    let delete = b.delete_sandbox(&creates[1].0).await.unwrap();
    setup.replicas[1].process.start_kill().unwrap();
    let _ = setup.replicas[1].process.wait().await;
    for op in [&wake.id, &delete.id] {
        let done = a.wait_operation(op, Duration::from_secs(40)).await.unwrap();
        assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    }
    let out = sh(&a, &resting[1], "echo woken by a").await;
    assert_eq!(out.stdout_text(), "woken by a\n");
    assert!(
        a.get_sandbox(&creates[1].0).await.is_err(),
        "a deleted sandbox is not found"
    );
    let by_a: u32 = psql(
        &url,
        &format!(
            "SELECT count(*) FROM {schema}.operations WHERE id IN ('{}', '{}') AND owner <> \
             (SELECT owner FROM {schema}.operations WHERE id = '{}')",
            wake.id, delete.id, made.operation.id
        ),
    )
    .parse()
    .unwrap();
    assert!(by_a >= 1, "A took over none of B's operations");
    // A replica that died between moving a sandbox to `deleting` and recording the delete
    // (made here by hand) leaves it with no operation: the leader settles it.
    psql(
        &url,
        &format!(
            "UPDATE {schema}.sandboxes SET state = 'deleting', \
             updated_at = now() - interval '1 minute' WHERE id = '{}'",
            creates[2].0
        ),
    );
    until(
        "the orphaned delete finished",
        Duration::from_secs(20),
        || async { a.get_sandbox(&creates[2].0).await.is_err() },
    )
    .await;
    eprintln!(
        "two replicas: B took over {taken} of {} operations, A then {by_a} of B's 2; {:?} in all",
        ops.len(),
        test_start.elapsed()
    );
}

/// `POST /sandboxes` of E2B's REST API at `port`: the new sandbox's Cove id.
async fn e2b_create(
    http: &reqwest::Client,
    port: u16,
    token: &str,
    body: serde_json::Value,
) -> String {
    let answer = http
        .post(format!("http://127.0.0.1:{port}/sandboxes"))
        .header("X-API-Key", token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201, "{:?}", answer.text().await);
    let made: serde_json::Value = answer.json().await.unwrap();
    format!("sb-{}", made["sandboxID"].as_str().unwrap())
}

/// `POST /sandboxes/{id}/timeout` (the SDK's `set_timeout`) of E2B's REST API at `port`.
async fn e2b_set_timeout(http: &reqwest::Client, port: u16, token: &str, id: &str, secs: u64) {
    let e2b_id = id.strip_prefix("sb-").unwrap();
    let answer = http
        .post(format!(
            "http://127.0.0.1:{port}/sandboxes/{e2b_id}/timeout"
        ))
        .header("X-API-Key", token)
        .json(&serde_json::json!({ "timeout": secs }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204, "{:?}", answer.text().await);
}

/// Restarts replica `i` (SIGKILL, a new process on new ports) and waits until it serves.
async fn restart_replica(setup: &mut Setup, i: usize, name: &str, token: &str) -> Client {
    setup.replicas[i].process.start_kill().unwrap();
    let _ = setup.replicas[i].process.wait().await;
    setup.replicas[i] = replica(&setup.root, name, &setup.store, setup.node_ports[i]);
    let c = client(setup.replicas[i].api, token);
    until(
        &format!("{name} serving again"),
        Duration::from_secs(30),
        || ready_node(&c),
    )
    .await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_e2b_timeout_set_through_one_replica_fires_after_both_restart() {
    const TIMEOUT_S: u64 = 40;
    let Some(url) = postgres_url() else { return };
    let (mut setup, token, a, _b) = two_replicas(&url).await;
    build_template(&a, "tiny").await;
    let http = reqwest::Client::new();
    let a_e2b = setup.replicas[0].e2b;
    // Made through A's E2B API with E2B's default timeout (300 s), then shortened through A.
    let killed = e2b_create(
        &http,
        a_e2b,
        &token,
        serde_json::json!({"templateID": "tiny"}),
    )
    .await;
    let paused = e2b_create(
        &http,
        a_e2b,
        &token,
        serde_json::json!({"templateID": "tiny", "autoPause": true}),
    )
    .await;
    let set_at = chrono::Utc::now();
    for id in [&killed, &paused] {
        e2b_set_timeout(&http, a_e2b, &token, id, TIMEOUT_S).await;
    }
    let ends = set_at + chrono::Duration::seconds(TIMEOUT_S as i64);

    // B restarts, then A (the replica that set them): neither keeps anything in memory.
    restart_replica(&mut setup, 1, "cp-b", &token).await;
    let a = restart_replica(&mut setup, 0, "cp-a", &token).await;
    assert!(
        chrono::Utc::now() < ends,
        "the restarts took longer than the timeout: the test would prove nothing"
    );
    assert_eq!(
        a.get_sandbox(&killed).await.unwrap().state,
        SandboxState::Running
    );

    until(
        "both timeouts fired",
        Duration::from_secs(TIMEOUT_S + 40),
        || async {
            a.get_sandbox(&killed).await.is_err()
                && a.get_sandbox(&paused)
                    .await
                    .is_ok_and(|s| s.state == SandboxState::Paused)
        },
    )
    .await;
    let (schema, end) = (&setup.schema, ends.to_rfc3339());
    // On runc an E2B timeout pause is Cove's pause (memory kept), as a full `pause()` is.
    for (id, state) in [(&killed, "deleted"), (&paused, "paused")] {
        let row = psql(
            &url,
            &format!(
                "SELECT state, coalesce(state_reason, ''), updated_at >= '{end}', \
                 expires_at IS NULL FROM {schema}.sandboxes WHERE id = '{id}'"
            ),
        );
        assert_eq!(row, format!("{state}|expired|t|t"), "{id}");
    }
    let paused_state = a.get_sandbox(&paused).await.unwrap();
    assert_eq!(paused_state.state_reason.as_deref(), Some("expired"));
    eprintln!(
        "e2b timeouts fired {:?} after they were due",
        chrono::Utc::now() - ends
    );
}
