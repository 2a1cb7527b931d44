//! The registry shared by control-plane replicas through the store: a join, a heartbeat, a
//! state change or a placement made at one replica is written to the store, and every replica
//! reads the rest back ([`Cluster::sync`], every heartbeat interval and whenever a sandbox's
//! node is not known here), connecting to nodes that joined another replica with the
//! certificate they pinned at join. So any replica places on, calls and proxies to any node.
//!
//! The server's own in-process node (`local`) is never shared: it is reached only through the
//! replica that runs it.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use cove_domain::{NodeState, Resources};
use cove_node_api::{NodeApi, NodeError, NodeReport};
use cove_store::{NodeRecord, PlacementRecord, Store, StoreError};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Cluster, Member, Placed};

/// How much later than this replica's last sight of a node a stored heartbeat must be to come
/// from another replica (the store's time and this replica's differ by the write).
const OWN_HEARTBEAT_SLACK: std::time::Duration = std::time::Duration::from_millis(200);

/// Connects to a node that joined another replica.
#[async_trait]
pub trait NodeConnector: Send + Sync + 'static {
    /// The node contract served at `address` (`https://host:port`) with TLS certificate
    /// `certificate` (DER, pinned).
    ///
    /// # Errors
    /// A message when the address is malformed or the node cannot be reached.
    async fn connect(&self, address: &str, certificate: &[u8]) -> Result<Arc<dyn NodeApi>, String>;
}

/// Where a shared registry is kept and how its nodes are reached.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) connector: Arc<dyn NodeConnector>,
}

impl Cluster {
    /// Whether the registry is shared with other replicas through the store.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// A remote node joins at this replica: recorded here and in the store (a node an
    /// operator drained or quarantined stays so). Returns its state.
    ///
    /// # Errors
    /// The store's, when the registry is shared and the join cannot be recorded.
    pub async fn join_remote(
        &self,
        name: &str,
        address: &str,
        certificate: Vec<u8>,
        api: Arc<dyn NodeApi>,
        report: NodeReport,
    ) -> Result<NodeState, StoreError> {
        let Some(shared) = &self.shared else {
            self.join(name, address, api, report, false);
            return Ok(self.state_of(name).unwrap_or(NodeState::Ready));
        };
        let record = NodeRecord {
            name: name.to_string(),
            address: address.to_string(),
            certificate: certificate.clone(),
            report: report_json(&report)?,
            state: NodeState::Ready,
            reason: None,
            last_heartbeat_at: Utc::now(),
        };
        let state = shared.store.upsert_node(&record).await?;
        self.join(name, address, api, report, false);
        let mut st = self.lock();
        if let Some(m) = st.nodes.get_mut(name) {
            m.certificate = certificate;
            m.state = state;
        }
        Ok(state)
    }

    /// A heartbeat of a remote node at this replica, recorded in the store when the registry
    /// is shared (a lost node is `ready` again). Returns its state, `None` when it must join
    /// again (no replica knows it).
    pub async fn heartbeat_remote(&self, name: &str, report: NodeReport) -> Option<NodeState> {
        let Some(shared) = &self.shared else {
            return self.heartbeat(name, report);
        };
        let json = match report_json(&report) {
            Ok(j) => j,
            Err(e) => {
                warn!(node = name, error = %e, "cannot encode a node's report");
                return self.heartbeat(name, report);
            }
        };
        match shared.store.node_heartbeat(name, &json, Utc::now()).await {
            Ok(None) => None,
            Ok(Some(state)) => {
                // Known here too: its time, report and sandboxes now; else at the next sync.
                if self.heartbeat(name, report).is_some() {
                    let mut st = self.lock();
                    if let Some(m) = st.nodes.get_mut(name) {
                        m.state = state;
                    }
                }
                Some(state)
            }
            Err(e) => {
                warn!(node = name, error = %e, "cannot record a heartbeat");
                self.heartbeat(name, report)
            }
        }
    }

    fn state_of(&self, name: &str) -> Option<NodeState> {
        self.lock().nodes.get(name).map(|m| m.state)
    }

    /// Writes the state and reason `names` have here to the store (after a loss, a
    /// quarantine, an operator's drain).
    pub async fn record_states(&self, names: &[String]) {
        let Some(shared) = &self.shared else { return };
        for name in names {
            let Some((state, reason, local)) = self
                .lock()
                .nodes
                .get(name)
                .map(|m| (m.state, m.reason.clone(), m.local))
            else {
                continue;
            };
            if local {
                continue;
            }
            if let Err(e) = shared
                .store
                .set_node_state(name, state, reason.as_deref())
                .await
            {
                warn!(node = %name, error = %e, "cannot record a node's state");
            }
        }
    }

    /// Places `launch` like [`Cluster::place`]; when no node fits and the registry is shared,
    /// reads it again first (a node that joined, or a release built, at another replica since
    /// the last sync) and tries once more.
    pub(crate) async fn place_fresh(
        &self,
        launch: &cove_node_api::SandboxLaunch,
    ) -> Result<(String, Arc<dyn NodeApi>), NodeError> {
        match self.place(launch) {
            Err(NodeError::NoNodeAvailable(_)) if self.shared.is_some() => {
                if let Err(e) = self.sync_fresh().await {
                    warn!(error = %e, "cannot read the shared node registry");
                }
                self.place(launch)
            }
            other => other,
        }
    }

    /// Writes the reports `names` have here to the store (a release built on them is known to
    /// every replica before their next heartbeat says so).
    pub(crate) async fn record_reports(&self, names: &[&str]) {
        let Some(shared) = &self.shared else { return };
        for name in names {
            let report = {
                let st = self.lock();
                match st.nodes.get(*name) {
                    Some(m) if !m.local => m.report.clone(),
                    _ => continue,
                }
            };
            let Ok(json) = report_json(&report) else {
                continue;
            };
            if let Err(e) = shared.store.node_heartbeat(name, &json, Utc::now()).await {
                warn!(node = %name, error = %e, "cannot record a node's report");
            }
        }
    }

    /// Records where `id` is placed here in the store (nothing when it is on the local node).
    pub(crate) async fn save_placement(&self, id: &str) {
        let Some(shared) = &self.shared else { return };
        let record = {
            let st = self.lock();
            let Some(p) = st.placement.get(id) else {
                return;
            };
            if st.nodes.get(&p.node).is_none_or(|m| m.local) {
                return;
            }
            PlacementRecord {
                sandbox_id: id.to_string(),
                node: p.node.clone(),
                vcpus: p.resources.vcpus,
                memory_mib: p.resources.memory_mib,
            }
        };
        if let Err(e) = shared.store.put_placement(&record).await {
            warn!(sandbox_id = %id, error = %e, "cannot record a placement");
        }
    }

    /// Records in the store how a placed create or wake of `id` on `node` ended: the
    /// placement stays or goes, and a node quarantined by it is quarantined for every replica.
    pub(crate) async fn record_placed(&self, id: &str, node: &str, ok: bool) {
        if self.shared.is_none() || ok {
            return;
        }
        self.drop_placement(id).await;
        if self.state_of(node) == Some(NodeState::Quarantined) {
            self.record_states(&[node.to_string()]).await;
        }
    }

    /// Forgets in the store where `id` was placed.
    pub(crate) async fn drop_placement(&self, id: &str) {
        let Some(shared) = &self.shared else { return };
        if let Err(e) = shared.store.delete_placement(id).await {
            warn!(sandbox_id = %id, error = %e, "cannot forget a placement");
        }
    }

    /// The node that serves `sandbox_id`, reading the shared registry again when it is not
    /// known here (placed by another replica since the last sync).
    pub(crate) async fn api_for(&self, sandbox_id: &str) -> Result<Arc<dyn NodeApi>, NodeError> {
        match self.api_of(sandbox_id) {
            Err(NodeError::SandboxNotFound(_)) if self.shared.is_some() => {
                if let Err(e) = self.sync().await {
                    warn!(error = %e, "cannot read the shared node registry");
                }
                self.api_of(sandbox_id)
            }
            other => other,
        }
    }

    /// Reads the shared registry: nodes that joined other replicas are connected and added,
    /// every remote node takes the state, report and heartbeat time the store has, and the
    /// placements of remote nodes are the store's (plus what nodes report holding).
    ///
    /// # Errors
    /// The store's.
    pub async fn sync(&self) -> Result<(), StoreError> {
        self.sync_with(OWN_HEARTBEAT_SLACK).await
    }

    /// A sync that takes every report the store has newer than this replica's.
    pub(crate) async fn sync_fresh(&self) -> Result<(), StoreError> {
        self.sync_with(std::time::Duration::ZERO).await
    }

    async fn sync_with(&self, slack: std::time::Duration) -> Result<(), StoreError> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let nodes = shared.store.list_nodes().await?;
        let placements = shared.store.list_placements().await?;
        let known: HashMap<String, (String, Vec<u8>)> = self
            .lock()
            .nodes
            .iter()
            .filter(|(_, m)| !m.local)
            .map(|(n, m)| (n.clone(), (m.address.clone(), m.certificate.clone())))
            .collect();
        let mut connected = HashMap::new();
        for n in &nodes {
            let same = known
                .get(&n.name)
                .is_some_and(|(a, c)| *a == n.address && *c == n.certificate);
            if same {
                continue;
            }
            match shared.connector.connect(&n.address, &n.certificate).await {
                Ok(api) => {
                    connected.insert(n.name.clone(), api);
                }
                Err(e) => warn!(node = %n.name, error = %e, "cannot connect to a shared node"),
            }
        }
        let now = Utc::now();
        let mut st = self.lock();
        for n in nodes {
            let Ok(report) = serde_json::from_str::<NodeReport>(&n.report) else {
                warn!(node = %n.name, "a shared node's report does not parse");
                continue;
            };
            let age = (now - n.last_heartbeat_at).to_std().unwrap_or_default();
            let seen = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
            let api = connected.remove(&n.name);
            match st.nodes.get_mut(&n.name) {
                Some(m) if m.local => {}
                Some(m) => {
                    if let Some(api) = api {
                        m.api = api.clone();
                        m.address = n.address.clone();
                        m.certificate = n.certificate.clone();
                        self.forward_denials(api);
                    }
                    m.state = n.state;
                    m.reason = n.reason;
                    // Only a heartbeat another replica received since is news: this replica's
                    // own (and the releases it noted since, before the node reports them)
                    // stay.
                    if seen > m.last_seen + slack {
                        m.last_seen = seen;
                        m.report = report;
                    }
                }
                None => {
                    let Some(api) = api else { continue };
                    info!(node = %n.name, address = %n.address, "node of another replica added");
                    self.forward_denials(api.clone());
                    st.nodes.insert(
                        n.name.clone(),
                        Member {
                            api,
                            address: n.address,
                            certificate: n.certificate,
                            local: false,
                            state: n.state,
                            reason: n.reason,
                            report,
                            last_seen: seen,
                            failures_in_row: 0,
                        },
                    );
                }
            }
        }
        // Placements on remote nodes: the store's, then what each node reports holding.
        let local: Vec<String> = st
            .nodes
            .iter()
            .filter(|(_, m)| m.local)
            .map(|(n, _)| n.clone())
            .collect();
        st.placement.retain(|_, p| local.contains(&p.node));
        for p in placements {
            st.placement.insert(
                p.sandbox_id,
                Placed {
                    node: p.node,
                    resources: Resources {
                        vcpus: p.vcpus,
                        memory_mib: p.memory_mib,
                        pids_max: 0,
                        disk_mib: None,
                    },
                },
            );
        }
        let reported: Vec<(String, Vec<String>)> = st
            .nodes
            .iter()
            .filter(|(_, m)| !m.local && m.state != NodeState::Lost)
            .map(|(n, m)| (n.clone(), m.report.sandboxes.clone()))
            .collect();
        for (node, ids) in reported {
            for id in ids {
                st.placement.entry(id).or_insert_with(|| Placed {
                    node: node.clone(),
                    resources: Resources {
                        vcpus: 0,
                        memory_mib: 0,
                        pids_max: 0,
                        disk_mib: None,
                    },
                });
            }
        }
        Ok(())
    }
}

fn report_json(report: &NodeReport) -> Result<String, StoreError> {
    serde_json::to_string(report).map_err(|e| StoreError::Corrupt(e.to_string()))
}
