//! Several nodes behind one [`NodeApi`]: the registry of nodes (join, heartbeats, states,
//! loss), placement of new and waking sandboxes ([`scheduler`]; a sandbox that mounts volumes
//! only on their node, `volumes.rs`), and routing of every other call to the node that holds
//! the sandbox. The control plane's services use a [`Cluster`] as
//! their node and never learn which host serves a sandbox; what they ask beyond node calls
//! (nodes to list and drain, a volume's node, loss and change signals) is the [`Placement`]
//! trait, which a single server answers as a cluster of one ([`OneNode`]).
//!
//! This crate knows nodes (`node-api`) and the store's node registry (`store`), never the
//! control plane's services.
//!
//! The registry lives in memory: nodes report what they hold in every heartbeat, so a
//! restarted control plane learns the placement again as nodes re-join. Replicas on one
//! shared store also keep it there (`shared.rs`): nodes, their states and reports, and
//! placements, so a node that joined one replica is used by every replica. Snapshots are in a
//! store every node reaches (a shared directory or S3), so any node answers snapshot calls and
//! any node can wake a suspended sandbox, except one that mounts volumes: volumes are
//! node-local, so it wakes on their node or not at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cove_domain::{NodeState, Resources};
use cove_node_api::{
    NetworkDenied, NodeApi, NodeCapabilities, NodeCapacity, NodeError, NodeReport, RecipeInfo,
    ReleaseRef, SandboxLaunch,
};
use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;
use tracing::{info, warn};

mod checkpoints;
mod placement;
mod route;
pub mod scheduler;
mod shared;
mod volumes;

pub use placement::{OneNode, Placement, LOCAL_NODE};
pub use shared::NodeConnector;
pub use volumes::VolumePlace;

/// Settings of a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// How often nodes send heartbeats (default 2 s).
    pub heartbeat_interval: Duration,
    /// A node without a heartbeat for this long is `lost` (default 10 s).
    pub heartbeat_timeout: Duration,
    /// Creates (or wakes) failing in a row on one node before it is quarantined (default 3).
    pub quarantine_after: u32,
    /// The runtime sandboxes are placed on (`runc`).
    pub runtime: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            heartbeat_interval: Duration::from_secs(2),
            heartbeat_timeout: Duration::from_secs(10),
            quarantine_after: 3,
            runtime: "runc".into(),
        }
    }
}

/// Why a change of a node's state was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No node of that name.
    #[error("node {0} not found")]
    NodeNotFound(String),
    /// The node is lost; it becomes ready again by itself when its heartbeats return.
    #[error("node {0} is lost")]
    NodeLost(String),
    /// The server runs one in-process node, whose state is fixed ([`OneNode`]).
    #[error("this server runs one in-process node")]
    OneNode,
    /// The registry shared with other replicas cannot be read.
    #[error(transparent)]
    Store(#[from] cove_store::StoreError),
}

/// A node as the registry sees it (for `GET /v1/nodes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSummary {
    /// Node name.
    pub name: String,
    /// Where its node contract is served (`in-process` for the server's own node).
    pub address: String,
    /// Its state.
    pub state: NodeState,
    /// Why it is quarantined or lost.
    pub reason: Option<String>,
    /// Runtime, boundary and snapshot store.
    pub capabilities: NodeCapabilities,
    /// Capacity at its last heartbeat.
    pub capacity: NodeCapacity,
    /// Releases it holds.
    pub releases: Vec<ReleaseRef>,
    /// Sandboxes placed on it.
    pub sandboxes: u32,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: u64,
}

struct Member {
    api: Arc<dyn NodeApi>,
    address: String,
    /// Its TLS certificate (DER) as it joined (empty for the local node).
    certificate: Vec<u8>,
    /// The server's own node: never lost.
    local: bool,
    state: NodeState,
    reason: Option<String>,
    report: NodeReport,
    last_seen: Instant,
    failures_in_row: u32,
}

struct Placed {
    node: String,
    resources: Resources,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, Member>,
    placement: HashMap<String, Placed>,
}

/// Nodes behind one [`NodeApi`]. Cheap to share (`Arc`).
pub struct Cluster {
    cfg: ClusterConfig,
    state: Mutex<State>,
    /// Set when a node is lost or comes back holding sandboxes placed nowhere; the controller
    /// reconciles at once and clears it.
    changed: AtomicBool,
    denials: tokio::sync::broadcast::Sender<NetworkDenied>,
    /// Capabilities and recipes answered before any node joined.
    fallback: NodeCapabilities,
    /// The store the registry is shared through with other replicas (`None`: this process
    /// alone).
    shared: Option<shared::Shared>,
}

impl Cluster {
    /// An empty cluster.
    pub fn new(cfg: ClusterConfig) -> Arc<Cluster> {
        Self::build(cfg, None)
    }

    /// An empty cluster whose registry is shared with other replicas through `store`; nodes
    /// that joined another replica are reached through `connector`.
    pub fn new_shared(
        cfg: ClusterConfig,
        store: Arc<dyn cove_store::Store>,
        connector: Arc<dyn NodeConnector>,
    ) -> Arc<Cluster> {
        Self::build(cfg, Some(shared::Shared { store, connector }))
    }

    fn build(cfg: ClusterConfig, shared: Option<shared::Shared>) -> Arc<Cluster> {
        let fallback = NodeCapabilities {
            runtime: cfg.runtime.clone(),
            boundary: "container".into(),
            pause: true,
            suspend_memory: false,
            snapshot_store: "file".into(),
            network: false,
            user_namespaces: false,
            volumes: false,
            attach_volumes: false,
        };
        Arc::new(Cluster {
            cfg,
            state: Mutex::new(State::default()),
            changed: AtomicBool::new(false),
            denials: tokio::sync::broadcast::channel(256).0,
            fallback,
            shared,
        })
    }

    /// Its settings.
    pub fn config(&self) -> &ClusterConfig {
        &self.cfg
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// A node joins (or joins again) as `name`: it becomes `ready` unless an operator drained
    /// or quarantined it. The sandboxes it reports are reconciled ([`Cluster::heartbeat`]).
    pub fn join(
        &self,
        name: &str,
        address: &str,
        api: Arc<dyn NodeApi>,
        report: NodeReport,
        local: bool,
    ) {
        let mut st = self.lock();
        let kept = st
            .nodes
            .get(name)
            .map(|m| (m.state, m.reason.clone(), m.failures_in_row))
            .filter(|(s, _, _)| matches!(s, NodeState::Draining | NodeState::Quarantined));
        let (state, reason, failures_in_row) = kept.unwrap_or((NodeState::Ready, None, 0));
        let certificate = st
            .nodes
            .get(name)
            .map(|m| m.certificate.clone())
            .unwrap_or_default();
        self.forward_denials(api.clone());
        st.nodes.insert(
            name.to_string(),
            Member {
                api,
                address: address.to_string(),
                certificate,
                local,
                state,
                reason,
                report: report.clone(),
                last_seen: Instant::now(),
                failures_in_row,
            },
        );
        info!(node = name, address, %state, "node joined");
        // What it holds is settled at the controller's next pass.
        self.changed.store(true, Ordering::SeqCst);
        let stale = self.adopt_reported(&mut st, name, &report.sandboxes);
        drop(st);
        self.release_stale(name, stale);
    }

    /// Forwards a node's network denials to the cluster's stream.
    fn forward_denials(&self, api: Arc<dyn NodeApi>) {
        let denials = self.denials.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut s = api.network_denials();
            while let Some(d) = s.next().await {
                let _ = denials.send(d);
            }
        });
    }

    /// A heartbeat of `name` with its report. A lost node whose heartbeats return is `ready`
    /// again. Sandboxes it reports that are placed nowhere are recorded on it (reconciliation
    /// then removes the ones the control plane no longer wants); ones placed on another node
    /// meanwhile (woken elsewhere) are released on it, keeping their snapshot. Returns the
    /// node's state, `None` when it never joined (it must join again).
    pub fn heartbeat(&self, name: &str, report: NodeReport) -> Option<NodeState> {
        let mut st = self.lock();
        let member = st.nodes.get_mut(name)?;
        member.last_seen = Instant::now();
        member.report = report.clone();
        if member.state == NodeState::Lost {
            member.state = NodeState::Ready;
            member.reason = None;
            self.changed.store(true, Ordering::SeqCst);
            info!(node = name, "lost node is back");
        }
        let state = member.state;
        let stale = self.adopt_reported(&mut st, name, &report.sandboxes);
        drop(st);
        self.release_stale(name, stale);
        Some(state)
    }

    /// Records reported sandboxes placed nowhere on `name` (flagging a change, so they are
    /// reconciled at once); returns those placed elsewhere.
    fn adopt_reported(&self, st: &mut State, name: &str, reported: &[String]) -> Vec<String> {
        let mut stale = Vec::new();
        for id in reported {
            match st.placement.get(id) {
                None => {
                    self.changed.store(true, Ordering::SeqCst);
                    st.placement.insert(
                        id.clone(),
                        Placed {
                            node: name.to_string(),
                            resources: Resources {
                                vcpus: 0,
                                memory_mib: 0,
                                pids_max: 0,
                                disk_mib: None,
                            },
                        },
                    );
                }
                Some(p) if p.node != name => stale.push(id.clone()),
                Some(_) => {}
            }
        }
        stale
    }

    fn release_stale(&self, name: &str, stale: Vec<String>) {
        if stale.is_empty() {
            return;
        }
        let Ok(api) = self.api_of_node(name) else {
            return;
        };
        let node = name.to_string();
        tokio::spawn(async move {
            for id in stale {
                match api.release_sandbox(&id).await {
                    Ok(()) => {
                        info!(node = %node, sandbox_id = %id, "released a sandbox placed elsewhere")
                    }
                    Err(e) => {
                        warn!(node = %node, sandbox_id = %id, error = %e, "cannot release a stale sandbox")
                    }
                }
            }
        });
    }

    /// Marks every remote node without a heartbeat for the timeout `lost`; returns their
    /// names. Their running sandboxes then read as gone (reason `node_lost`) to
    /// reconciliation; suspended ones are untouched (their snapshots are in the shared store).
    pub(crate) fn expire(&self) -> Vec<String> {
        let mut st = self.lock();
        let timeout = self.cfg.heartbeat_timeout;
        let mut lost = Vec::new();
        for (name, m) in st.nodes.iter_mut() {
            if !m.local && m.state != NodeState::Lost && m.last_seen.elapsed() > timeout {
                m.state = NodeState::Lost;
                m.reason = Some(format!(
                    "no heartbeat for {} s",
                    m.last_seen.elapsed().as_secs()
                ));
                warn!(node = %name, "node lost");
                lost.push(name.clone());
            }
        }
        if !lost.is_empty() {
            self.changed.store(true, Ordering::SeqCst);
        }
        lost
    }

    /// Every node, by name.
    pub fn nodes(&self) -> Vec<NodeSummary> {
        let st = self.lock();
        st.nodes
            .iter()
            .map(|(name, m)| Self::summary(&st, name, m))
            .collect()
    }

    fn summary(st: &State, name: &str, m: &Member) -> NodeSummary {
        NodeSummary {
            name: name.to_string(),
            address: m.address.clone(),
            state: m.state,
            reason: m.reason.clone(),
            capabilities: m.report.capabilities.clone(),
            capacity: m.report.capacity,
            releases: m.report.releases.clone(),
            sandboxes: st.placement.values().filter(|p| p.node == name).count() as u32,
            last_heartbeat_ms: m.last_seen.elapsed().as_millis() as u64,
        }
    }

    /// Stops placement on a node (`draining`) or lets it take sandboxes again (`ready`, which
    /// also ends a quarantine). Its sandboxes keep running either way.
    ///
    /// # Errors
    /// `NodeNotFound`; `NodeLost` (a lost node comes back only by heartbeats).
    pub fn set_state(&self, name: &str, state: NodeState) -> Result<NodeSummary, ClusterError> {
        let mut st = self.lock();
        let m = st
            .nodes
            .get_mut(name)
            .ok_or_else(|| ClusterError::NodeNotFound(name.to_string()))?;
        if m.state == NodeState::Lost {
            return Err(ClusterError::NodeLost(name.to_string()));
        }
        m.state = state;
        m.reason = None;
        m.failures_in_row = 0;
        info!(node = name, %state, "node state set");
        let st = &*st;
        let m = &st.nodes[name];
        Ok(Self::summary(st, name, m))
    }

    /// The node a sandbox is placed on, if any.
    pub fn node_of(&self, sandbox_id: &str) -> Option<String> {
        self.lock()
            .placement
            .get(sandbox_id)
            .map(|p| p.node.clone())
    }

    fn api_of_node(&self, name: &str) -> Result<Arc<dyn NodeApi>, NodeError> {
        let st = self.lock();
        let m = st
            .nodes
            .get(name)
            .ok_or_else(|| NodeError::NodeUnreachable(format!("node {name} is not joined")))?;
        if m.state == NodeState::Lost {
            return Err(NodeError::NodeUnreachable(format!("node {name} is lost")));
        }
        Ok(m.api.clone())
    }

    /// The node that serves `sandbox_id`: `SandboxNotFound` when it is placed nowhere,
    /// `NodeUnreachable` when its node is lost.
    fn api_of(&self, sandbox_id: &str) -> Result<Arc<dyn NodeApi>, NodeError> {
        let node = self
            .node_of(sandbox_id)
            .ok_or_else(|| NodeError::SandboxNotFound(sandbox_id.to_string()))?;
        self.api_of_node(&node)
    }

    /// Every node that is not lost, the local one first.
    fn reachable(&self) -> Vec<(String, Arc<dyn NodeApi>)> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .nodes
            .iter()
            .filter(|(_, m)| m.state != NodeState::Lost)
            .map(|(n, m)| (!m.local, n.clone(), m.api.clone()))
            .collect();
        v.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        v.into_iter().map(|(_, n, a)| (n, a)).collect()
    }

    /// A node that reaches the shared snapshot store.
    fn snapshot_node(&self) -> Result<Arc<dyn NodeApi>, NodeError> {
        self.reachable()
            .into_iter()
            .next()
            .map(|(_, api)| api)
            .ok_or_else(|| NodeError::NoNodeAvailable("no node is reachable".into()))
    }

    /// Chooses a node for `launch` and records the placement: the scheduler's choice among
    /// every node, or among the one that keeps the launch's volumes when it mounts any.
    fn place(&self, launch: &SandboxLaunch) -> Result<(String, Arc<dyn NodeApi>), NodeError> {
        let mut st = self.lock();
        let pinned = Self::volumes_node(&st, &launch.volumes)?;
        let release = ReleaseRef {
            template: launch.template.clone(),
            number: launch.release,
        };
        let mut placed: HashMap<&str, (u32, u64, u32)> = HashMap::new();
        for p in st.placement.values() {
            let e = placed.entry(p.node.as_str()).or_default();
            e.0 += p.resources.vcpus;
            e.1 += p.resources.memory_mib;
            e.2 += 1;
        }
        let members: Vec<(&String, &Member)> = st
            .nodes
            .iter()
            .filter(|(name, _)| pinned.as_ref().is_none_or(|p| p == *name))
            .collect();
        let candidates: Vec<scheduler::Candidate<'_>> = members
            .iter()
            .map(|(name, m)| {
                let (vcpus, mem, count) = placed.get(name.as_str()).copied().unwrap_or_default();
                scheduler::Candidate {
                    name,
                    state: m.state,
                    runtime: &m.report.capabilities.runtime,
                    cpus: m.report.capacity.cpus,
                    memory_bytes: m.report.capacity.memory_bytes,
                    placed_vcpus: vcpus,
                    placed_memory_mib: mem,
                    sandboxes: count,
                    has_release: m.report.releases.contains(&release),
                }
            })
            .collect();
        let demand = scheduler::Demand {
            runtime: &self.cfg.runtime,
            vcpus: launch.resources.vcpus,
            memory_mib: launch.resources.memory_mib,
            // A release the node can fetch from the shared snapshot store (one built from a
            // file, launched with its digest) need not be there; one that holds it still
            // ranks first.
            require_release: launch.release_digest.is_none(),
        };
        let i =
            scheduler::place(&candidates, &demand).map_err(|e| match (&pinned, &members[..]) {
                (Some(node), [(_, m)]) => volumes::pinned_refusal(node, m.state, e),
                _ => NodeError::NoNodeAvailable(e.to_string()),
            })?;
        let name = members[i].0.clone();
        let api = members[i].1.api.clone();
        st.placement.insert(
            launch.id.clone(),
            Placed {
                node: name.clone(),
                resources: launch.resources,
            },
        );
        Ok((name, api))
    }

    /// Records how a create or wake on `node` ended: a failure that is the node's (not the
    /// request's) counts toward quarantine; the placement is dropped on any failure.
    fn placed_result<T>(&self, id: &str, node: &str, result: &Result<T, NodeError>) {
        let mut st = self.lock();
        let quarantine_after = self.cfg.quarantine_after;
        if result.is_err() {
            st.placement.remove(id);
        }
        let Some(m) = st.nodes.get_mut(node) else {
            return;
        };
        match result {
            Ok(_) => m.failures_in_row = 0,
            Err(e) if node_fault(e) => {
                m.failures_in_row += 1;
                if m.failures_in_row >= quarantine_after && m.state == NodeState::Ready {
                    m.state = NodeState::Quarantined;
                    m.reason = Some(format!(
                        "{} creates failed in a row; last: {e}",
                        m.failures_in_row
                    ));
                    warn!(node, reason = ?m.reason, "node quarantined");
                }
            }
            Err(_) => {}
        }
    }

    /// Records that `nodes` hold a release now (before their next heartbeat says so).
    fn note_release(&self, nodes: &[&str], template: &str, number: u32) {
        let mut st = self.lock();
        let release = ReleaseRef {
            template: template.to_string(),
            number,
        };
        for name in nodes {
            if let Some(m) = st.nodes.get_mut(*name) {
                if !m.report.releases.contains(&release) {
                    m.report.releases.push(release.clone());
                }
            }
        }
    }

    /// Forgets where a sandbox was placed (it was released or destroyed).
    fn unplace(&self, id: &str) {
        let mut st = self.lock();
        st.placement.remove(id);
    }

    /// Whether `id` was placed on a node that is lost now (its name).
    pub(crate) fn on_lost_node(&self, id: &str) -> Option<String> {
        let st = self.lock();
        let p = st.placement.get(id)?;
        let m = st.nodes.get(&p.node)?;
        (m.state == NodeState::Lost).then(|| p.node.clone())
    }

    fn first_capabilities(&self) -> NodeCapabilities {
        self.reachable()
            .first()
            .map(|(_, api)| api.capabilities())
            .unwrap_or_else(|| self.fallback.clone())
    }

    fn first_recipes(&self) -> Vec<RecipeInfo> {
        self.reachable()
            .first()
            .map(|(_, api)| api.recipes())
            .unwrap_or_default()
    }
}

/// Whether a failed create or wake is the node's fault (counts toward quarantine), not the
/// request's or a cancellation.
fn node_fault(e: &NodeError) -> bool {
    matches!(
        e,
        NodeError::Runtime(_)
            | NodeError::Internal(_)
            | NodeError::AgentUnavailable(_)
            | NodeError::NodeUnreachable(_)
            | NodeError::SpawnFailed(_)
            | NodeError::NoSpace(_)
    )
}

/// The reason recorded on a running sandbox whose node was lost.
pub const NODE_LOST: &str = "node_lost";
