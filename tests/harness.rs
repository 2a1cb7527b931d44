//! End-to-end test harness: one real `cove` server per test binary (runc runtime, real guest
//! agents, SQLite in a temporary data dir), started on first use on its own runtime thread.
//!
//! Environment:
//! - `COVE_GUEST_AGENT`: the static guest agent; default: the debug build under the target dir,
//!   built with `scripts/build-guest-agent.sh` when missing.
//! - `COVE_TEST_CACHE_DIR`: release build cache shared by test runs (default
//!   `/var/cache/cove/templates`), so `base` is built once per machine.
//! - `COVE_TEST_RUNTIME`: the runtime of the shared server, `runc` (default) or `gvisor` (the
//!   same suites on gVisor's `runsc`; a run asking for it fails when runsc is missing).
//!
//! At process exit every container the server started is killed, its network namespaces
//! deleted and the data dir removed, so a failed test leaves no runc container, mount, namespace
//! or file behind.

#![allow(unsafe_code)]

pub mod archives;
pub mod lab;
pub mod load;
pub mod s3;
pub mod server_process;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cove_api_types::{
    Attachment, BuildReleaseRequest, Command, CreateCommandRequest, CreateSandboxRequest,
    OperationState,
};
use cove_client::{AttachEvent, Client};
use futures::StreamExt;

/// The shared server of this test binary.
pub struct Server {
    /// Management API base URL.
    pub api_url: String,
    /// Data-plane base URL.
    pub data_plane_url: String,
    /// Admin token.
    pub token: String,
    /// Data dir.
    pub data_dir: PathBuf,
    /// The proxy listener of sandbox ports, when the tweak turned it on.
    pub proxy_addr: Option<std::net::SocketAddr>,
    /// The E2B listener, when the tweak turned it on.
    pub e2b_addr: Option<std::net::SocketAddr>,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static DATA_DIR: OnceLock<PathBuf> = OnceLock::new();
/// Asks the shared server's thread to shut the server down; it answers when done.
static STOP: std::sync::Mutex<Option<std::sync::mpsc::Sender<std::sync::mpsc::Sender<()>>>> =
    std::sync::Mutex::new(None);
static BUILT: tokio::sync::Mutex<Option<HashSet<String>>> = tokio::sync::Mutex::const_new(None);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Whether `qemu-system-x86_64` runs here; says "skipped" on stderr when it does not (the VM
/// tests then pass without running).
pub fn have_qemu() -> bool {
    let ok = std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: no qemu-system-x86_64");
    }
    ok
}

/// The runtime the shared server runs (`COVE_TEST_RUNTIME`: `runc` when unset, or `gvisor`).
/// Panics when gvisor is asked for and `runsc` does not run: a suite meant for gVisor never
/// passes without it.
pub fn test_runtime() -> cove_server::RuntimeChoice {
    let name = std::env::var("COVE_TEST_RUNTIME").unwrap_or_else(|_| "runc".to_string());
    let choice: cove_server::RuntimeChoice = name.parse().expect("COVE_TEST_RUNTIME");
    if choice == cove_server::RuntimeChoice::Gvisor {
        assert!(
            have_runsc(),
            "COVE_TEST_RUNTIME=gvisor but runsc does not run (apt-get install runsc)"
        );
    }
    choice
}

/// Whether gVisor's `runsc` runs here. Under `CI=true` a missing runsc fails the caller (a
/// test that needs it must run in CI); elsewhere it says "skipped" on stderr.
pub fn have_runsc() -> bool {
    let ok = std::process::Command::new("runsc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "runsc is missing under CI=true (scripts/install-deps.sh installs it)"
        );
        eprintln!("skipped: no runsc");
    }
    ok
}

/// The guest agent binary, built once if needed.
pub fn guest_agent() -> PathBuf {
    static AGENT: OnceLock<PathBuf> = OnceLock::new();
    AGENT
        .get_or_init(|| {
            if let Ok(p) = std::env::var("COVE_GUEST_AGENT") {
                return PathBuf::from(p);
            }
            let target = std::env::var("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|_| workspace_root().join("target"));
            let path = target.join("x86_64-unknown-linux-gnu/debug/cove-guest-agent");
            if !path.is_file() {
                let status = std::process::Command::new("bash")
                    .arg(workspace_root().join("scripts/build-guest-agent.sh"))
                    .status()
                    .expect("run scripts/build-guest-agent.sh");
                assert!(status.success(), "building the guest agent failed");
            }
            path
        })
        .clone()
}

extern "C" fn cleanup_at_exit() {
    let Some(dir) = DATA_DIR.get() else {
        return;
    };
    // The server's own shutdown first, as `cove server` does at SIGTERM: it must remove what
    // it prepared on the host (the gateway namespace and the ready pool).
    let stop = STOP.lock().ok().and_then(|mut s| s.take());
    let mut left = Vec::new();
    if let Some(stop) = stop {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        if stop.send(done_tx).is_ok() && done_rx.recv_timeout(Duration::from_secs(60)).is_ok() {
            left = left_after_stop(dir);
        } else {
            left.push("the server did not shut down within 60 s".to_string());
        }
    }
    cleanup(dir);
    if !left.is_empty() {
        eprintln!("the test server left network state behind after its shutdown: {left:?}");
        // SAFETY: ends the process at once with a failing status; the cleanup above has run.
        unsafe { libc::_exit(1) }
    }
}

/// What the stopped server of `data_dir` left on the host that it prepared rather than a
/// running sandbox holds: its gateway namespace, and every sandbox-side namespace of its
/// prefix that no sandbox's network record (`<data dir>/network/*.json`) names. Empty after a
/// stop that released what it should.
pub fn left_after_stop(data_dir: &Path) -> Vec<String> {
    let claimed: BTreeSet<String> = std::fs::read_dir(data_dir.join("network"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter_map(|v| v.get("netns").and_then(|n| n.as_str()).map(str::to_string))
        .collect();
    network_namespaces(data_dir)
        .into_iter()
        .filter(|ns| !claimed.contains(ns))
        .collect()
}

/// Ids of the runc containers under `data_dir`'s runc root (empty when runc has none), and of
/// the gvisor runtime's under its runsc root.
///
/// `runc list` that fails (it can, while a container is being created or deleted beside it)
/// is retried up to 5 times, 100 ms apart; a failure that persists panics with runc's stderr
/// rather than reading as "no containers".
pub fn runc_containers(data_dir: &Path) -> BTreeSet<String> {
    let mut last = String::new();
    for _ in 0..5 {
        let out = std::process::Command::new("runc")
            .arg("--root")
            .arg(data_dir.join("runc"))
            .args(["list", "-q"])
            .output()
            .expect("runc runs");
        if out.status.success() {
            let mut ids: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            ids.extend(runsc_containers(data_dir));
            return ids;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("runc list keeps failing: {last}");
}

/// Ids of the gvisor runtime's containers under `data_dir`'s runsc root (its state files, as
/// `runsc list` reads them; none without the root).
pub fn runsc_containers(data_dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data_dir.join("runsc"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let (c, s) = name.strip_suffix(".state")?.split_once("_sandbox:")?;
            (c == s).then(|| c.to_string())
        })
        .collect()
}

/// Lines of /proc/self/mountinfo that mention `needle` (a sandbox id, a data dir).
pub fn mounts_with(needle: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The network namespaces (gateway and sandboxes) of the server on `data_dir`.
pub fn network_namespaces(data_dir: &Path) -> BTreeSet<String> {
    let dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let prefix = format!("{}-", cove_server::network_prefix_for(&dir));
    std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|n| n.starts_with(&prefix))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the network namespaces of the server on `data_dir` (every veth goes with them).
/// Repeats a few times: a server still running (as at process exit) may be preparing one.
pub fn remove_network_namespaces(data_dir: &Path) {
    for _ in 0..5 {
        let left = network_namespaces(data_dir);
        if left.is_empty() {
            return;
        }
        for ns in left {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &ns])
                .output();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills every container under `dir`'s runc root, unmounts sandbox root filesystems and own
/// disks, removes the server's network namespaces, removes `dir`.
fn cleanup(dir: &Path) {
    release_node_resources(dir);
    let _ = std::fs::remove_dir_all(dir);
}

/// Everything a server on data dir `dir` holds on the host but its files: kills every
/// container under its runc root (and QEMU VM), unseals run dirs, unmounts sandbox root
/// filesystems, own disks and volumes, removes the server's network namespaces.
pub fn release_node_resources(dir: &Path) {
    let root = dir.join("runc");
    for id in runc_containers(dir) {
        let _ = std::process::Command::new("runc")
            .arg("--root")
            .arg(&root)
            .args(["delete", "-f", &id])
            .output();
    }
    // Sandboxes of the gvisor runtime.
    for id in runsc_containers(dir) {
        let _ = std::process::Command::new("runsc")
            .arg("--root")
            .arg(dir.join("runsc"))
            .args(["delete", "-force", &id])
            .output();
    }
    // QEMU VMs of the qemu runtime (their pid files; QEMU outlives the server by design).
    if let Ok(entries) = std::fs::read_dir(dir.join("qemu")) {
        for e in entries.flatten() {
            if let Ok(pid) = std::fs::read_to_string(e.path().join("qemu.pid")) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", pid.trim()])
                    .output();
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir.join("sandboxes")) {
        for e in entries.flatten() {
            // The run dir is sealed (immutable) while its sandbox runs.
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(e.path().join("run"))
                .output();
            // The overlay first, then the idmapped release under it, then a sandbox's own disk
            // (its loop device detaches with it).
            for mount in ["rootfs", "lower", "disk"] {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(e.path().join(mount))
                    .output();
            }
        }
    }
    release_userns_claims(dir);
    remove_network_namespaces(dir);
    // Persistent volumes: the sandboxes' idmapped clones, then each volume's loop mount.
    if let Ok(entries) = std::fs::read_dir(dir.join("sandboxes")) {
        for e in entries.flatten() {
            let clones = std::fs::read_dir(e.path().join("volumes"));
            for v in clones.into_iter().flatten().flatten() {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(v.path())
                    .output();
            }
        }
    }
    for v in std::fs::read_dir(dir.join("volumes"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(v.path().join("mnt"))
            .output();
    }
}

/// Gives back the machine-wide user namespace ranges the sandboxes of data dir `dir` still
/// claim (a claim holds its sandbox's id).
fn release_userns_claims(dir: &Path) {
    // `cove_runtime::runc::USERNS_CLAIMS_DIR`.
    let claims = Path::new("/run/cove/userns");
    let Ok(entries) = std::fs::read_dir(claims) else {
        return;
    };
    for e in entries.flatten() {
        if let Ok(id) = std::fs::read_to_string(e.path()) {
            if !id.is_empty() && !id.contains('/') && dir.join("sandboxes").join(&id).exists() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// The OCI import directory of this binary's server (`<data dir>/oci-import`, made at its
/// start): `FROM oci-archive:NAME` finds NAME there.
pub fn oci_import_dir() -> PathBuf {
    server().data_dir.join("oci-import")
}

/// The server of this test binary (started on first call).
pub fn server() -> &'static Server {
    server_with(|_| {})
}

/// The server of this test binary, started on first call with `tweak` applied to its
/// configuration (e.g. small output limits). Every test of a binary must pass the same tweak:
/// the first call decides.
pub fn server_with(tweak: fn(&mut cove_server::Config)) -> &'static Server {
    SERVER.get_or_init(|| {
        let agent = guest_agent();
        let data_dir = tempfile::Builder::new()
            .prefix("cove-e2e-")
            .tempdir()
            .expect("temp data dir")
            .keep();
        let _ = DATA_DIR.set(data_dir.clone());
        // SAFETY: registers a plain `extern "C"` function with no arguments; it only reads a
        // OnceLock and runs commands, which is sound at exit.
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
        let cache = std::env::var("COVE_TEST_CACHE_DIR")
            .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
        let cfg = cove_server::Config {
            data_dir: data_dir.clone(),
            store: None,
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_plane_listen: "127.0.0.1:0".parse().expect("addr"),
            guest_agent: Some(agent),
            cache_dir: Some(PathBuf::from(cache)),
            layer_cache_mib: None,
            runc: None,
            gvisor: Default::default(),
            runtime: test_runtime(),
            public_data_plane_url: None,
            lifecycle: cove_server::LifecycleSettings {
                // Idle suspends and TTLs are tested with timeouts of seconds.
                controller_interval: Some(Duration::from_millis(250)),
                ..Default::default()
            },
            command_output: Default::default(),
            e2b: None,
            proxy: None,
            network: Default::default(),
            default_disk_mib: Some(cove_server::DEFAULT_DISK_MIB),
            cluster: None,
            user_namespaces: Default::default(),
            oci_import: cove_server::OciImportSettings {
                dir: Some(data_dir.join("oci-import")),
                max_mib: None,
            },
            listen_limits: Default::default(),
        };
        std::fs::create_dir_all(data_dir.join("oci-import")).expect("oci import dir");
        let mut cfg = cfg;
        tweak(&mut cfg);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if std::env::var("COVE_TEST_LOG").is_ok() {
                    cove_server::init_tracing();
                }
                let running = cove_server::start(cfg).await.expect("server starts");
                let token = running.new_admin_token.clone().expect("fresh admin token");
                let (stop_tx, stop_rx) = std::sync::mpsc::channel::<std::sync::mpsc::Sender<()>>();
                if let Ok(mut s) = STOP.lock() {
                    *s = Some(stop_tx);
                }
                tx.send((
                    running.api_addr,
                    running.data_plane_addr,
                    token,
                    running.proxy_addr,
                    running.e2b_addr,
                ))
                .expect("send");
                // Until the process exits (`cleanup_at_exit` asks for the shutdown).
                let done = tokio::task::spawn_blocking(move || stop_rx.recv().ok())
                    .await
                    .ok()
                    .flatten();
                running.shutdown().await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
            });
        });
        let (api, dp, token, proxy_addr, e2b_addr) = rx.recv().expect("server address");
        Server {
            api_url: format!("http://{api}"),
            data_plane_url: format!("http://{dp}"),
            token,
            data_dir,
            proxy_addr,
            e2b_addr,
        }
    })
}

/// A client of the shared server (one per test: clients are bound to the test's runtime).
pub fn client() -> Client {
    client_of(server())
}

/// A client of `s`.
pub fn client_of(s: &Server) -> Client {
    Client::new(&s.api_url, s.token.clone()).expect("client")
}

/// Makes sure `template` has a ready release (built once per test binary, from the cache).
pub async fn ensure_template(client: &Client, template: &str) {
    let mut built = BUILT.lock().await;
    let built = built.get_or_insert_with(HashSet::new);
    if built.contains(template) {
        return;
    }
    build_template(client, template).await;
    built.insert(template.to_string());
}

/// Builds a release of `template` on the server of `client` and waits until it is ready (from
/// the cache: seconds). Unlike [`ensure_template`] it builds every time: for tests that start
/// servers of their own.
pub async fn build_template(client: &Client, template: &str) {
    let resp = client
        .build_release(template, &BuildReleaseRequest::default())
        .await
        .expect("start build");
    let op = client
        .wait_operation(&resp.operation.id, Duration::from_secs(1800))
        .await
        .expect("build finishes");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "build of {template} failed: {:?}",
        op.error
    );
}

/// A context tar holding only `file` as `Dockerfile`.
pub fn dockerfile_context(file: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(file.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "Dockerfile", file.as_bytes())
        .expect("append");
    b.into_inner().expect("tar")
}

/// Builds `file` as `name` under `network` (without the step cache) and waits: the state,
/// the release number and the build log.
pub async fn build_file(
    c: &Client,
    name: &str,
    file: &str,
    network: cove_api_types::EgressPolicy,
) -> (OperationState, u32, Vec<String>) {
    let resp = c
        .create_template(
            &cove_api_types::CreateTemplateQuery {
                name: name.into(),
                no_cache: true,
                network: Some(network),
                ..Default::default()
            },
            dockerfile_context(file),
        )
        .await
        .expect("create template");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(300))
        .await
        .expect("build ends");
    let mut lines = Vec::new();
    let mut logs = std::pin::pin!(c.operation_logs(&resp.operation.id, None));
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), logs.next())
        .await
        .expect("log stream answers")
    {
        match ev.expect("log event") {
            cove_api_types::OperationLogEvent::Log { line, .. } => lines.push(line),
            cove_api_types::OperationLogEvent::Done { .. } => break,
            cove_api_types::OperationLogEvent::Progress { .. } => {}
        }
    }
    if op.state != OperationState::Succeeded {
        lines.push(format!("operation error: {:?}", op.error));
    }
    (op.state, resp.release.number, lines)
}

/// Creates a sandbox of `template` (with `req`'s other fields) and waits until it runs.
pub async fn sandbox_with(
    client: &Client,
    template: &str,
    mut req: CreateSandboxRequest,
) -> String {
    ensure_template(client, template).await;
    req.template = Some(template.to_string());
    create_running(client, &req).await
}

/// Creates a sandbox as `req` asks (its template as it is: nothing is built) and waits until
/// it runs; its id.
pub async fn create_running(client: &Client, req: &CreateSandboxRequest) -> String {
    let resp = client.create_sandbox(req, None).await.expect("create");
    let op = client
        .wait_operation(&resp.operation.id, Duration::from_secs(120))
        .await
        .expect("create finishes");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "create failed: {:?}",
        op.error
    );
    resp.sandbox.id
}

/// Creates a default sandbox of `template`.
pub async fn sandbox(client: &Client, template: &str) -> String {
    sandbox_with(client, template, CreateSandboxRequest::default()).await
}

/// Deletes a sandbox and waits for it.
pub async fn delete(client: &Client, id: &str) {
    let op = client.delete_sandbox(id).await.expect("delete");
    let op = client
        .wait_operation(&op.id, Duration::from_secs(60))
        .await
        .expect("delete finishes");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "delete failed: {:?}",
        op.error
    );
}

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// stdout.
    Stdout,
    /// stderr.
    Stderr,
}

/// Everything a finished command produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// stdout bytes.
    pub stdout: Vec<u8>,
    /// stderr bytes.
    pub stderr: Vec<u8>,
    /// The exit event's command.
    pub command: Command,
    /// Each chunk with its arrival time (relative to the command's start request).
    pub chunks: Vec<(Duration, Source, Bytes)>,
    /// Time from the start request to the exit event.
    pub elapsed: Duration,
    /// Dropped ranges `(offset, len)` the stream reported (the middle of a very long output).
    pub gaps: Vec<(u64, u64)>,
}

impl Output {
    /// stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text (lossy).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Reads an attachment from `offset` until the exit event.
pub async fn collect(client: &Client, att: &Attachment, offset: u64, t0: Instant) -> Output {
    let mut out = Output {
        stdout: Vec::new(),
        stderr: Vec::new(),
        command: placeholder_command(),
        chunks: Vec::new(),
        elapsed: Duration::ZERO,
        gaps: Vec::new(),
    };
    let mut events = Box::pin(client.attach(att, offset));
    let mut exited = false;
    while let Some(ev) = events.next().await {
        match ev.expect("attach event") {
            AttachEvent::Stdout { data, .. } => {
                out.stdout.extend_from_slice(&data);
                out.chunks.push((t0.elapsed(), Source::Stdout, data));
            }
            AttachEvent::Stderr { data, .. } => {
                out.stderr.extend_from_slice(&data);
                out.chunks.push((t0.elapsed(), Source::Stderr, data));
            }
            AttachEvent::Gap { offset, len } => out.gaps.push((offset, len)),
            AttachEvent::Exit(cmd) => {
                out.command = cmd;
                exited = true;
                break;
            }
        }
    }
    assert!(exited, "the output stream ended without an exit event");
    out.elapsed = t0.elapsed();
    out
}

fn placeholder_command() -> Command {
    serde_json::from_value(serde_json::json!({
        "id": "", "sandbox_id": "", "argv": [], "user": "", "cwd": "", "pid": 0,
        "state": "running", "exit_code": null, "signal": null, "timed_out": false,
        "truncated": false, "output_bytes": 0, "stdin_open": false,
        "started_at": "1970-01-01T00:00:00Z", "ended_at": null
    }))
    .expect("placeholder command")
}

/// Runs `req` in `sandbox` and collects its output.
pub async fn run(client: &Client, sandbox: &str, req: CreateCommandRequest) -> Output {
    let t0 = Instant::now();
    let resp = client
        .create_command(sandbox, &req)
        .await
        .expect("create command");
    collect(client, &resp.attachment, 0, t0).await
}

/// A command request running `shell_line` through the sandbox's shell, with defaults otherwise.
pub fn shell(shell_line: &str) -> CreateCommandRequest {
    CreateCommandRequest {
        shell: Some(shell_line.to_string()),
        ..Default::default()
    }
}

/// Runs a shell string as root in `sandbox` and collects its output.
pub async fn root_sh(client: &Client, sandbox: &str, shell_line: &str) -> Output {
    let req = CreateCommandRequest {
        user: Some("root".into()),
        ..shell(shell_line)
    };
    run(client, sandbox, req).await
}

/// Runs a shell string in `sandbox` and collects its output.
pub async fn sh(client: &Client, sandbox: &str, shell_line: &str) -> Output {
    run(client, sandbox, shell(shell_line)).await
}

/// Random bytes.
pub fn random_bytes(n: usize) -> Vec<u8> {
    use rand::RngCore;
    let mut v = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut v);
    v
}

/// Hex SHA-256.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(b))
}
