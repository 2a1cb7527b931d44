//! What control-plane replicas share about the cluster: the node registry (nodes, their
//! addresses, pinned certificates, last reports and states), where sandboxes are placed, the
//! node link's TLS identity, operation leases, and the controller election.
//!
//! Every replica writes what it learns (a join, a heartbeat, a placement) and reads the rest
//! back, so a node that joined one replica is used by all. An operation carries the replica
//! that runs it (`owner`) and a lease that replica renews; an operation whose lease ran out
//! is claimed by another replica ([`ClusterStore::claim_expired_operations`]) and driven to its
//! end. One replica at a time leads ([`ClusterStore::try_lead`]) and runs the controllers.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{NodeState, Operation};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use crate::StoreError;

/// A node in the shared registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// Node name (unique).
    pub name: String,
    /// Where its node contract is served (`https://host:port`).
    pub address: String,
    /// Its TLS certificate (DER), pinned for calls to it.
    pub certificate: Vec<u8>,
    /// Its last report (capacity, runtimes, releases, sandboxes) as the node contract's JSON;
    /// opaque to the store.
    pub report: String,
    /// Its state.
    pub state: NodeState,
    /// Why it is quarantined or lost.
    pub reason: Option<String>,
    /// When its last heartbeat (or its join) arrived, at whichever replica.
    pub last_heartbeat_at: DateTime<Utc>,
}

/// Where a sandbox runs, and what it takes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementRecord {
    /// The sandbox.
    pub sandbox_id: String,
    /// The node it is placed on.
    pub node: String,
    /// vCPUs it was placed with (0 when only a node's report told of it).
    pub vcpus: u32,
    /// Memory in MiB it was placed with.
    pub memory_mib: u64,
}

/// Leadership of the controllers, held until it is dropped or lost.
///
/// PostgreSQL: a session advisory lock held on a connection of its own, checked every
/// second; when that connection fails the lock is gone (the database frees it) and
/// [`Leadership::lost`] resolves. SQLite: one process owns the file, so it always leads and
/// never loses.
pub struct Leadership {
    lost: watch::Receiver<bool>,
    /// Keeps the lock's connection alive (PostgreSQL); dropping it aborts the keeper task,
    /// which closes the connection and so releases the lock.
    _keeper: Option<AbortOnDropHandle<()>>,
    /// The sender of a leadership that is never lost (SQLite), kept so `lost` never closes.
    _never: Option<watch::Sender<bool>>,
}

impl Leadership {
    /// Leadership that is never lost (the single-process SQLite store).
    pub fn forever() -> Leadership {
        let (never, lost) = watch::channel(false);
        Leadership {
            lost,
            _keeper: None,
            _never: Some(never),
        }
    }

    /// Leadership kept by `keeper`, which sends `true` on `lost` when it is gone.
    pub(crate) fn kept(lost: watch::Receiver<bool>, keeper: tokio::task::JoinHandle<()>) -> Self {
        Leadership {
            lost,
            _keeper: Some(AbortOnDropHandle::new(keeper)),
            _never: None,
        }
    }

    /// Whether it is still held.
    pub fn is_held(&self) -> bool {
        !*self.lost.borrow()
    }

    /// Resolves when leadership is lost (at once if it already is).
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|l| *l).await;
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("held", &self.is_held())
            .finish()
    }
}

/// The shared cluster state.
#[async_trait]
pub trait ClusterStore: Send + Sync {
    /// Records a node that joined: inserts it, or updates its address, certificate, report and
    /// heartbeat time. A node an operator drained or quarantined keeps that state (and reason);
    /// otherwise it takes `node.state`. Returns the state it has now.
    async fn upsert_node(&self, node: &NodeRecord) -> Result<NodeState, StoreError>;

    /// Records a heartbeat of node `name` at `at` with its `report`; a `lost` node is `ready`
    /// again. Returns its state, `None` when no such node is recorded.
    async fn node_heartbeat(
        &self,
        name: &str,
        report: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<NodeState>, StoreError>;

    /// Sets node `name`'s state and reason. Returns whether it exists.
    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        reason: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// Every recorded node, by name.
    async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError>;

    /// Records (or moves) where a sandbox is placed.
    async fn put_placement(&self, p: &PlacementRecord) -> Result<(), StoreError>;

    /// Forgets where sandbox `sandbox_id` was placed.
    async fn delete_placement(&self, sandbox_id: &str) -> Result<(), StoreError>;

    /// Every placement.
    async fn list_placements(&self) -> Result<Vec<PlacementRecord>, StoreError>;

    /// The node link's TLS identity (`certificate` and PKCS#8 `key`, each DER in base64): the
    /// one recorded, or the given one when none is (the first replica's wins), so every
    /// replica presents the certificate nodes pinned.
    async fn node_link_identity(
        &self,
        certificate: &str,
        key: &str,
    ) -> Result<(String, String), StoreError>;

    /// Leases the unfinished operations `ids` to `owner` until `until`; an operation held by
    /// another owner is left alone. Returns the ids leased.
    async fn lease_operations(
        &self,
        owner: &str,
        ids: &[String],
        until: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError>;

    /// Claims for `owner`, until `until`, at most `limit` unfinished operations whose lease
    /// ran out before `now`, or that were never leased and were created before `stale_before`
    /// (their replica died between recording and running them). Each is claimed by one caller
    /// only. Returns them, oldest first.
    async fn claim_expired_operations(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        stale_before: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError>;

    /// Tries to become the leader of the controllers; `None` when another replica leads.
    async fn try_lead(&self) -> Result<Option<Leadership>, StoreError>;

    /// Whether several processes may share this store (PostgreSQL: replicas must lease their
    /// operations and elect a leader; SQLite: one process owns the file).
    fn shared(&self) -> bool;
}
