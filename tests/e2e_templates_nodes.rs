//! Releases built from a file travel through the snapshot store: a server with its own node and
//! a second node agent (in this process, its own data dir, joined over gRPC on loopback), both
//! sharing one snapshot directory. The build runs on the server's node, which keeps the release
//! in the store; with that node drained, a create lands on the second node, which fetches the
//! release and checks its digest: a tampered copy fails the create with `release_corrupt` and
//! leaves nothing behind, the intact one runs. Deleting the release removes the stored copy
//! and every node's. Networking off; needs root.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cove_api_types::{CreateSandboxRequest, CreateTemplateQuery, ErrorCode, OperationState};
use cove_client::Client;
use cove_e2e::{delete, ensure_template, guest_agent, sh};

const TOKEN: &str = "templates-nodes-token-0123456789";
const HELLO: &str = "hello from the builder node\n";

/// The server's node listener port (fixed before the server starts: the tweak cannot capture).
fn node_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port()
    })
}

/// The snapshot directory both nodes share.
fn store_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("cove-e2e-store-")
            .tempdir()
            .expect("store dir")
            .keep()
    })
}

fn store_url() -> String {
    format!("file://{}", store_dir().display())
}

fn tweak(cfg: &mut cove_server::Config) {
    cfg.network.mode = cove_server::NetworkMode::Off;
    cfg.lifecycle.snapshot_store = Some(store_url());
    let listen = SocketAddr::from(([127, 0, 0, 1], node_port()));
    let mut cluster = cove_server::ClusterSettings::new(TOKEN, listen);
    cluster.heartbeat_interval = Duration::from_millis(500);
    cfg.cluster = Some(cluster);
}

/// Starts the second node agent (`n2`) on a runtime thread of its own; its data dir.
fn second_node() -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("cove-e2e-n2-")
        .tempdir()
        .expect("node dir")
        .keep();
    let cache = std::env::var("COVE_TEST_CACHE_DIR")
        .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
    let cfg = cove_server::Config {
        data_dir: dir.clone(),
        store: None,
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_plane_listen: "127.0.0.1:0".parse().expect("addr"),
        guest_agent: Some(guest_agent()),
        cache_dir: Some(PathBuf::from(cache)),
        layer_cache_mib: None,
        runc: None,
        gvisor: Default::default(),
        runtime: Default::default(),
        public_data_plane_url: None,
        lifecycle: cove_server::LifecycleSettings {
            snapshot_store: Some(store_url()),
            ..Default::default()
        },
        command_output: Default::default(),
        e2b: None,
        proxy: None,
        network: cove_server::NetworkSettings {
            mode: cove_server::NetworkMode::Off,
            ..Default::default()
        },
        default_disk_mib: Some(cove_server::DEFAULT_DISK_MIB),
        cluster: None,
        user_namespaces: Default::default(),
        oci_import: Default::default(),
        listen_limits: Default::default(),
    };
    let settings = cove_server::NodeSettings {
        name: "n2".into(),
        control_plane: format!("http://127.0.0.1:{}", node_port()),
        join_token: TOKEN.into(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        advertise: None,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let node = cove_server::start_node(cfg, settings)
                .await
                .expect("node starts");
            tx.send(()).expect("send");
            std::future::pending::<()>().await;
            drop(node);
        });
    });
    rx.recv().expect("node up");
    dir
}

/// Polls `check` every 200 ms until it holds (at most `limit`).
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn context(file: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(file.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "Dockerfile", file.as_bytes())
        .expect("append");
    b.into_inner().expect("tar")
}

/// Creates a sandbox of release 1 of `shared`; the create operation's end.
async fn create(c: &Client) -> (String, cove_api_types::Operation) {
    let resp = c
        .create_sandbox(
            &CreateSandboxRequest {
                template: Some("shared".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .expect("create accepted");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("create ends");
    (resp.sandbox.id, op)
}

/// Entries of `dir` (none when it is missing).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_release_fetches_it_from_the_store_and_checks_its_digest() {
    let server = cove_e2e::server_with(tweak);
    let c = cove_e2e::client_of(server);
    let n2 = second_node();
    until("n2 to join", Duration::from_secs(30), || async {
        c.nodes()
            .await
            .map(|l| l.nodes.iter().any(|n| n.name == "n2"))
            .unwrap_or(false)
    })
    .await;
    ensure_template(&c, "tiny").await;

    // Built on the server's node (the first that can build from a file), kept in the store.
    let file = format!(
        "FROM tiny\nRUN printf '{}' > /hello.txt\n",
        HELLO.replace('\n', "\\n")
    );
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: "shared".into(),
                ..Default::default()
            },
            context(&file),
        )
        .await
        .expect("build accepted");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(300))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let release = c.template("shared").await.expect("template").releases[0].clone();
    let digest = release.digest.clone().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("sha256");
    let stored = store_dir().join("releases").join(hex);
    let mut names = entries(&stored);
    names.sort();
    assert_eq!(names, ["release.json", "rootfs.tar"]);
    assert!(server.data_dir.join("releases/shared/1/rootfs").is_dir());
    assert!(!n2.join("releases/shared/1").exists(), "n2 never built it");

    c.drain_node("local")
        .await
        .expect("drain the server's node");

    // A tampered copy: the create fails with `release_corrupt`, n2 keeps nothing of it.
    let tar_path = stored.join("rootfs.tar");
    let original = std::fs::read(&tar_path).expect("stored tree");
    let at = original
        .windows(HELLO.len())
        .position(|w| w == HELLO.as_bytes())
        .expect("the file's bytes in the tar");
    let mut tampered = original.clone();
    tampered[at] = b'J';
    std::fs::write(&tar_path, &tampered).expect("tamper");
    let (failed, op) = create(&c).await;
    assert_eq!(op.state, OperationState::Failed);
    let err = op.error.expect("error");
    assert_eq!(err.code, ErrorCode::ReleaseCorrupt, "{}", err.message);
    assert!(err.message.contains("digest"), "{}", err.message);
    assert!(
        entries(&n2.join("releases/shared")).is_empty(),
        "nothing half-unpacked: {:?}",
        entries(&n2.join("releases/shared"))
    );

    // The intact copy: fetched, checked, run on n2.
    std::fs::write(&tar_path, &original).expect("restore");
    let (id, op) = create(&c).await;
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    assert!(n2.join("releases/shared/1/rootfs").is_dir());
    let out = sh(&c, &id, "cat /hello.txt").await;
    assert_eq!(out.stdout_text(), HELLO);
    delete(&c, &id).await;
    delete(&c, &failed).await;

    // Deleting the release removes the stored copy and both nodes' copies.
    c.delete_release("shared", 1).await.expect("delete release");
    assert!(!stored.join("release.json").exists());
    assert!(!tar_path.exists());
    assert!(!n2.join("releases/shared/1").exists());
    assert!(!server.data_dir.join("releases/shared/1").exists());

    c.ready_node("local").await.expect("ready again");
    cove_e2e::release_node_resources(&n2);
    let _ = std::fs::remove_dir_all(&n2);
    let _ = std::fs::remove_dir_all(store_dir());
}
