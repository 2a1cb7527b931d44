//! `cove node`: run a node agent that joins a control plane (`cove node --control-plane URL
//! --join-token T`), or manage the nodes of one (`cove node ls|drain|ready`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use cove_api_types::Node;
use cove_client::Client;

use crate::{table, GlobalArgs};

/// `cove node ...`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NodeArgs {
    /// Manage the nodes of a control plane; without a subcommand, run a node agent.
    #[command(subcommand)]
    pub verb: Option<NodeVerb>,
    /// Run a node agent.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// The node management verbs.
#[derive(Debug, Subcommand)]
pub enum NodeVerb {
    /// List nodes: state, runtime, capacity, sandboxes, releases, last heartbeat.
    Ls(LsArgs),
    /// Stop placing sandboxes on a node (its sandboxes keep running).
    Drain(NameArgs),
    /// Let a drained or quarantined node take sandboxes again.
    Ready(NameArgs),
}

/// Options of `cove node ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A node name.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// Node name.
    pub name: String,
}

/// Options of a node agent (`cove node --control-plane URL --join-token T`).
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The control plane's node listener, e.g. `https://10.0.0.1:7702` (always TLS).
    #[arg(long, value_name = "URL")]
    pub control_plane: Option<String>,
    /// The join token the control plane was started with.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "COVE_JOIN_TOKEN",
        hide_env_values = true
    )]
    pub join_token: Option<String>,
    /// Unique name of this node [default: the host name].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Where this node serves the control plane (gRPC).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7710")]
    pub node_listen: SocketAddr,
    /// The URL the control plane calls this node at [default: http://NODE_LISTEN].
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,
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
    /// How sandboxes are isolated: `runc`, `qemu`, `gvisor` or `auto`.
    #[arg(long, value_name = "RUNTIME", default_value = "runc")]
    pub runtime: cove_server::RuntimeChoice,
    /// Where suspended sandboxes are kept; every node of a control plane must share it
    /// (`file:///shared/dir` or `s3://bucket/prefix`) so any node can wake any sandbox
    /// [default: <DATA_DIR>/snapshots].
    #[arg(long, value_name = "URL")]
    pub snapshot_store: Option<String>,
    /// Sandbox networks: `on`, `off` or `auto`.
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
    /// Sandbox address pool [default: 10.239.0.0/16].
    #[arg(long, value_name = "CIDR")]
    pub network_pool: Option<ipnet::Ipv4Net>,
    /// Name prefix of the node's network namespaces [default: from the data dir].
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
    /// Connection caps and timeouts of the node's listener.
    #[command(flatten)]
    pub listen_limits: crate::commands::server::ListenArgs,
}

impl AgentArgs {
    /// The node agent's configuration (the server-only fields are unused).
    fn config(&self, global: &GlobalArgs) -> cove_server::Config {
        let unused: SocketAddr = ([127, 0, 0, 1], 0).into();
        cove_server::Config {
            data_dir: global.data_dir.clone(),
            store: None,
            listen: unused,
            data_plane_listen: unused,
            guest_agent: self.guest_agent.clone(),
            cache_dir: self.cache_dir.clone(),
            layer_cache_mib: Some(self.layer_cache_mib),
            runc: self.runc.clone(),
            gvisor: cove_server::GvisorSettings {
                runsc: self.runsc.clone(),
                platform: self.runsc_platform.clone(),
            },
            runtime: self.runtime,
            public_data_plane_url: None,
            lifecycle: cove_server::LifecycleSettings {
                snapshot_store: self.snapshot_store.clone(),
                ..Default::default()
            },
            command_output: Default::default(),
            e2b: None,
            proxy: None,
            network: cove_server::NetworkSettings {
                mode: self.network,
                prefix: self.network_prefix.clone(),
                pool: self.network_pool,
                upstream: None,
                keep_on_stop: self.keep_network_on_stop,
                sandbox_ca_file: self.sandbox_ca_file.clone(),
                upstream_proxy: self.upstream_proxy.clone(),
            },
            cluster: None,
            user_namespaces: cove_server::UserNamespaceSettings {
                enabled: self.user_namespaces,
                base: self.userns_base,
            },
            oci_import: cove_server::OciImportSettings {
                dir: self.oci_import_dir.clone(),
                max_mib: Some(self.oci_import_max_mib),
            },
            // The control plane resolves disk sizes before a launch reaches the node.
            default_disk_mib: None,
            listen_limits: self.listen_limits.limits(),
        }
    }
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "node".into())
}

/// Runs a node agent until SIGINT or SIGTERM.
pub async fn run_agent(global: &GlobalArgs, args: AgentArgs) -> anyhow::Result<()> {
    let (Some(control_plane), Some(join_token)) =
        (args.control_plane.clone(), args.join_token.clone())
    else {
        anyhow::bail!(
            "a node agent needs --control-plane URL and --join-token TOKEN (or a subcommand: \
             ls, drain, ready)"
        );
    };
    cove_server::init_tracing();
    let cfg = args.config(global);
    let settings = cove_server::NodeSettings {
        name: args.name.unwrap_or_else(host_name),
        control_plane,
        join_token,
        listen: args.node_listen,
        advertise: args.advertise,
    };
    cove_server::run_node(cfg, settings).await
}

/// Runs a management verb.
pub async fn run(client: &Client, verb: NodeVerb) -> anyhow::Result<()> {
    match verb {
        NodeVerb::Ls(args) => {
            let list = client.nodes().await?;
            if args.json {
                crate::outln!("{}", serde_json::to_string_pretty(&list.nodes)?);
            } else {
                print(&list.nodes);
            }
        }
        NodeVerb::Drain(args) => print(&[client.drain_node(&args.name).await?]),
        NodeVerb::Ready(args) => print(&[client.ready_node(&args.name).await?]),
    }
    Ok(())
}

fn print(nodes: &[Node]) {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.name.clone(),
                n.state.to_string(),
                n.runtime.clone(),
                format!("{}cpu/{}MiB", n.cpus, n.memory_bytes / (1024 * 1024)),
                n.sandboxes.to_string(),
                n.releases.join(","),
                format!("{}ms", n.last_heartbeat_ms),
                n.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table::print(
        &[
            "NAME",
            "STATE",
            "RUNTIME",
            "SIZE",
            "SANDBOXES",
            "RELEASES",
            "HEARTBEAT",
            "REASON",
        ],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Verb};

    fn parse(args: &[&str]) -> (GlobalArgs, NodeArgs) {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Verb::Node(node) = cli.verb else {
            panic!("expected node")
        };
        (cli.global, node)
    }

    fn node_args(args: &[&str]) -> NodeArgs {
        parse(args).1
    }

    #[test]
    fn an_agent_and_the_management_verbs_parse() {
        let (global, n) = parse(&[
            "cove",
            "node",
            "--control-plane",
            "http://127.0.0.1:7702",
            "--join-token",
            "t",
            "--name",
            "n1",
            "--node-listen",
            "127.0.0.1:7711",
            "--network",
            "off",
            "--snapshot-store",
            "file:///shared",
        ]);
        assert!(n.verb.is_none());
        assert_eq!(n.agent.name.as_deref(), Some("n1"));
        assert_eq!(n.agent.node_listen.port(), 7711);
        let cfg = n.agent.config(&global);
        assert_eq!(
            cfg.lifecycle.snapshot_store.as_deref(),
            Some("file:///shared")
        );
        assert!(matches!(
            node_args(&["cove", "node", "ls", "--json"]).verb,
            Some(NodeVerb::Ls(LsArgs { json: true }))
        ));
        assert!(matches!(
            node_args(&["cove", "node", "drain", "n2"]).verb,
            Some(NodeVerb::Drain(NameArgs { name })) if name == "n2"
        ));
        assert!(Cli::try_parse_from(["cove", "node", "ls", "--join-token", "t"]).is_err());
    }

    #[test]
    fn server_cluster_flags_need_a_join_token() {
        let cli = Cli::try_parse_from([
            "cove",
            "server",
            "--join-token",
            "t",
            "--no-local-node",
            "--heartbeat-timeout-ms",
            "3000",
        ])
        .expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        let cluster = args.config(&cli.global).cluster.expect("cluster settings");
        assert!(!cluster.local_node);
        assert_eq!(cluster.heartbeat_timeout.as_millis(), 3000);
        assert_eq!(cluster.node_listen.port(), 7702);
        assert!(Cli::try_parse_from(["cove", "server", "--no-local-node"]).is_err());
        let cli = Cli::try_parse_from(["cove", "server"]).expect("parses");
        let Verb::Server(args) = cli.verb else {
            panic!("expected server")
        };
        assert!(
            args.config(&cli.global).cluster.is_none(),
            "one machine by default"
        );
    }
}
