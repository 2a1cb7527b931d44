//! Composition root of `cove server`: config → store → node agent → control plane → routers →
//! two listeners (management API and data plane), with graceful shutdown.

use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use cove_control_plane::orgs::scope::as_system;
use cove_control_plane::{ControlPlane, ControlPlaneConfig, Controller};
use cove_node_agent::snapshot::SnapshotStore;
use cove_node_agent::{NodeAgent, NodeConfig};

pub use cove_control_plane::Retention;
pub use cove_control_plane::{Feature, Features};
pub use cove_node_agent::guest::OutputLimits;
use cove_runtime::qemu::{QemuConfig, QemuRuntime};
use cove_runtime::runc::{RuncConfig, RuncRuntime};
use cove_runtime::Runtime;
use cove_store::{SqliteStore, Store};
use tokio::net::TcpListener;
use tracing::info;

mod cluster;
pub mod listen;
pub mod metrics;
mod node;
pub mod tls;

pub use cluster::ClusterSettings;
pub use listen::ListenLimits;
pub use node::{run_node, start_node, NodeSettings, RunningNode};

/// Default management API address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";
/// Default data-plane address.
pub const DEFAULT_DATA_PLANE_LISTEN: &str = "127.0.0.1:7701";
/// Default address of the proxy listener of sandbox ports (`--proxy-listen`).
pub const DEFAULT_PROXY_LISTEN: &str = "127.0.0.1:7704";
/// Default domain of the proxy listener's host names (`{port}-{id}.localhost`: browsers
/// resolve `*.localhost` to loopback).
pub const DEFAULT_PROXY_DOMAIN: &str = "localhost";
/// Default address of the E2B compatibility listener (`--e2b-listen`).
pub const DEFAULT_E2B_LISTEN: &str = cove_e2b_compat::DEFAULT_E2B_LISTEN;
/// Name of the file in the data dir holding the secret E2B envd access tokens derive from.
pub const E2B_SECRET_FILE: &str = "e2b.secret";
/// Name of the server's own node when remote nodes join too.
pub const LOCAL_NODE_NAME: &str = "local";
/// Name of the admin token file in the data dir (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Settings of `cove server`.
#[derive(Debug, Clone)]
pub struct Config {
    /// Data dir: `store.db`, `admin.token`, `releases/`, `sandboxes/`, `runc/`.
    pub data_dir: PathBuf,
    /// The store's URL: `sqlite://<path>` or `postgres://...` (see [`cove_store::open`]);
    /// default: the SQLite file `<data-dir>/store.db`.
    pub store: Option<String>,
    /// Management API address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Data-plane address (port 0 picks a free port).
    pub data_plane_listen: SocketAddr,
    /// The static guest agent binary; default: `cove-guest-agent` beside the running executable.
    pub guest_agent: Option<PathBuf>,
    /// Build cache of release root filesystems; default `<data-dir>/cache`.
    pub cache_dir: Option<PathBuf>,
    /// Bound of the step cache of builds from a file (`<data-dir>/layers`), in MiB
    /// (`--layer-cache-mib`); default [`DEFAULT_LAYER_CACHE_MIB`].
    pub layer_cache_mib: Option<u64>,
    /// The runc binary; default `runc` from PATH.
    pub runc: Option<PathBuf>,
    /// Which runtime isolates sandboxes (`--runtime`).
    pub runtime: RuntimeChoice,
    /// The `gvisor` runtime's runsc binary and platform (`--runsc`, `--runsc-platform`).
    pub gvisor: GvisorSettings,
    /// URL clients use for the data plane; default `http://<data-plane address>`.
    pub public_data_plane_url: Option<String>,
    /// Snapshot store, controller and retention settings.
    pub lifecycle: LifecycleSettings,
    /// How much of each command's output the sandboxes' guest agents keep (memory, cap, tail).
    pub command_output: OutputLimits,
    /// The E2B compatibility listener (REST and envd on one port); `None` = not served.
    pub e2b: Option<E2bSettings>,
    /// The proxy listener of sandbox ports (`{port}-{id}.{domain}`); `None` = not served.
    pub proxy: Option<ProxySettings>,
    /// Sandbox networks (the egress gateway).
    pub network: NetworkSettings,
    /// Own-disk size in MiB of a sandbox whose create names no `resources.disk_mib`
    /// (`--default-disk-mib`, [`DEFAULT_DISK_MIB`]; `None`: such sandboxes write to the node's
    /// disk without a limit). Shown in `GET /v1/capabilities`.
    pub default_disk_mib: Option<u64>,
    /// Remote node agents (`None`: the server's one in-process node, the single-machine
    /// default).
    pub cluster: Option<ClusterSettings>,
    /// User namespaces for runc sandboxes (`--user-namespaces`, `--userns-base`).
    pub user_namespaces: UserNamespaceSettings,
    /// Where `FROM oci-archive:NAME` finds image archives (`--oci-import-dir`; off by default).
    pub oci_import: OciImportSettings,
    /// Bounds of every listener: connection caps, head and idle timeouts
    /// (`--max-connections`, `--max-connections-per-peer`, `--listen-header-timeout`,
    /// `--listen-idle-timeout`).
    pub listen_limits: ListenLimits,
}

/// The operator's directory of OCI image archives: `FROM oci-archive:NAME` in a template file
/// names a regular file there (a plain relative name, opened without following links), never
/// a host path. Off by default: such builds then fail with `oci_import_disabled`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OciImportSettings {
    /// The directory (`--oci-import-dir`); `None`: no imports.
    pub dir: Option<PathBuf>,
    /// Largest archive imported, in MiB (`--oci-import-max-mib`); default
    /// [`DEFAULT_OCI_IMPORT_MAX_MIB`].
    pub max_mib: Option<u64>,
}

/// Default bound of an imported image archive, in MiB (8 GiB).
pub const DEFAULT_OCI_IMPORT_MAX_MIB: u64 = 8192;

/// User namespaces of runc sandboxes: each sandbox's root is an unprivileged host id range of
/// its own (`--user-namespaces on`, the default). A server that is asked for them and cannot
/// have them (the kernel cannot idmap the releases' filesystem) does not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserNamespaceSettings {
    /// On (default) or off (sandboxes share the host's ids).
    pub enabled: bool,
    /// First host id of the ranges (`--userns-base`); each sandbox takes
    /// [`cove_runtime::runc::USERNS_RANGE_SIZE`] ids from there on.
    pub base: u32,
}

impl Default for UserNamespaceSettings {
    fn default() -> Self {
        UserNamespaceSettings {
            enabled: true,
            base: cove_runtime::runc::DEFAULT_USERNS_BASE,
        }
    }
}

pub use cove_domain::resources::DEFAULT_DISK_MIB;

/// Default bound of a node's step cache of builds from a file, in MiB (10 GiB).
pub const DEFAULT_LAYER_CACHE_MIB: u64 = 10240;

/// Whether sandboxes get a network behind the node's egress gateway (`--network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NetworkMode {
    /// On when the server runs as root with `ip` and `nft` on `PATH` and a runtime that can
    /// join a namespace (runc); off otherwise (logged).
    #[default]
    Auto,
    /// On; the server does not start when the gateway cannot.
    On,
    /// Off: sandboxes have loopback only and only the default egress policy is accepted.
    Off,
}

impl std::str::FromStr for NetworkMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(NetworkMode::Auto),
            "on" => Ok(NetworkMode::On),
            "off" => Ok(NetworkMode::Off),
            other => Err(format!("unknown network mode {other:?} (on, off or auto)")),
        }
    }
}

/// Settings of sandbox networks. Every unset field takes its default.
#[derive(Debug, Clone, Default)]
pub struct NetworkSettings {
    /// On, off, or decided from the host (default).
    pub mode: NetworkMode,
    /// Name prefix of the node's namespaces and links (1-8 of `[a-z0-9]`); default `cv` + six
    /// hex digits of a hash of the data dir, so servers on different data dirs never touch
    /// each other's namespaces and a restart on the same data dir adopts its own.
    pub prefix: Option<String>,
    /// Sandbox addresses (a /16 to /29; the first address is the gateway); default
    /// [`DEFAULT_NETWORK_POOL`]. Refused when it overlaps a host route.
    pub pool: Option<ipnet::Ipv4Net>,
    /// Test hook: the gateway's upstream (a namespace and a resolver, e.g.
    /// `cove_network::lab::FakeInternet`) instead of the host's namespace and resolver.
    pub upstream: Option<cove_network::Upstream>,
    /// At stop, leave the gateway namespace and the ready pool in place when sandboxes run
    /// (`--keep-network-on-stop`). Default: a stop removes everything the node prepared for
    /// sandbox networks and keeps only the running sandboxes' own namespaces, which the next
    /// start adopts either way.
    pub keep_on_stop: bool,
    /// A PEM file of CAs every sandbox and template build trusts besides its release's bundle
    /// (`--sandbox-ca-file`: a network that inspects TLS); also trusted by the gateway where it
    /// verifies upstream servers itself.
    pub sandbox_ca_file: Option<PathBuf>,
    /// An HTTP CONNECT proxy the gateway sends every allowed connection through
    /// (`--upstream-proxy http://[user:password@]host:port`).
    pub upstream_proxy: Option<cove_network::UpstreamProxy>,
}

/// An HTTP CONNECT proxy for the gateway's egress (`--upstream-proxy`).
pub use cove_network::UpstreamProxy;

/// The default sandbox address pool.
pub const DEFAULT_NETWORK_POOL: &str = "10.239.0.0/16";

/// The default network prefix of a data dir: `cv` + six hex digits of a hash of its path.
pub fn network_prefix_for(data_dir: &Path) -> String {
    // FNV-1a: stable across builds and platforms (unlike std's hasher).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data_dir.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("cv{:06x}", h & 0xff_ffff)
}

fn on_path(binary: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(binary).is_file()))
}

/// Why sandbox networks cannot run on this host (`None`: they can).
fn network_unavailable(runtime: &dyn Runtime) -> Option<String> {
    // The effective uid, read from /proc.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false);
    if !root {
        return Some("not running as root".into());
    }
    for tool in ["ip", "nft"] {
        if !on_path(tool) {
            return Some(format!("`{tool}` is not on PATH"));
        }
    }
    if !runtime.capabilities().network {
        return Some(format!(
            "the {} runtime has no sandbox network yet",
            runtime.kind().as_str()
        ));
    }
    None
}

/// The gateway's configuration for this server: `extra_floor` holds every address the server
/// listens on (all of the host's for an unspecified address), so no sandbox reaches the control
/// plane whatever its policy.
fn network_config(
    settings: &NetworkSettings,
    data_dir: &Path,
    listening: &[SocketAddr],
) -> anyhow::Result<cove_network::NetworkConfig> {
    let upstream = match &settings.upstream {
        Some(u) => u.clone(),
        None => cove_network::Upstream::host().context("the host's resolver")?,
    };
    let pool = match settings.pool {
        Some(p) => p,
        None => DEFAULT_NETWORK_POOL.parse().context("default pool")?,
    };
    let mut cfg = cove_network::NetworkConfig::new(pool, upstream);
    if let Some(path) = &settings.sandbox_ca_file {
        cfg.sandbox_ca_pem = Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("read the sandbox CA file {}", path.display()))?,
        );
    }
    cfg.upstream_proxy = settings.upstream_proxy.clone();
    cfg.prefix = settings
        .prefix
        .clone()
        .unwrap_or_else(|| network_prefix_for(data_dir));
    for addr in listening {
        match addr.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                let host = cove_network::cmd::addresses(None).context("the host's addresses")?;
                cfg.extra_floor
                    .extend(host.into_iter().map(ipnet::Ipv4Net::from));
            }
            std::net::IpAddr::V4(ip) => cfg.extra_floor.push(ipnet::Ipv4Net::from(ip)),
            // The gateway forwards IPv4 only.
            std::net::IpAddr::V6(_) => {}
        }
    }
    Ok(cfg)
}

/// Settings of the E2B compatibility listener.
#[derive(Debug, Clone)]
pub struct E2bSettings {
    /// Address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Domain given to SDKs for `{port}-{id}.{domain}` host names (`None`:
    /// `localhost:PORT`, see [`cove_e2b_compat::sandbox_domain`]).
    pub domain: Option<String>,
    /// The operator's certificate and key: the listener speaks TLS only (`None`: plain HTTP).
    pub tls: Option<tls::TlsFiles>,
}

/// Settings of the proxy listener of sandbox ports.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Domain of the host names: `{port}-{sandbox id}.{domain}` (default
    /// [`DEFAULT_PROXY_DOMAIN`]). Clients must resolve those names to the listener.
    pub domain: String,
}

/// Settings of the `gvisor` runtime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GvisorSettings {
    /// The runsc binary; default `runsc` from PATH.
    pub runsc: Option<PathBuf>,
    /// gVisor's platform (`systrap`, `ptrace`, `kvm`); default `systrap` where this runsc has
    /// it, else `ptrace`.
    pub platform: Option<String>,
}

/// The runtime a node uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// OCI containers through runc (the default: fast, a namespace/cgroup boundary).
    #[default]
    Runc,
    /// QEMU microvms: a VM boundary with its own kernel; KVM where usable, else TCG (slow).
    Qemu,
    /// QEMU when hardware KVM is usable and QEMU is installed, else runc.
    Auto,
    /// OCI containers on gVisor's application kernel through `runsc`: no hardware
    /// virtualisation needed; suspend keeps process memory.
    Gvisor,
}

impl RuntimeChoice {
    /// The runtime's name as nodes report it (`auto` is reported as `runc`, the runtime it
    /// picks without KVM).
    pub fn name(self) -> &'static str {
        match self {
            RuntimeChoice::Qemu => "qemu",
            RuntimeChoice::Gvisor => "gvisor",
            RuntimeChoice::Runc | RuntimeChoice::Auto => "runc",
        }
    }
}

impl std::str::FromStr for RuntimeChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "runc" => Ok(RuntimeChoice::Runc),
            "qemu" => Ok(RuntimeChoice::Qemu),
            "auto" => Ok(RuntimeChoice::Auto),
            "gvisor" => Ok(RuntimeChoice::Gvisor),
            other => Err(format!(
                "unknown runtime {other:?} (runc, qemu, gvisor or auto)"
            )),
        }
    }
}

/// Makes the runtime `cfg` asks for. VM state goes to `<data-dir>/qemu`, the guest kernel and
/// agent disks to `<cache-dir>/vm`.
fn make_runtime(
    cfg: &Config,
    data_dir: &Path,
    cache_dir: &Path,
) -> anyhow::Result<Arc<dyn Runtime>> {
    let qemu_cfg = QemuConfig::new(data_dir.join("qemu"), cache_dir.join("vm"));
    let choice = match cfg.runtime {
        RuntimeChoice::Auto
            if cove_runtime::qemu::kvm_usable()
                && cove_runtime::qemu::qemu_available(&qemu_cfg.qemu_binary) =>
        {
            RuntimeChoice::Qemu
        }
        RuntimeChoice::Auto => RuntimeChoice::Runc,
        other => other,
    };
    info!(runtime = ?choice, requested = ?cfg.runtime, "runtime chosen");
    Ok(match choice {
        RuntimeChoice::Qemu => Arc::new(QemuRuntime::new(qemu_cfg).context("qemu runtime")?),
        RuntimeChoice::Gvisor => {
            let gvisor = RuncRuntime::gvisor(cove_runtime::runc::GvisorConfig {
                runsc_binary: cfg
                    .gvisor
                    .runsc
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("runsc")),
                state_root: data_dir.join("runsc"),
                platform: cfg.gvisor.platform.clone(),
            })
            .context("gvisor runtime")?;
            info!(platform = ?gvisor.gvisor_platform(), "gVisor platform");
            Arc::new(gvisor)
        }
        _ => Arc::new(
            RuncRuntime::new(RuncConfig {
                runc_binary: cfg.runc.clone().unwrap_or_else(|| PathBuf::from("runc")),
                state_root: data_dir.join("runc"),
                // Debian's lxcfs location; one instance serves every sandbox of the machine.
                lxcfs_dir: lxcfs_on_path().then(|| PathBuf::from(LXCFS_DIR)),
                user_namespaces: cfg.user_namespaces.enabled.then(|| {
                    // Machine-wide, so servers on other data dirs never take the same range.
                    cove_runtime::runc::UserNamespaces::new(
                        cfg.user_namespaces.base,
                        cove_runtime::runc::USERNS_CLAIMS_DIR,
                    )
                }),
            })
            .context("runc runtime")?,
        ),
    })
}

/// Settings of sandbox lifecycle: where snapshots go, and how often the controller runs.
/// Every unset field takes its default.
#[derive(Debug, Clone, Default)]
pub struct LifecycleSettings {
    /// Snapshot store URL: `file:///path` or `s3://bucket/prefix` (S3 credentials, region and
    /// endpoint come from the usual `AWS_*` environment variables); default
    /// `<data-dir>/snapshots`.
    pub snapshot_store: Option<String>,
    /// How often the controller flushes activity, suspends idle sandboxes, ends expired ones
    /// and purges old records; default 5 s.
    pub controller_interval: Option<Duration>,
    /// How often the running server reconciles desired and actual state; default 30 s.
    pub reconcile_interval: Option<Duration>,
    /// How often running sandboxes' guest agents are pinged (a dead or hung one is marked
    /// `degraded` and repaired); default 5 s.
    pub agent_check_interval: Option<Duration>,
    /// How long each class of record is kept; default [`cove_control_plane::Retention::default`].
    pub retention: Option<cove_control_plane::Retention>,
    /// Incubating features turned off (`--disable-feature`: checkpoints, fork, export,
    /// volumes); default: every feature on.
    pub features: Features,
}

/// A started server.
pub struct Running {
    /// Bound management address.
    pub api_addr: SocketAddr,
    /// Bound data-plane address.
    pub data_plane_addr: SocketAddr,
    /// Bound E2B compatibility address, when served.
    pub e2b_addr: Option<SocketAddr>,
    /// Bound proxy listener of sandbox ports, when served.
    pub proxy_addr: Option<SocketAddr>,
    /// Bound node listener (where remote node agents join), when configured.
    pub node_addr: Option<SocketAddr>,
    /// The admin token when it was created by this start (also written to the token file).
    pub new_admin_token: Option<String>,
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    shutdown: tokio::sync::watch::Sender<bool>,
    controllers: Controllers,
    node: Option<Arc<NodeAgent>>,
    keep_network_on_stop: bool,
}

/// Who runs the controllers: this process alone, or the leader among replicas on a shared
/// store.
enum Controllers {
    /// The only process on its store.
    Single(Controller),
    /// One replica among others (PostgreSQL with remote nodes only).
    Replica(cove_control_plane::Replica),
}

impl Running {
    /// Stops accepting, lets in-flight requests finish (SSE streams are cut after 5 s), removes
    /// what the node prepared for sandbox networks (the ready pool's namespaces, the gateway
    /// namespace with its veths and nft table; running sandboxes keep their own namespace for
    /// the next start to adopt, and with [`NetworkSettings::keep_on_stop`] everything stays
    /// while a sandbox runs), returns.
    pub async fn shutdown(self) {
        match self.controllers {
            Controllers::Single(c) => c.stop().await,
            Controllers::Replica(r) => r.stop().await,
        }
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        if let Some(node) = self.node {
            node.close_network(self.keep_network_on_stop).await;
        }
    }
}

fn find_guest_agent(cfg: &Config) -> anyhow::Result<PathBuf> {
    let path = match &cfg.guest_agent {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("cannot locate the running executable")?
            .with_file_name("cove-guest-agent"),
    };
    if !path.is_file() {
        bail!(
            "guest agent binary not found at {} (build it with scripts/build-guest-agent.sh and \
             pass --guest-agent)",
            path.display()
        );
    }
    Ok(path)
}

fn write_token_file(data_dir: &Path, token: &str) -> anyhow::Result<()> {
    write_secret_file(data_dir, ADMIN_TOKEN_FILE, token)
}

/// Writes `name` in the data dir atomically with mode 0600.
fn write_secret_file(data_dir: &Path, name: &str, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let path = data_dir.join(name);
    let tmp = data_dir.join(format!("{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// The node agent of this host as `cfg` asks for: its runtime, snapshot store and, when on,
/// the sandbox network (whose floor holds every address in `listening`).
pub(crate) async fn build_node_agent(
    cfg: &Config,
    data_dir: &Path,
    cache_dir: &Path,
    listening: &[SocketAddr],
) -> anyhow::Result<NodeAgent> {
    let guest_agent = find_guest_agent(cfg)?;
    // In-process or `cove node`, a runc with user namespaces works below this dir.
    if cfg.user_namespaces.enabled {
        searchable_by_all(data_dir)?;
    }
    let runtime = make_runtime(cfg, data_dir, cache_dir)?;
    let network = match (cfg.network.mode, network_unavailable(runtime.as_ref())) {
        (NetworkMode::Off, _) => {
            info!("sandbox networks off (--network off): sandboxes have loopback only");
            None
        }
        (NetworkMode::Auto, Some(why)) => {
            info!(reason = %why, "sandbox networks off: sandboxes have loopback only");
            None
        }
        (NetworkMode::On, Some(why)) => bail!("--network on, but {why}"),
        (_, None) => Some(network_config(&cfg.network, data_dir, listening)?),
    };
    let mut node = NodeAgent::new(
        NodeConfig {
            data_dir: data_dir.to_path_buf(),
            guest_agent,
            cache_dir: Some(cache_dir.to_path_buf()),
            mirror: None,
            snapshots: snapshot_store(&cfg.lifecycle, data_dir)?,
            // A store given by URL is what the nodes of a cluster share.
            share_releases: cfg.lifecycle.snapshot_store.is_some(),
            layer_cache_bytes: cfg
                .layer_cache_mib
                .unwrap_or(DEFAULT_LAYER_CACHE_MIB)
                .saturating_mul(1 << 20),
            command_output: cfg.command_output,
            oci_import_dir: cfg.oci_import.dir.clone(),
            oci_import_max_bytes: cfg
                .oci_import
                .max_mib
                .unwrap_or(DEFAULT_OCI_IMPORT_MAX_MIB)
                .saturating_mul(1 << 20),
        },
        runtime,
    );
    if let Some(net_cfg) = network {
        let prefix = net_cfg.prefix.clone();
        let pool = net_cfg.pool;
        node = node
            .with_network(net_cfg)
            .await
            .context("start the sandbox network gateway")?;
        info!(%prefix, %pool, "sandbox networks on");
    }

    Ok(node)
}

/// Adds search permission (`o+x`, not read) to `dir`: with user namespaces a sandbox's runc
/// runs as the sandbox's unprivileged host ids and must reach its rootfs below the data dir (a
/// `mktemp -d` data dir is 0700 otherwise, and every create fails with EACCES).
fn searchable_by_all(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(dir)?.permissions();
    if perm.mode() & 0o001 == 0 {
        perm.set_mode(perm.mode() | 0o001);
        std::fs::set_permissions(dir, perm)
            .with_context(|| format!("make data dir {} searchable", dir.display()))?;
    }
    Ok(())
}

/// Starts the server: opens the store, reconciles, binds both listeners, serves until
/// [`Running::shutdown`].
pub async fn start(cfg: Config) -> anyhow::Result<Running> {
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("create data dir {}", cfg.data_dir.display()))?;
    let data_dir = cfg.data_dir.canonicalize()?;
    let keep_network_on_stop = cfg.network.keep_on_stop;
    let store: Arc<dyn Store> = match &cfg.store {
        Some(url) => cove_store::open(url).await,
        None => SqliteStore::open(&data_dir.join("store.db"))
            .await
            .map(|s| Arc::new(s) as Arc<dyn Store>),
    }
    .context("open the store")?;
    info!(backend = store.backend(), "store opened");

    let cache_dir = cfg
        .cache_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("cache"));

    let api_listener = TcpListener::bind(cfg.listen)
        .await
        .context("bind the API listener")?;
    let dp_listener = TcpListener::bind(cfg.data_plane_listen)
        .await
        .context("bind the data-plane listener")?;
    let e2b_tls = match cfg.e2b.as_ref().and_then(|e| e.tls.as_ref()) {
        Some(files) => Some(tls::acceptor("e2b-tls", files)?),
        None => None,
    };
    let e2b_listener = match &cfg.e2b {
        Some(e) => Some(
            TcpListener::bind(e.listen)
                .await
                .context("bind the E2B listener")?,
        ),
        None => None,
    };
    let proxy_listener = match &cfg.proxy {
        Some(p) => Some(
            TcpListener::bind(p.listen)
                .await
                .context("bind the proxy listener")?,
        ),
        None => None,
    };
    let mut listening = vec![api_listener.local_addr()?, dp_listener.local_addr()?];
    if let Some(l) = &e2b_listener {
        listening.push(l.local_addr()?);
    }
    if let Some(l) = &proxy_listener {
        listening.push(l.local_addr()?);
    }

    let node_listener = match &cfg.cluster {
        Some(c) => Some(
            TcpListener::bind(c.node_listen)
                .await
                .context("bind the node listener")?,
        ),
        None => None,
    };
    if let Some(l) = &node_listener {
        listening.push(l.local_addr()?);
    }
    let local_node = cfg.cluster.as_ref().is_none_or(|c| c.local_node);
    let node = if local_node {
        Some(Arc::new(
            build_node_agent(&cfg, &data_dir, &cache_dir, &listening).await?,
        ))
    } else {
        None
    };
    let api_addr = api_listener.local_addr()?;
    let data_plane_addr = dp_listener.local_addr()?;

    let mut cp_cfg = ControlPlaneConfig::new(
        cfg.public_data_plane_url
            .clone()
            .unwrap_or_else(|| format!("http://{data_plane_addr}")),
    );
    cp_cfg.runtime = match &node {
        Some(n) => cove_node_api::NodeLifecycle::capabilities(n.as_ref()).runtime,
        None => cfg.runtime.name().to_string(),
    };
    let life = &cfg.lifecycle;
    cp_cfg.controller_interval = life
        .controller_interval
        .unwrap_or(cp_cfg.controller_interval);
    cp_cfg.reconcile_interval = life.reconcile_interval.unwrap_or(cp_cfg.reconcile_interval);
    if let Some(every) = life.agent_check_interval {
        cp_cfg.agent_repair.interval = every;
    }
    cp_cfg.retention = life.retention.unwrap_or(cp_cfg.retention);
    cp_cfg.metrics = metrics::recorder();
    cp_cfg.secrets_key = Some(secrets_key(&data_dir)?);
    if let Some(mib) = cfg.default_disk_mib {
        let (lo, hi) = cove_domain::resources::DISK_MIB;
        if !(lo..=hi).contains(&mib) {
            bail!("the default disk size {mib} MiB is not between {lo} and {hi} MiB");
        }
    }
    cp_cfg.default_disk_mib = cfg.default_disk_mib;
    cp_cfg.features = life.features.clone();
    let proxy_addr = match &proxy_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };
    if let (Some(addr), Some(p)) = (proxy_addr, &cfg.proxy) {
        let domain = p.domain.trim_matches('.').to_ascii_lowercase();
        if domain.is_empty()
            || !domain
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            bail!("the proxy domain {:?} is not a domain name", p.domain);
        }
        cp_cfg.ports_proxy = Some(cove_control_plane::ports::PortsProxy {
            domain,
            port: addr.port(),
        });
    }
    // Replicas share a PostgreSQL store and reach only remote nodes: each serves the API, the
    // leader runs the controllers and finishes what a replica that died left (`ha.rs`).
    let replicated = store.shared() && !local_node;
    if let Some(settings) = &cfg.cluster {
        cp_cfg.operation_lease = settings.operation_lease;
    }
    let mut cluster_tasks = None;
    let cp = match (&cfg.cluster, &node) {
        (None, Some(node)) => ControlPlane::new(store, node.clone(), cp_cfg),
        (None, None) => bail!("a server without remote nodes needs its own node"),
        (Some(settings), node) => {
            let joined = cluster::start(
                settings,
                &cp_cfg.runtime,
                &data_dir,
                node.clone(),
                replicated.then(|| store.clone()),
            )
            .await?;
            let cp = ControlPlane::with_placement(store, joined.cluster.clone(), cp_cfg);
            cluster_tasks = Some(joined);
            cp
        }
    };
    // Start-up is no tenant's request: it runs as the server (`orgs::scope`).
    let new_admin_token = as_system(cp.bootstrap_admin_token()).await?;
    if let Some(token) = &new_admin_token {
        write_token_file(&data_dir, token)?;
        info!(path = %data_dir.join(ADMIN_TOKEN_FILE).display(), "admin token created");
    }
    let controllers = if replicated {
        // No start-up reconciliation: other replicas may be running operations right now;
        // the leader's periodic reconciliation and takeovers settle what needs settling.
        info!(replica = %cp.replica_id(), "starting as one replica on a shared store");
        Controllers::Replica(cove_control_plane::Replica::start(cp.clone()))
    } else {
        as_system(cp.reconcile()).await?;
        Controllers::Single(Controller::start(cp.clone()))
    };

    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    // One set of connection caps for every listener of the process (`listen.rs`).
    let admission = listen::Admission::new(cfg.listen_limits);
    if let Some(sampled) = node.clone() {
        let mut stop = rx.clone();
        tasks.push(tokio::spawn(async move {
            sampled
                .sample_metrics(async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                })
                .await;
            Ok(())
        }));
    }
    let node_addr = match (node_listener, cluster_tasks) {
        (Some(listener), Some(joined)) => {
            let addr = listener.local_addr()?;
            tasks.extend(joined.serve(listener, &admission, rx.clone())?);
            Some(addr)
        }
        _ => None,
    };
    let surfaces = other_surfaces(api_addr)?;
    let mut listeners = vec![
        (
            "api",
            api_listener,
            cove_http::management_router_with(cp.clone(), surfaces),
            None,
        ),
        (
            "data-plane",
            dp_listener,
            cove_http::data_plane_router(cp.clone()),
            None,
        ),
    ];
    if let Some(listener) = proxy_listener {
        listeners.push(("proxy", listener, cove_http::ports_router(cp.clone()), None));
    }
    let mut e2b_addr = None;
    if let (Some(listener), Some(settings)) = (e2b_listener, &cfg.e2b) {
        let port = listener.local_addr()?.port();
        let e2b_cfg = cove_e2b_compat::E2bConfig {
            domain: settings.domain.clone(),
            answered_domain: Some(cove_e2b_compat::sandbox_domain(
                settings.domain.as_deref(),
                port,
            )),
            token_secret: e2b_secret(&data_dir)?,
        };
        let router = cove_e2b_compat::router(cp.clone(), e2b_cfg);
        e2b_addr = Some(listener.local_addr()?);
        listeners.push(("e2b", listener, router, e2b_tls));
    }
    for (name, listener, router, tls) in listeners {
        tasks.push(tokio::spawn(listen::serve_http(
            name,
            listener,
            router,
            tls,
            admission.clone(),
            rx.clone(),
        )));
    }
    info!(%api_addr, %data_plane_addr, e2b_addr = ?e2b_addr, proxy_addr = ?proxy_addr,
        node_addr = ?node_addr,
        data_dir = %data_dir.display(), "cove server listening");
    Ok(Running {
        api_addr,
        data_plane_addr,
        e2b_addr,
        proxy_addr,
        node_addr,
        new_admin_token,
        tasks,
        shutdown,
        controllers,
        node,
        keep_network_on_stop,
    })
}

/// The surfaces served beside the REST API on its listener, each a client of that API: the
/// MCP server at `/mcp` (streamable HTTP; each request's bearer token scopes its tools) and the
/// web console at `/console/` (static assets; the page signs in to the API with a token).
fn other_surfaces(api_addr: SocketAddr) -> anyhow::Result<axum::Router> {
    // The API as seen from this host: an unspecified listen address is reached on loopback.
    let mut own = api_addr;
    if own.ip().is_unspecified() {
        own.set_ip(match own.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let mcp = cove_mcp::http::router(format!("http://{own}")).context("the MCP endpoint")?;
    Ok(mcp.merge(cove_console::router()))
}

/// Name of the file in the data dir holding the key that seals secret values in the store.
pub const SECRETS_KEY_FILE: &str = "secrets.key";

/// The key secret values are sealed with: `<data-dir>/secrets.key` (mode 0600, 32 random bytes
/// as hex), created on first use. Losing it makes stored secrets unreadable (their sandboxes
/// fail to wake).
fn secrets_key(data_dir: &Path) -> anyhow::Result<cove_control_plane::network::SecretsKey> {
    let path = data_dir.join(SECRETS_KEY_FILE);
    let hex = match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
                .context("read /dev/urandom")?;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            write_secret_file(data_dir, SECRETS_KEY_FILE, &hex)?;
            hex
        }
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect();
    let bytes = bytes
        .filter(|b| b.len() == 32)
        .with_context(|| format!("{} must hold 64 hex digits", path.display()))?;
    cove_control_plane::network::SecretsKey::new(&bytes).map_err(anyhow::Error::msg)
}

/// The secret E2B access tokens derive from: `<data-dir>/e2b.secret` (mode 0600), created
/// with 32 random bytes on first use, so tokens stay valid across restarts.
fn e2b_secret(data_dir: &Path) -> anyhow::Result<Vec<u8>> {
    let path = data_dir.join(E2B_SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) if s.trim().len() >= 32 => return Ok(s.trim().as_bytes().to_vec()),
        Ok(_) => bail!(
            "{} is too short; remove it to make a new one",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    }
    let secret = cove_control_plane::auth::new_token();
    write_secret_file(data_dir, E2B_SECRET_FILE, &secret)?;
    Ok(secret.into_bytes())
}

/// Where lxcfs serves the sandboxes' `/proc` views (Debian's default mount point).
pub const LXCFS_DIR: &str = "/var/lib/lxcfs";

/// Whether an `lxcfs` binary is on `PATH` (sandboxes then see their own limits in `/proc`).
fn lxcfs_on_path() -> bool {
    on_path("lxcfs")
}

/// The snapshot store of the settings: the URL given, or `<data-dir>/snapshots`. S3 settings
/// come from the `AWS_*` environment variables (read here, at the composition root; names are
/// object_store's, case-insensitive: `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_REGION`, ...).
fn snapshot_store(life: &LifecycleSettings, data_dir: &Path) -> anyhow::Result<SnapshotStore> {
    match &life.snapshot_store {
        None => {
            SnapshotStore::local(&data_dir.join("snapshots")).context("open the snapshot store")
        }
        Some(url) => {
            let aws = std::env::vars().filter(|(k, _)| k.starts_with("AWS_"));
            SnapshotStore::from_url(url, aws).context("open the snapshot store")
        }
    }
}

/// Runs the server until SIGTERM or SIGINT, then shuts down gracefully. Sandboxes keep running
/// and are re-adopted at the next start.
pub async fn run(cfg: Config) -> anyhow::Result<()> {
    let running = start(cfg).await?;
    println!(
        "cove server: API http://{}  data plane http://{}",
        running.api_addr, running.data_plane_addr
    );
    if let Some(addr) = running.e2b_addr {
        println!("cove server: E2B compatibility http://{addr}");
    }
    if let Some(addr) = running.proxy_addr {
        println!(
            "cove server: sandbox ports http://{{port}}-{{sandbox id}}.<domain>:{}",
            addr.port()
        );
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// Installs the tracing subscriber ([`log_filter`]) on stderr.
pub fn init_tracing() {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    // A log that cannot be written (stderr on a full disk) loses the line: reporting that
    // would print to the same stderr, and `eprintln!` panics when it fails, which killed the
    // request being logged (its client saw the connection drop instead of a 507).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .try_init();
}

/// The log filter of `cove server` and `cove node`: `rust_log` (the `RUST_LOG` variable),
/// default `info`, with `rustls` held to errors unless `rust_log` names it. rustls warns about
/// each malformed TLS message with the peer's bytes in the line (an illegal SNI name verbatim,
/// up to 64 KiB), and a sandbox is such a peer: its handshakes with the egress gateway would
/// put unbounded sandbox-chosen text in the node's log. The gateway logs those itself,
/// rate-limited per sandbox (`cove_network::warn`).
pub fn log_filter(rust_log: Option<&str>) -> tracing_subscriber::EnvFilter {
    let rust_log = rust_log.unwrap_or("info");
    let mut filter = tracing_subscriber::EnvFilter::try_new(rust_log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if !rust_log.contains("rustls") {
        if let Ok(d) = "rustls=error".parse() {
            filter = filter.add_directive(d);
        }
    }
    filter
}
