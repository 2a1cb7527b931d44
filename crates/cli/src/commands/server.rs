//! `cove server`: runs the Cove server in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use cove_server::Retention;

use crate::GlobalArgs;

/// Options of `cove server` (the data directory is the global `--data-dir`).
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The store: `sqlite://<path>` or `postgres://user:pass@host:port/db` (unix socket:
    /// `postgres://user@localhost/db?host=/run/postgresql`; own schema:
    /// `&options[search_path]=cove`) [default: sqlite://<DATA_DIR>/store.db].
    #[arg(long, value_name = "URL", env = "COVE_STORE")]
    pub store: Option<String>,
    /// Address of the management API.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: SocketAddr,
    /// Address of the data plane (command output and stdin).
    #[arg(long, default_value = "127.0.0.1:7701")]
    pub data_plane_listen: SocketAddr,
    /// Static guest agent binary (default: `cove-guest-agent` beside this executable).
    #[arg(long, value_name = "PATH")]
    pub guest_agent: Option<PathBuf>,
    /// Build cache of release root filesystems (default: `<DATA_DIR>/cache`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of the step cache of builds from a template file (`<DATA_DIR>/layers`), in MiB:
    /// after a build the least recently used steps go until it fits (never those of the build
    /// that just ran; releases keep their own copies).
    #[arg(long, value_name = "MIB", default_value_t = cove_server::DEFAULT_LAYER_CACHE_MIB)]
    pub layer_cache_mib: u64,
    /// Directory of OCI image archives that `FROM oci-archive:NAME` may name: NAME is a plain
    /// relative name there, opened without following links, regular files only (off when
    /// unset: such builds fail with `oci_import_disabled`).
    #[arg(long, value_name = "DIR")]
    pub oci_import_dir: Option<PathBuf>,
    /// Largest image archive imported from `--oci-import-dir`, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = cove_server::DEFAULT_OCI_IMPORT_MAX_MIB)]
    pub oci_import_max_mib: u64,
    /// The `runc` binary (default: `runc` in PATH).
    #[arg(long, value_name = "PATH")]
    pub runc: Option<PathBuf>,
    /// The `runsc` binary of the `gvisor` runtime (default: `runsc` in PATH).
    #[arg(long, value_name = "PATH")]
    pub runsc: Option<PathBuf>,
    /// gVisor's platform: `systrap`, `ptrace` or `kvm` (default: `systrap` where this runsc
    /// has it, else `ptrace`).
    #[arg(long, value_name = "PLATFORM", value_parser = ["systrap", "ptrace", "kvm"])]
    pub runsc_platform: Option<String>,
    /// How sandboxes are isolated: `runc` (containers), `qemu` (microvms with their own kernel;
    /// KVM where usable, else the much slower TCG), `gvisor` (containers on gVisor's
    /// application kernel, `runsc`), or `auto` (qemu when KVM is usable).
    #[arg(long, value_name = "RUNTIME", default_value = "runc")]
    pub runtime: cove_server::RuntimeChoice,
    /// Data-plane base URL given to clients in attachments, when they reach the data plane
    /// through another address such as a proxy (default: `http://<data-plane address>`).
    #[arg(long, value_name = "URL")]
    pub public_data_plane_url: Option<String>,
    /// Where suspended sandboxes are kept: `file:///path` or `s3://bucket/prefix` (S3 settings
    /// from the usual `AWS_*` environment variables) [default: <DATA_DIR>/snapshots].
    #[arg(long, value_name = "URL")]
    pub snapshot_store: Option<String>,
    /// How often the controller runs (idle suspends, TTL deletes, activity flush), in
    /// milliseconds [default: 5000].
    #[arg(long, value_name = "MS")]
    pub controller_interval_ms: Option<u64>,
    /// How often running sandboxes' guest agents are pinged, in milliseconds; a dead or hung
    /// agent makes its sandbox `degraded` and the node repairs it [default: 5000].
    #[arg(long, value_name = "MS")]
    pub agent_check_interval_ms: Option<u64>,
    /// Seconds finished operations and their logs are kept (0: forever).
    #[arg(long, value_name = "S", default_value_t = secs(Retention::default().operations))]
    pub retention_operations_s: u64,
    /// Seconds events (`GET /v1/events`) are kept (0: forever).
    #[arg(long, value_name = "S", default_value_t = secs(Retention::default().events))]
    pub retention_events_s: u64,
    /// Seconds an ended command's output and id are kept in a running sandbox (0: until it is
    /// forgotten or its sandbox deleted).
    #[arg(long, value_name = "S", default_value_t = secs(Retention::default().commands))]
    pub retention_commands_s: u64,
    /// Seconds a sandbox may stay suspended (unchanged) before it is deleted with its snapshot
    /// (0: kept until deleted).
    #[arg(long, value_name = "S", default_value_t = secs(Retention::default().snapshots))]
    pub retention_snapshots_s: u64,
    /// Seconds an audit record (`GET /v1/audit`) is kept (0: forever).
    #[arg(long, value_name = "S", default_value_t = secs(Retention::default().audit))]
    pub retention_audit_s: u64,
    /// Bytes of each command's output its sandbox's agent keeps in memory before spilling to
    /// the node's disk.
    #[arg(long, value_name = "BYTES", default_value_t = cove_server::OutputLimits::default().memory_bytes)]
    pub output_memory_bytes: u64,
    /// Bytes of each command's output kept at most; a longer output keeps its first
    /// CAP-TAIL bytes and its last TAIL bytes and reports `truncated`.
    #[arg(long, value_name = "BYTES", default_value_t = cove_server::OutputLimits::default().cap_bytes)]
    pub output_cap_bytes: u64,
    /// Bytes at the end of a long output always kept (default: half the cap).
    #[arg(long, value_name = "BYTES")]
    pub output_tail_bytes: Option<u64>,
    /// Serve the E2B-compatible API (E2B's REST API and envd on one port; point the E2B SDKs'
    /// `E2B_API_URL` and `E2B_SANDBOX_URL` at it), e.g. `127.0.0.1:7703`.
    #[arg(long, value_name = "ADDR")]
    pub e2b_listen: Option<SocketAddr>,
    /// Domain returned to E2B SDKs for `sandbox.get_host(port)` = `{port}-{id}.{domain}`
    /// (default `localhost:PORT` of --e2b-listen; `localhost` without a port gets that port).
    #[arg(long, value_name = "DOMAIN", requires = "e2b_listen")]
    pub e2b_domain: Option<String>,
    /// Serve the E2B listener over TLS with this certificate chain (PEM, leaf first), e.g. a
    /// wildcard certificate for `*.DOMAIN` and `DOMAIN` of `--e2b-domain`, so the SDKs' default
    /// `https://` URLs work. Needs `--e2b-tls-key`.
    #[arg(long, value_name = "PEM", requires_all = ["e2b_listen", "e2b_tls_key"])]
    pub e2b_tls_cert: Option<PathBuf>,
    /// The private key of `--e2b-tls-cert` (PEM).
    #[arg(long, value_name = "PEM", requires = "e2b_tls_cert")]
    pub e2b_tls_key: Option<PathBuf>,
    /// Serve sandbox ports by host name, `{port}-{sandbox id}.{domain}` (a browser on this
    /// machine reaches `http://8000-sb-….localhost:7704/`); `off`: not served.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:7704", value_parser = parse_proxy_listen)]
    pub proxy_listen: ProxyListen,
    /// Domain of the proxy listener's host names (they must resolve to it; browsers resolve
    /// `*.localhost` to loopback).
    #[arg(long, value_name = "DOMAIN", default_value = cove_server::DEFAULT_PROXY_DOMAIN)]
    pub proxy_domain: String,
    /// Sandbox networks behind the egress gateway: `on`, `off` (loopback only), or `auto` (on
    /// when running as root with `ip` and `nft` and the runc runtime).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub network: cove_server::NetworkMode,
    /// A user namespace per runc sandbox, its root an unprivileged host id range of its own
    /// (`on`), or sandboxes sharing the host's ids (`off`). With `on` the server refuses to
    /// start where the kernel cannot idmap the releases (the error says so).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = crate::commands::server::parse_on_off)]
    pub user_namespaces: bool,
    /// First host uid/gid of the sandboxes' ranges (65536 ids each, one per live sandbox).
    #[arg(long, value_name = "ID", default_value_t = cove_server::UserNamespaceSettings::default().base)]
    pub userns_base: u32,
    /// Sandbox address pool (a /16 to /29 no host route overlaps) [default: 10.239.0.0/16].
    #[arg(long, value_name = "CIDR")]
    pub network_pool: Option<ipnet::Ipv4Net>,
    /// Name prefix of the node's network namespaces (1-8 of [a-z0-9]) [default: from the data
    /// dir].
    #[arg(long, value_name = "PREFIX")]
    pub network_prefix: Option<String>,
    /// At stop, leave the network gateway's namespace and the ready pool in place while
    /// sandboxes run (by default a stop removes everything it prepared for sandbox networks;
    /// running sandboxes keep their own namespace, which the next start adopts either way).
    #[arg(long)]
    pub keep_network_on_stop: bool,
    /// PEM file of CAs every sandbox and template build trusts besides its own bundle (a
    /// network that inspects TLS): added to the system bundle, with SSL_CERT_FILE,
    /// REQUESTS_CA_BUNDLE, PIP_CERT, CURL_CA_BUNDLE and NODE_EXTRA_CA_CERTS pointing at it.
    #[arg(long, value_name = "PATH")]
    pub sandbox_ca_file: Option<std::path::PathBuf>,
    /// HTTP CONNECT proxy the egress gateway sends every allowed connection through
    /// (`http://[user:password@]host:port`); DNS still goes to the host's resolver.
    #[arg(long, value_name = "URL")]
    pub upstream_proxy: Option<cove_server::UpstreamProxy>,
    /// Size in MiB of the own disk (a sparse ext4 image; `df` in the sandbox shows it) of every
    /// sandbox whose create names no `resources.disk_mib`; 0: no default, such sandboxes write
    /// to the node's disk without a limit.
    #[arg(long, value_name = "MIB", default_value_t = cove_server::DEFAULT_DISK_MIB)]
    pub default_disk_mib: u64,
    /// Turn off incubating features, comma-separated: `checkpoints` (checkpoints, rollback,
    /// creates from a checkpoint), `fork`, `export` (checkpoint archives), `volumes`
    /// (persistent volumes). Calls to a disabled feature answer 403
    /// `feature_disabled`, for every org (`cove org features` turns them off for one org).
    #[arg(long, value_name = "LIST", value_parser = cove_server::Features::disabling)]
    pub disable_feature: Option<cove_server::Features>,
    /// Let remote node agents join (`cove node --join-token`) with this secret; without it the
    /// server runs its one in-process node.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "COVE_JOIN_TOKEN",
        hide_env_values = true
    )]
    pub join_token: Option<String>,
    /// Where remote node agents join (gRPC).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:7702",
        requires = "join_token"
    )]
    pub node_listen: SocketAddr,
    /// With remote nodes: do not run an in-process node (every sandbox runs on a remote node).
    #[arg(long, requires = "join_token")]
    pub no_local_node: bool,
    /// With remote nodes: a node without a heartbeat for this long is `lost` and its running
    /// sandboxes `failed (node_lost)`, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 10_000,
        requires = "join_token"
    )]
    pub heartbeat_timeout_ms: u64,
    /// With remote nodes: how often nodes send heartbeats, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 2_000,
        requires = "join_token"
    )]
    pub heartbeat_interval_ms: u64,
    /// With remote nodes and a PostgreSQL store shared by several replicas: how long a
    /// replica's lease on an operation it runs holds without renewal, in milliseconds. When a
    /// replica dies, the leader takes its operations over once their leases ran out.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 10_000,
        requires = "join_token"
    )]
    pub operation_lease_ms: u64,
    /// Connection caps and timeouts of every listener.
    #[command(flatten)]
    pub listen_limits: ListenArgs,
}

/// Bounds of every listener of the process (API with console and MCP, data plane, E2B, port
/// proxy, node link): connections over either cap are closed at once.
#[derive(Debug, Clone, Args)]
pub struct ListenArgs {
    /// Open connections over all listeners of the process.
    #[arg(long, value_name = "N", default_value_t = cove_server::listen::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Open connections from one peer (an IPv4 address or an IPv6 /64), over all listeners.
    #[arg(long, value_name = "N", default_value_t = cove_server::listen::DEFAULT_MAX_CONNECTIONS_PER_PEER)]
    pub max_connections_per_peer: usize,
    /// Seconds a client has to send a request's head (and the node link its TLS handshake),
    /// counted from when the server starts waiting for it.
    #[arg(long, value_name = "S", default_value_t = cove_server::listen::DEFAULT_HEADER_TIMEOUT.as_secs())]
    pub listen_header_timeout_s: u64,
    /// Seconds a connection with no request in flight stays open (the node link: sending
    /// nothing, at least 30).
    #[arg(long, value_name = "S", default_value_t = cove_server::listen::DEFAULT_IDLE_TIMEOUT.as_secs())]
    pub listen_idle_timeout_s: u64,
}

impl ListenArgs {
    /// The limits these flags set (a zero becomes the smallest value that serves: 1).
    pub fn limits(&self) -> cove_server::ListenLimits {
        cove_server::ListenLimits {
            header_timeout: Duration::from_secs(self.listen_header_timeout_s.max(1)),
            idle_timeout: Duration::from_secs(self.listen_idle_timeout_s.max(1)),
            max_connections: self.max_connections.max(1),
            max_connections_per_peer: self.max_connections_per_peer.max(1),
        }
    }
}

impl ServerArgs {
    /// The retention flags (0: kept until the owner goes).
    fn retention(&self) -> Retention {
        let keep = |s: u64| (s > 0).then(|| Duration::from_secs(s));
        Retention {
            operations: keep(self.retention_operations_s),
            events: keep(self.retention_events_s),
            commands: keep(self.retention_commands_s),
            snapshots: keep(self.retention_snapshots_s),
            audit: keep(self.retention_audit_s),
        }
    }

    /// The server's configuration.
    pub fn config(&self, global: &GlobalArgs) -> cove_server::Config {
        cove_server::Config {
            data_dir: global.data_dir.clone(),
            store: self.store.clone(),
            listen: self.listen,
            data_plane_listen: self.data_plane_listen,
            guest_agent: self.guest_agent.clone(),
            cache_dir: self.cache_dir.clone(),
            layer_cache_mib: Some(self.layer_cache_mib),
            runc: self.runc.clone(),
            gvisor: cove_server::GvisorSettings {
                runsc: self.runsc.clone(),
                platform: self.runsc_platform.clone(),
            },
            runtime: self.runtime,
            public_data_plane_url: self.public_data_plane_url.clone(),
            lifecycle: cove_server::LifecycleSettings {
                snapshot_store: self.snapshot_store.clone(),
                controller_interval: self.controller_interval_ms.map(Duration::from_millis),
                agent_check_interval: self.agent_check_interval_ms.map(Duration::from_millis),
                retention: Some(self.retention()),
                features: self.disable_feature.clone().unwrap_or_default(),
                ..Default::default()
            },
            command_output: cove_server::OutputLimits {
                memory_bytes: self.output_memory_bytes,
                cap_bytes: self.output_cap_bytes,
                tail_bytes: self.output_tail_bytes,
            },
            proxy: match self.proxy_listen {
                ProxyListen::At(listen) => Some(cove_server::ProxySettings {
                    listen,
                    domain: self.proxy_domain.clone(),
                }),
                ProxyListen::Off => None,
            },
            e2b: self.e2b_listen.map(|listen| cove_server::E2bSettings {
                listen,
                domain: self.e2b_domain.clone(),
                tls: self
                    .e2b_tls_cert
                    .clone()
                    .zip(self.e2b_tls_key.clone())
                    .map(|(cert, key)| cove_server::tls::TlsFiles { cert, key }),
            }),
            network: cove_server::NetworkSettings {
                mode: self.network,
                prefix: self.network_prefix.clone(),
                pool: self.network_pool,
                upstream: None,
                keep_on_stop: self.keep_network_on_stop,
                sandbox_ca_file: self.sandbox_ca_file.clone(),
                upstream_proxy: self.upstream_proxy.clone(),
            },
            default_disk_mib: (self.default_disk_mib > 0).then_some(self.default_disk_mib),
            user_namespaces: cove_server::UserNamespaceSettings {
                enabled: self.user_namespaces,
                base: self.userns_base,
            },
            oci_import: cove_server::OciImportSettings {
                dir: self.oci_import_dir.clone(),
                max_mib: Some(self.oci_import_max_mib),
            },
            listen_limits: self.listen_limits.limits(),
            cluster: self
                .join_token
                .as_ref()
                .map(|token| cove_server::ClusterSettings {
                    local_node: !self.no_local_node,
                    heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms.max(100)),
                    heartbeat_timeout: Duration::from_millis(self.heartbeat_timeout_ms.max(200)),
                    operation_lease: Duration::from_millis(self.operation_lease_ms.max(500)),
                    ..cove_server::ClusterSettings::new(token.clone(), self.node_listen)
                }),
        }
    }
}

/// Runs the server until SIGINT or SIGTERM, logging to stderr (`RUST_LOG`, default `info`).
pub async fn run(global: &GlobalArgs, args: ServerArgs) -> anyhow::Result<()> {
    cove_server::init_tracing();
    cove_server::run(args.config(global)).await
}

/// `on` or `off` (`--user-namespaces`).
pub(crate) fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("expected on or off, not {other:?}")),
    }
}

/// `--proxy-listen`: an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyListen {
    /// Served at this address.
    At(SocketAddr),
    /// Not served.
    Off,
}

fn parse_proxy_listen(s: &str) -> Result<ProxyListen, String> {
    if s == "off" {
        return Ok(ProxyListen::Off);
    }
    s.parse()
        .map(ProxyListen::At)
        .map_err(|e| format!("{s:?}: {e} (an address such as 127.0.0.1:7704, or off)"))
}

/// A retention as its flag's seconds (0: kept until the owner goes).
fn secs(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Verb};

    #[test]
    fn server_flags_parse_with_defaults() {
        let cli = Cli::try_parse_from(["cove", "server", "--data-dir", "/tmp/d"]).expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        assert_eq!(args.listen.to_string(), "127.0.0.1:7700");
        assert_eq!(args.data_plane_listen.to_string(), "127.0.0.1:7701");
        assert_eq!(cli.global.data_dir.to_str(), Some("/tmp/d"));
        assert_eq!(args.retention(), super::Retention::default());

        let cli = Cli::try_parse_from([
            "cove",
            "server",
            "--listen",
            "0.0.0.0:80",
            "--data-plane-listen",
            "0.0.0.0:81",
            "--guest-agent",
            "/bin/ga",
            "--cache-dir",
            "/c",
            "--runc",
            "/bin/runc",
        ])
        .expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        assert_eq!(args.listen.port(), 80);
        assert_eq!(
            args.guest_agent.as_deref().and_then(|p| p.to_str()),
            Some("/bin/ga")
        );
        assert!(Cli::try_parse_from(["cove", "server", "--listen", "nope"]).is_err());

        let cli =
            Cli::try_parse_from(["cove", "server", "--disable-feature", "fork"]).expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        let features = args.config(&cli.global).lifecycle.features;
        assert!(!features.enabled(cove_server::Feature::Fork));
        assert!(features.enabled(cove_server::Feature::Checkpoints));
        assert!(Cli::try_parse_from(["cove", "server", "--disable-feature", "nope"]).is_err());
    }

    #[test]
    fn retention_flags_take_seconds_and_zero_keeps() {
        let cli = Cli::try_parse_from([
            "cove",
            "server",
            "--retention-operations-s",
            "0",
            "--retention-commands-s",
            "60",
            "--retention-snapshots-s",
            "3600",
        ])
        .expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        let r = args.retention();
        assert_eq!(r.operations, None, "0 keeps them");
        assert_eq!(r.events, super::Retention::default().events);
        assert_eq!(r.commands, Some(std::time::Duration::from_secs(60)));
        assert_eq!(r.snapshots, Some(std::time::Duration::from_secs(3600)));
    }

    #[test]
    fn store_flag_names_the_store_url() {
        let cli = Cli::try_parse_from(["cove", "server", "--store", "postgres://cove@db/cove"])
            .expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        assert_eq!(
            args.config(&cli.global).store.as_deref(),
            Some("postgres://cove@db/cove")
        );
        let cli = Cli::try_parse_from(["cove", "server"]).expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        assert_eq!(
            args.config(&cli.global).store,
            None,
            "default: the data dir's SQLite"
        );
    }
}
