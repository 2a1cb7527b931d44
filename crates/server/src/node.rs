//! `cove node`: a node agent as its own process. It serves the node contract over gRPC
//! ([`cove_node_rpc::NodeService`]) and joins a control plane, then sends a heartbeat (its
//! capacity, runtime, cached releases and sandboxes) every interval the control plane asked
//! for; it joins again when the control plane no longer knows it (a restart, a loss).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cove_node_agent::NodeAgent;
use cove_node_api::{NodeApi, NodeReport};
use cove_node_rpc::tls::TlsIdentity;
use cove_node_rpc::{ClusterClient, NodeService};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::Config;

/// Settings of `cove node` beyond the node agent's own (data dir, runtime, snapshot store,
/// network: those come from [`Config`]).
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Unique name of the node in the cluster (default: the host name).
    pub name: String,
    /// The control plane's node listener (`https://host:port`; the link is always TLS, so
    /// `http://` means the same).
    pub control_plane: String,
    /// The join token the control plane was started with.
    pub join_token: String,
    /// Where this node serves the node contract (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The URL the control plane calls this node at (default: `https://<listen address>`).
    pub advertise: Option<String>,
}

/// A started node agent.
pub struct RunningNode {
    /// Bound address of its node service.
    pub addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    node: Arc<NodeAgent>,
    keep_network_on_stop: bool,
}

impl RunningNode {
    /// Stops serving and sending heartbeats; sandboxes keep running (a node that starts again
    /// on the same data dir reports them, and the control plane reconciles). What the node
    /// prepared for sandbox networks is removed as `Running::shutdown` says.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        self.node.close_network(self.keep_network_on_stop).await;
    }
}

/// Starts a node agent: builds it as `cfg` asks, serves it on `settings.listen`, and joins
/// the control plane in the background (retrying until it answers).
///
/// # Errors
/// The data dir, the runtime, the guest agent binary, the network or the listener cannot be
/// set up.
pub async fn start_node(cfg: Config, settings: NodeSettings) -> anyhow::Result<RunningNode> {
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("create data dir {}", cfg.data_dir.display()))?;
    let data_dir = cfg.data_dir.canonicalize()?;
    let cache_dir: PathBuf = cfg
        .cache_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("cache"));
    let listener = TcpListener::bind(settings.listen)
        .await
        .context("bind the node listener")?;
    let addr = listener.local_addr()?;
    let node = Arc::new(crate::build_node_agent(&cfg, &data_dir, &cache_dir, &[addr]).await?);
    let swept = cove_node_api::NodeLifecycle::sweep_snapshots(node.as_ref()).await;
    if let Err(e) = swept {
        warn!(error = %e, "cannot sweep half-written snapshots");
    }
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();

    // A new certificate each start: the control plane pins the one sent in the latest join.
    let identity = TlsIdentity::generate().context("the node link's TLS certificate")?;
    let tls = identity.server_config()?;
    let service = NodeService::new(node.clone() as Arc<dyn NodeApi>, &settings.join_token);
    let mut stop = rx.clone();
    let bounds = crate::listen::node_link_bounds(&crate::listen::Admission::new(cfg.listen_limits));
    tasks.push(tokio::spawn(async move {
        let incoming = cove_node_rpc::transport::tls_incoming(listener, tls, bounds);
        let served = tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            warn!(error = %e, "node service stopped");
        }
    }));

    let sampled = node.clone();
    let mut stop = rx.clone();
    tasks.push(tokio::spawn(async move {
        sampled
            .sample_metrics(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
    }));

    // A malformed control-plane URL is an error now, not a retry loop.
    cove_node_rpc::transport::endpoint(&settings.control_plane).map_err(anyhow::Error::msg)?;
    let advertise = settings
        .advertise
        .clone()
        .unwrap_or_else(|| format!("https://{addr}"));
    let member = Member {
        control_plane: settings.control_plane.clone(),
        token: settings.join_token.clone(),
        name: settings.name.clone(),
        advertise,
        certificate: identity.cert.clone(),
    };
    let agent = node.clone();
    tasks.push(tokio::spawn(async move {
        membership(member, agent, rx).await;
    }));
    info!(%addr, node = %settings.name, control_plane = %settings.control_plane, "cove node serving");
    Ok(RunningNode {
        addr,
        shutdown,
        tasks,
        node,
        keep_network_on_stop: cfg.network.keep_on_stop,
    })
}

/// What a node joins with.
struct Member {
    control_plane: String,
    token: String,
    name: String,
    advertise: String,
    certificate: rustls::pki_types::CertificateDer<'static>,
}

/// Learns the control plane's certificate (proven by the join token), joins, then sends
/// heartbeats; discovers and joins again when the control plane does not know the node or
/// cannot be reached (it may have a new certificate after its data dir was replaced).
async fn membership(m: Member, node: Arc<NodeAgent>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut every = Duration::from_secs(1);
    let mut client: Option<ClusterClient> = None;
    let mut failures = 0u32;
    loop {
        match (NodeReport::read(node.as_ref()).await, &client) {
            (Err(e), _) => warn!(error = %e, "cannot read the node's report"),
            (Ok(report), None) => match join(&m, &report).await {
                Ok((joined, interval)) => {
                    info!(node = %m.name, "joined the control plane (TLS, certificate pinned)");
                    every = interval;
                    client = Some(joined);
                    failures = 0;
                }
                Err(e) => warn!(node = %m.name, error = %e, "cannot join the control plane"),
            },
            (Ok(report), Some(c)) => match c.heartbeat(&m.name, &report).await {
                Ok(Some(_)) => failures = 0,
                Ok(None) => {
                    info!(node = %m.name, "the control plane does not know this node; joining again");
                    client = None;
                    continue;
                }
                Err(e) => {
                    warn!(node = %m.name, error = %e, "heartbeat failed");
                    failures += 1;
                    // A few misses in a row: the control plane may be another one now.
                    if failures >= 3 {
                        client = None;
                    }
                }
            },
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// One discover + join.
async fn join(
    m: &Member,
    report: &NodeReport,
) -> Result<(ClusterClient, Duration), cove_node_rpc::MembershipError> {
    let pinned = ClusterClient::discover(&m.control_plane, &m.token).await?;
    let client = ClusterClient::new(&m.control_plane, &m.token, pinned).await?;
    let answer = client
        .join(&m.name, &m.advertise, &m.certificate, report)
        .await?;
    Ok((client, answer.heartbeat_interval))
}

/// Runs a node agent until SIGTERM or SIGINT.
///
/// # Errors
/// As [`start_node`].
pub async fn run_node(cfg: Config, settings: NodeSettings) -> anyhow::Result<()> {
    let running = start_node(cfg, settings).await?;
    println!("cove node: serving on {}", running.addr);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    info!("shutting down");
    running.shutdown().await;
    Ok(())
}
