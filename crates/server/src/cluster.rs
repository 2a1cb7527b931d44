//! The control plane's side of remote nodes: the node listener where node agents join over
//! gRPC with TLS ([`cove_node_rpc::ClusterService`]; the certificate is kept in the data dir,
//! `node-link.crt`/`node-link.key`, and pinned by nodes at join), the registry they join
//! ([`Cluster`]), and the server's own node as one member of it when it keeps one.
//!
//! Replicas on a shared store share the registry through it, and the node link's identity too:
//! the first replica to start records its certificate and key in the store and every replica
//! presents that one, so a node's pin holds whichever replica it reaches.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use cove_cluster::{Cluster, ClusterConfig, NodeConnector};
use cove_domain::NodeState;
use cove_node_agent::NodeAgent;
use cove_node_api::{NodeApi, NodeReport};
use cove_node_rpc::tls::TlsIdentity;
use cove_node_rpc::{ClusterService, JoinAnswer, Membership, MembershipError, RemoteNode};
use cove_store::Store;
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tracing::{info, warn};

/// Settings of a server that remote node agents join.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The secret node agents present to join, and that the server presents to them.
    pub join_token: String,
    /// Where node agents join (gRPC; port 0 picks a free port).
    pub node_listen: SocketAddr,
    /// Whether the server also runs its own in-process node (named `local`).
    pub local_node: bool,
    /// How often nodes send heartbeats.
    pub heartbeat_interval: Duration,
    /// A node without a heartbeat for this long is `lost`.
    pub heartbeat_timeout: Duration,
    /// Replicas on a shared store: how long a replica's lease on an operation it runs holds
    /// without renewal (the longest another replica waits to take over from one that died).
    pub operation_lease: Duration,
}

impl ClusterSettings {
    /// Defaults: the in-process node kept, heartbeats every 2 s, lost after 10 s, operation
    /// leases of 10 s.
    pub fn new(join_token: impl Into<String>, node_listen: SocketAddr) -> Self {
        ClusterSettings {
            join_token: join_token.into(),
            node_listen,
            local_node: true,
            heartbeat_interval: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_secs(10),
            operation_lease: cove_control_plane::operations::DEFAULT_LEASE,
        }
    }
}

/// The registry as node agents reach it: a join connects back to the node's address.
struct Registry {
    cluster: Arc<Cluster>,
    token: String,
}

#[async_trait]
impl Membership for Registry {
    async fn join(
        &self,
        name: String,
        address: String,
        certificate: CertificateDer<'static>,
        report: NodeReport,
    ) -> Result<JoinAnswer, MembershipError> {
        if name.is_empty() || name == crate::LOCAL_NODE_NAME {
            return Err(MembershipError::Refused(format!(
                "node name {name:?} is reserved"
            )));
        }
        let pinned = certificate.to_vec();
        let remote = RemoteNode::connect(&address, &self.token, certificate)
            .await
            .map_err(|e| MembershipError::Refused(format!("cannot call the node back: {e}")))?;
        self.cluster
            .join_remote(&name, &address, pinned, Arc::new(remote), report)
            .await
            .map_err(|e| MembershipError::Unreachable(format!("cannot record the join: {e}")))?;
        Ok(JoinAnswer {
            heartbeat_interval: self.cluster.config().heartbeat_interval,
        })
    }

    async fn heartbeat(
        &self,
        name: &str,
        report: NodeReport,
    ) -> Result<Option<NodeState>, MembershipError> {
        Ok(self.cluster.heartbeat_remote(name, report).await)
    }
}

/// The node link identity every replica presents: the one in the store, or `own` when none
/// is there yet (then recorded for the others).
async fn shared_identity(store: &dyn Store, own: &TlsIdentity) -> anyhow::Result<TlsIdentity> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let (cert, key) = store
        .node_link_identity(&b64.encode(&own.cert), &b64.encode(own.key_der()))
        .await
        .context("read the node link's identity from the store")?;
    let cert = b64
        .decode(cert)
        .context("the stored node link certificate")?;
    let key = b64.decode(key).context("the stored node link key")?;
    if cert != own.cert.as_ref() {
        info!("presenting the node link certificate the replicas share (from the store)");
    }
    Ok(TlsIdentity::from_der(cert, key))
}

/// Connects to nodes that joined another replica, with the join token and their pinned
/// certificate.
struct Connector {
    token: String,
}

#[async_trait]
impl NodeConnector for Connector {
    async fn connect(&self, address: &str, certificate: &[u8]) -> Result<Arc<dyn NodeApi>, String> {
        let cert = CertificateDer::from(certificate.to_vec());
        RemoteNode::connect(address, &self.token, cert)
            .await
            .map(|n| Arc::new(n) as Arc<dyn NodeApi>)
            .map_err(|e| e.to_string())
    }
}

/// A started registry, before its listener serves.
pub(crate) struct Joined {
    pub(crate) cluster: Arc<Cluster>,
    token: String,
    identity: TlsIdentity,
    local: Option<Arc<NodeAgent>>,
}

/// Makes the registry; the server's own node, when it keeps one, joins it as `local`. The node
/// link's TLS identity is read from `data_dir` (made there on first start).
/// With `shared` (replicas on one store), the registry and the identity are the store's.
pub(crate) async fn start(
    settings: &ClusterSettings,
    runtime: &str,
    data_dir: &std::path::Path,
    local: Option<Arc<NodeAgent>>,
    shared: Option<Arc<dyn Store>>,
) -> anyhow::Result<Joined> {
    let mut identity =
        TlsIdentity::load_or_create(data_dir).context("the node link's TLS certificate")?;
    let cfg = ClusterConfig {
        heartbeat_interval: settings.heartbeat_interval,
        heartbeat_timeout: settings.heartbeat_timeout,
        runtime: runtime.to_string(),
        ..ClusterConfig::default()
    };
    let cluster = match shared {
        None => Cluster::new(cfg),
        Some(store) => {
            identity = shared_identity(store.as_ref(), &identity).await?;
            let connector = Arc::new(Connector {
                token: settings.join_token.clone(),
            });
            Cluster::new_shared(cfg, store, connector)
        }
    };
    if let Some(node) = &local {
        let report = NodeReport::read(node.as_ref())
            .await
            .context("read the local node's report")?;
        cluster.join(
            crate::LOCAL_NODE_NAME,
            "in-process",
            node.clone() as Arc<dyn NodeApi>,
            report,
            true,
        );
    }
    Ok(Joined {
        cluster,
        token: settings.join_token.clone(),
        identity,
        local,
    })
}

impl Joined {
    /// Serves the node listener (TLS) and refreshes the local node's report, until `stop`.
    ///
    /// # Errors
    /// rustls refuses the identity.
    pub(crate) fn serve(
        self,
        listener: TcpListener,
        admission: &crate::listen::Admission,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Vec<tokio::task::JoinHandle<std::io::Result<()>>>> {
        let tls = self.identity.server_config()?;
        let mut tasks = Vec::new();
        let registry = Arc::new(Registry {
            cluster: self.cluster.clone(),
            token: self.token.clone(),
        });
        let service =
            ClusterService::new(registry, &self.token, self.identity.cert.clone()).into_server();
        let mut rx = stop.clone();
        let bounds = crate::listen::node_link_bounds(admission);
        tasks.push(tokio::spawn(async move {
            let incoming = cove_node_rpc::transport::tls_incoming(listener, tls, bounds);
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await
                .map_err(std::io::Error::other)
        }));
        if let Some(node) = self.local {
            let cluster = self.cluster.clone();
            let mut rx = stop;
            let every = cluster.config().heartbeat_interval;
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = rx.wait_for(|s| *s) => break,
                        () = tokio::time::sleep(every) => {}
                    }
                    match NodeReport::read(node.as_ref()).await {
                        Ok(report) => {
                            cluster.heartbeat(crate::LOCAL_NODE_NAME, report);
                        }
                        Err(e) => warn!(error = %e, "cannot read the local node's report"),
                    }
                }
                Ok(())
            }));
        }
        info!("node listener serving (TLS)");
        Ok(tasks)
    }
}
