//! The Cove server under test: started in-process on its own runtime thread (so the bench's
//! own work does not share its workers), on `127.0.0.1:0`, with a temporary data dir.
//!
//! [`CoveServer::stop`] deletes every sandbox through the API, shuts the server down and
//! removes the data dir; dropping a server that was not stopped (an error, Ctrl-C) kills every
//! container under its runc root, unmounts sandbox root filesystems and removes the data dir.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use cove_api_types::{BuildReleaseRequest, CreateSandboxRequest, OperationState};
use cove_client::{Client, ListSandboxes};

/// Longest a create or delete may take before the bench calls it an error.
const LIFECYCLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a release build may take (copying `tiny` from the cache takes milliseconds).
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// How to start the server.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Static guest agent binary.
    pub guest_agent: PathBuf,
    /// Release build cache.
    pub cache_dir: PathBuf,
    /// runc binary.
    pub runc: PathBuf,
    /// Install the tracing subscriber (server log on stderr).
    pub verbose: bool,
    /// Sandbox networks (`auto`: on when the host allows).
    pub network: cove_server::NetworkMode,
    /// The runtime sandboxes run on.
    pub runtime: cove_server::RuntimeChoice,
    /// A user namespace per runc sandbox (`--user-namespaces`).
    pub user_namespaces: bool,
}

/// A running in-process Cove server.
pub struct CoveServer {
    api_url: String,
    token: String,
    /// The proxy listener of sandbox ports (`{port}-{id}.localhost`).
    proxy_addr: Option<std::net::SocketAddr>,
    data_dir: PathBuf,
    /// Prefix of the server's network namespaces (removed by the cleanup).
    net_prefix: String,
    runc: PathBuf,
    stop_tx: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CoveServer {
    /// Starts the server and waits until it listens.
    pub async fn start(settings: ServerSettings) -> anyhow::Result<CoveServer> {
        Self::start_as(settings, |_| {}, Role::Server { token: None }).await
    }

    /// Starts a server on settings `tweak` changes; `token` is the admin token when its store
    /// already has one (a second replica on a shared store).
    pub async fn start_with(
        settings: ServerSettings,
        tweak: impl FnOnce(&mut cove_server::Config),
        token: Option<String>,
    ) -> anyhow::Result<CoveServer> {
        Self::start_as(settings, tweak, Role::Server { token }).await
    }

    /// Starts a node agent that joins a control plane as `node` says, on settings `tweak`
    /// changes. It has no API: [`CoveServer::client`] is not for it, and stopping it deletes
    /// nothing through an API (its containers go with its data dir).
    pub async fn start_node(
        settings: ServerSettings,
        tweak: impl FnOnce(&mut cove_server::Config),
        node: cove_server::NodeSettings,
    ) -> anyhow::Result<CoveServer> {
        Self::start_as(settings, tweak, Role::Node(node)).await
    }

    async fn start_as(
        settings: ServerSettings,
        tweak: impl FnOnce(&mut cove_server::Config),
        role: Role,
    ) -> anyhow::Result<CoveServer> {
        if !settings.guest_agent.is_file() {
            bail!(
                "guest agent not found at {} (build it with `scripts/build-guest-agent.sh \
                 --release`, or pass --guest-agent / COVE_GUEST_AGENT)",
                settings.guest_agent.display()
            );
        }
        let data_dir = tempfile::Builder::new()
            .prefix("cove-bench-")
            .tempdir()
            .context("create a temporary data dir")?
            .keep();
        let net_prefix = format!("cb{:06x}", rand_u32() & 0xff_ffff);
        let cfg = cove_server::Config {
            data_dir: data_dir.clone(),
            store: None,
            listen: "127.0.0.1:0".parse().context("listen address")?,
            data_plane_listen: "127.0.0.1:0".parse().context("data-plane address")?,
            guest_agent: Some(settings.guest_agent.clone()),
            cache_dir: Some(settings.cache_dir.clone()),
            layer_cache_mib: None,
            runc: Some(settings.runc.clone()),
            gvisor: Default::default(),
            runtime: settings.runtime,
            public_data_plane_url: None,
            lifecycle: Default::default(),
            command_output: Default::default(),
            default_disk_mib: Some(cove_server::DEFAULT_DISK_MIB),
            e2b: None,
            proxy: Some(cove_server::ProxySettings {
                listen: "127.0.0.1:0".parse().context("proxy address")?,
                domain: cove_server::DEFAULT_PROXY_DOMAIN.to_string(),
            }),
            network: cove_server::NetworkSettings {
                mode: settings.network,
                prefix: Some(net_prefix.clone()),
                ..Default::default()
            },
            cluster: None,
            user_namespaces: cove_server::UserNamespaceSettings {
                enabled: settings.user_namespaces,
                ..Default::default()
            },
            oci_import: Default::default(),
            listen_limits: Default::default(),
        };
        let mut cfg = cfg;
        tweak(&mut cfg);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let verbose = settings.verbose;
        let thread = std::thread::Builder::new()
            .name("cove-server".into())
            .spawn(move || serve(cfg, role, verbose, ready_tx, stop_rx))
            .context("spawn the server thread")?;
        let mut server = CoveServer {
            api_url: String::new(),
            token: String::new(),
            proxy_addr: None,
            data_dir,
            net_prefix,
            runc: settings.runc,
            stop_tx: Some(stop_tx),
            thread: Some(thread),
        };
        let (api, token, proxy) = ready_rx
            .await
            .context("the server thread ended before listening")??;
        if !token.is_empty() {
            server.api_url = format!("http://{api}");
        }
        server.token = token;
        server.proxy_addr = proxy;
        Ok(server)
    }

    /// The admin token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A new client of the server (each with its own connection pool).
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.api_url, self.token.clone()).context("create a client")
    }

    /// The proxy listener of sandbox ports.
    pub fn proxy_addr(&self) -> Option<std::net::SocketAddr> {
        self.proxy_addr
    }

    /// Prefix of the server's network namespaces and links.
    pub fn network_prefix(&self) -> &str {
        &self.net_prefix
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// runc's state root of the server's sandboxes.
    pub fn runc_root(&self) -> PathBuf {
        self.data_dir.join("runc")
    }

    /// The runc binary the server uses.
    pub fn runc(&self) -> &Path {
        &self.runc
    }

    /// Builds a release of `template` (a copy from the build cache when it is there).
    pub async fn ensure_release(&self, client: &Client, template: &str) -> anyhow::Result<()> {
        let resp = client
            .build_release(template, &BuildReleaseRequest::default())
            .await
            .with_context(|| format!("start a build of {template}"))?;
        let op = client
            .wait_operation(&resp.operation.id, BUILD_TIMEOUT)
            .await
            .with_context(|| format!("wait for the build of {template}"))?;
        if op.state != OperationState::Succeeded {
            bail!("build of {template} ended {:?}: {:?}", op.state, op.error);
        }
        Ok(())
    }

    /// Stops the server: deletes every sandbox through the API, shuts down, removes the data
    /// dir (and anything a failed delete left).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let deleted = if self.api_url.is_empty() {
            Ok(())
        } else {
            match self.client() {
                Ok(client) => delete_all(&client).await,
                Err(e) => Err(e),
            }
        };
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        let dir = self.data_dir.clone();
        let runc = self.runc.clone();
        let prefix = self.net_prefix.clone();
        tokio::task::spawn_blocking(move || hard_cleanup(&runc, &dir, &prefix))
            .await
            .context("cleanup task")?;
        self.data_dir = PathBuf::new();
        deleted
    }
}

impl Drop for CoveServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        if !self.data_dir.as_os_str().is_empty() {
            hard_cleanup(&self.runc, &self.data_dir, &self.net_prefix);
        }
    }
}

/// What the server thread reports once it listens: API address, admin token, proxy address.
type Ready = anyhow::Result<(std::net::SocketAddr, String, Option<std::net::SocketAddr>)>;

/// The server thread: its own runtime, serving until told to stop.
/// What a started process runs.
enum Role {
    /// A server; `token` is its admin token when the store already has one.
    Server { token: Option<String> },
    /// A node agent joining a control plane.
    Node(cove_server::NodeSettings),
}

fn serve(
    cfg: cove_server::Config,
    role: Role,
    verbose: bool,
    ready: tokio::sync::oneshot::Sender<Ready>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cove-server-rt")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(anyhow::Error::new(e).context("server runtime")));
            return;
        }
    };
    rt.block_on(async move {
        if verbose {
            cove_server::init_tracing();
        }
        let known = match role {
            Role::Server { token } => token,
            Role::Node(node) => {
                match cove_server::start_node(cfg, node).await {
                    Ok(running) => {
                        let _ = ready.send(Ok((running.addr, String::new(), None)));
                        let _ = stop.await;
                        running.shutdown().await;
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e.context("start the node agent")));
                    }
                }
                return;
            }
        };
        let running = match cove_server::start(cfg).await {
            Ok(r) => r,
            Err(e) => {
                let _ = ready.send(Err(e.context("start the server")));
                return;
            }
        };
        let Some(token) = running.new_admin_token.clone().or(known) else {
            let _ = ready.send(Err(anyhow::anyhow!("a fresh data dir gave no admin token")));
            return;
        };
        let _ = ready.send(Ok((running.api_addr, token, running.proxy_addr)));
        let _ = stop.await;
        running.shutdown().await;
    });
}

/// Creates a sandbox of `template` and waits until it runs; returns its id. A failed create
/// is an error (the failed sandbox is deleted first).
pub async fn create_sandbox(client: &Client, template: &str) -> anyhow::Result<String> {
    let req = CreateSandboxRequest {
        template: Some(template.to_string()),
        ..Default::default()
    };
    let resp = client
        .create_sandbox(&req, None)
        .await
        .context("create a sandbox")?;
    let id = resp.sandbox.id;
    let op = client
        .wait_operation(&resp.operation.id, LIFECYCLE_TIMEOUT)
        .await
        .with_context(|| format!("wait for the create of {id}"))?;
    if op.state != OperationState::Succeeded {
        let _ = delete_sandbox(client, &id).await;
        bail!("create of {id} ended {:?}: {:?}", op.state, op.error);
    }
    Ok(id)
}

/// Deletes a sandbox and waits until it is gone.
pub async fn delete_sandbox(client: &Client, id: &str) -> anyhow::Result<()> {
    let op = client
        .delete_sandbox(id)
        .await
        .with_context(|| format!("delete {id}"))?;
    wait_succeeded(client, &op.id, &format!("delete of {id}")).await
}

/// Waits for lifecycle operation `op_id` (`what` names it in errors); anything but success
/// is an error.
pub async fn wait_succeeded(client: &Client, op_id: &str, what: &str) -> anyhow::Result<()> {
    let op = client
        .wait_operation(op_id, LIFECYCLE_TIMEOUT)
        .await
        .with_context(|| format!("wait for the {what}"))?;
    if op.state != OperationState::Succeeded {
        bail!("{what} ended {:?}: {:?}", op.state, op.error);
    }
    Ok(())
}

/// Deletes `ids`, at most `parallel` at a time; returns the first error after trying all.
pub async fn delete_many(client: &Client, ids: &[String], parallel: usize) -> anyhow::Result<()> {
    use futures::StreamExt;
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(ids)
        .map(|id| delete_sandbox(client, id))
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

/// Deletes every sandbox the server has.
async fn delete_all(client: &Client) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    let mut filter = ListSandboxes::default();
    loop {
        let page = client
            .list_sandboxes(&filter)
            .await
            .context("list sandboxes")?;
        ids.extend(page.sandboxes.into_iter().map(|s| s.id));
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => break,
        }
    }
    delete_many(client, &ids, 4).await
}

/// Kills every container under `data_dir`'s runc root (and runsc root, on gvisor), unmounts sandbox root filesystems and
/// removes the data dir. Blocking.
fn hard_cleanup(runc: &Path, data_dir: &Path, net_prefix: &str) {
    remove_namespaces(net_prefix);
    crate::raw::delete_all_containers(runc, &data_dir.join("runc"));
    let runsc_root = data_dir.join("runsc");
    if runsc_root.is_dir() {
        crate::raw::delete_all_containers(Path::new("runsc"), &runsc_root);
    }
    if let Ok(entries) = std::fs::read_dir(data_dir.join("sandboxes")) {
        for e in entries.flatten() {
            let _ = nix::mount::umount2(&e.path().join("rootfs"), nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _ = std::fs::remove_dir_all(data_dir);
}

/// Deletes the network namespaces `{prefix}-*` (a server's gateway and sandboxes; every veth
/// goes with them).
fn remove_namespaces(prefix: &str) {
    let Ok(out) = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
    else {
        return;
    };
    let head = format!("{prefix}-");
    for name in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&head))
    {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", name])
            .output();
    }
}

/// A random number from the OS (for unique names).
fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    u32::from_le_bytes(b)
}
