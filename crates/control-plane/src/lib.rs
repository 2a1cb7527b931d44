//! The control plane: desired state, operations and services (lifecycle, commands, files,
//! templates, warm pools, volumes, auth).
//!
//! Services are methods of [`ControlPlane`], one file per resource. They talk to a node through
//! [`cove_node_api::NodeApi`] and never touch a runtime or a guest directly. The surfaces that
//! serve them, the REST API (`cove-http`) and the E2B API (`cove-e2b-compat`), depend on this
//! crate and use its public API only; this crate depends on no HTTP framework.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cove_cluster::{OneNode, Placement};
use cove_node_api::NodeApi;
use cove_store::Store;
use parking_lot::Mutex;

mod activity;
mod archives;
pub mod attach;
pub mod attach_binary;
pub mod auth;
mod checkpoints;
mod clock;
mod command_output;
mod commands;
mod controller;
pub mod error;
pub mod events;
pub mod expiry;
pub mod features;
mod files;
mod ha;
mod lifecycle;
pub mod metrics;
pub mod network;
mod nodes;
pub mod operations;
pub mod orgs;
mod pools;
pub mod ports;
mod reconcile;
mod release_pins;
mod repair;
mod retention;
mod sandbox_metrics;
mod sandboxes;
mod takeover;
mod templates;
mod volumes;

pub use clock::{Clock, SystemClock};
pub use controller::{Controller, Expiry};
pub use cove_node_api::SandboxPath;
pub use error::ServiceError;
pub use events::EventFeed;
pub use features::{Feature, Features};
pub use files::{guest_path, ListOptions, ReadOptions, WatchOptions, WriteOptions};
pub use ha::Replica;
pub use lifecycle::LifecycleVerb;
pub use operations::Operations;
pub use repair::AgentRepair;
pub use retention::Retention;
pub use templates::TemplateFileBuild;

/// Settings of the control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// Base URL clients use to reach the data plane (e.g. `http://127.0.0.1:7701`).
    pub data_plane_url: String,
    /// Lifetime of an attachment token.
    pub attachment_ttl: Duration,
    /// Name of the runtime sandboxes run on (`runc`).
    pub runtime: String,
    /// How often the controller loop runs: activity flush, idle suspends, TTL deletes, purge
    /// (default 5 s; tests use ~250 ms).
    pub controller_interval: Duration,
    /// How often the running server re-checks desired against actual state (default 30 s).
    pub reconcile_interval: Duration,
    /// How running sandboxes' guest agents are checked and repaired ([`AgentRepair`]: every
    /// 5 s, 3 s to answer, 3 repairs before `failed`).
    pub agent_repair: AgentRepair,
    /// How long each class of record is kept ([`Retention`]: operations and events 7 days,
    /// ended commands 1 day, suspended sandboxes until deleted).
    pub retention: Retention,
    /// The time of day activity is recorded with and idle, TTL and retention are decided by
    /// (default: [`SystemClock`]).
    pub clock: Arc<dyn Clock>,
    /// Renders the installed metrics recorder for `GET /metrics` (default: none, the route
    /// answers `404 not_found`).
    pub metrics: Option<metrics::MetricsRender>,
    /// The key that seals secret values in the store (`None`: creates with secrets are
    /// refused).
    pub secrets_key: Option<network::SecretsKey>,
    /// Own-disk size in MiB of a sandbox (or pool) whose request names none (`None`: such a
    /// sandbox has no disk of its own; default `None`, the server sets
    /// [`cove_domain::resources::DEFAULT_DISK_MIB`]).
    pub default_disk_mib: Option<u64>,
    /// Features turned off (default: every feature on).
    pub features: features::Features,
    /// Where the proxy listener of sandbox ports is reached (`None`: no proxy listener, so no
    /// host names nor one-time links are handed out).
    pub ports_proxy: Option<ports::PortsProxy>,
    /// This process's id among replicas on one shared store (default: `replica-` and 8 random
    /// hex digits); operations it runs are leased to it.
    pub replica_id: String,
    /// How long a replica's lease on an operation it runs holds without renewal (default
    /// [`operations::DEFAULT_LEASE`], 10 s): the longest an operation of a replica that died
    /// waits before another replica takes it over.
    pub operation_lease: Duration,
}

impl ControlPlaneConfig {
    /// Defaults for everything but the data-plane URL: 1 h attachment tokens, `runc`, the
    /// controller every 5 s, reconciliation every 30 s, [`Retention::default`], the system clock,
    /// no metrics.
    pub fn new(data_plane_url: impl Into<String>) -> Self {
        ControlPlaneConfig {
            data_plane_url: data_plane_url.into(),
            attachment_ttl: Duration::from_secs(3600),
            runtime: "runc".into(),
            controller_interval: Duration::from_secs(5),
            reconcile_interval: Duration::from_secs(30),
            agent_repair: AgentRepair::default(),
            retention: Retention::default(),
            clock: Arc::new(SystemClock),
            metrics: None,
            secrets_key: None,
            default_disk_mib: None,
            features: features::Features::all(),
            ports_proxy: None,
            replica_id: format!("replica-{:08x}", rand::random::<u32>()),
            operation_lease: operations::DEFAULT_LEASE,
        }
    }
}

/// The control plane's services; cheap to clone.
#[derive(Clone)]
pub struct ControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    node: Arc<dyn NodeApi>,
    /// Where sandboxes and volumes live: the nodes behind `node` (a single server's one
    /// in-process node, or a cluster of several).
    placement: Arc<dyn Placement>,
    ops: Operations,
    cfg: ControlPlaneConfig,
    /// One lifecycle lock per sandbox: its operations run one at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Lifecycle events: change notifications for `GET /v1/events`.
    events: events::Events,
    /// Last activity per sandbox, flushed to the store by the controller.
    activity: activity::Activity,
    /// Wakes the pool loop (a pool was set, a create claimed or missed a member).
    pools_wake: tokio::sync::Notify,
    /// Held by a pool pass: passes run one at a time.
    pools_pass: tokio::sync::Mutex<()>,
    /// The pool definitions as creates read them (`pools/claim.rs`).
    pools_cache: pools::claim::PoolsCache,
    /// One-time links to sandbox ports waiting for their visit.
    port_links: ports::PortLinks,
    /// Failed repairs in a row per degraded sandbox (`repair.rs`).
    repairs: repair::Attempts,
    /// Recent creates per org, for `max_creates_per_s`, and the lock that makes one org's
    /// quota check and insert one step.
    quotas: orgs::quotas::QuotaState,
    /// Commands with a raw stdout stream open (`attach_binary.rs`).
    binary_streams: attach_binary::BinaryStreams,
    /// Held while a create with volumes checks and records them, and while a volume delete
    /// checks that no sandbox mounts it: a delete never slips between.
    volumes_lock: tokio::sync::Mutex<()>,
    /// Held shared by a volume files call (without a sandbox) while it finds the volume and
    /// the node works on it, exclusively by a volume create and delete while the node makes or
    /// removes it: a call never meets a volume half made or half removed (which answered `500`
    /// from a failed mount).
    volume_files_lock: tokio::sync::RwLock<()>,
}

impl ControlPlane {
    /// Builds the services over one in-process node (a cluster of one,
    /// [`OneNode`]).
    pub fn new(store: Arc<dyn Store>, node: Arc<dyn NodeApi>, cfg: ControlPlaneConfig) -> Self {
        let placement = Arc::new(OneNode::new(node.clone()));
        Self::build(store, node, placement, cfg)
    }

    /// Builds the services over the nodes of `placement` (a [`cove_cluster::Cluster`]), which
    /// places and routes every node call.
    pub fn with_placement<P: Placement + NodeApi>(
        store: Arc<dyn Store>,
        placement: Arc<P>,
        cfg: ControlPlaneConfig,
    ) -> Self {
        Self::build(store, placement.clone(), placement, cfg)
    }

    fn build(
        store: Arc<dyn Store>,
        node: Arc<dyn NodeApi>,
        placement: Arc<dyn Placement>,
        cfg: ControlPlaneConfig,
    ) -> Self {
        let ops = if store.shared() {
            Operations::leased(
                store.clone(),
                operations::Lease {
                    owner: cfg.replica_id.clone(),
                    duration: cfg.operation_lease,
                },
            )
        } else {
            Operations::new(store.clone())
        };
        ControlPlane {
            inner: Arc::new(Inner {
                events: events::Events::new(store.clone()),
                store,
                node,
                placement,
                ops,
                cfg,
                locks: Mutex::new(HashMap::new()),
                binary_streams: Default::default(),
                activity: activity::Activity::default(),
                pools_wake: tokio::sync::Notify::new(),
                pools_pass: tokio::sync::Mutex::new(()),
                pools_cache: pools::claim::PoolsCache::default(),
                port_links: ports::PortLinks::default(),
                repairs: repair::Attempts::default(),
                quotas: orgs::quotas::QuotaState::default(),
                volumes_lock: tokio::sync::Mutex::new(()),
                volume_files_lock: tokio::sync::RwLock::new(()),
            }),
        }
    }

    /// The operation service.
    pub fn operations(&self) -> &Operations {
        &self.inner.ops
    }

    /// This process's id among replicas on a shared store.
    pub fn replica_id(&self) -> &str {
        &self.inner.cfg.replica_id
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub(crate) fn node(&self) -> &Arc<dyn NodeApi> {
        &self.inner.node
    }

    pub(crate) fn placement(&self) -> &Arc<dyn Placement> {
        &self.inner.placement
    }

    pub(crate) fn binary_streams(&self) -> &attach_binary::BinaryStreams {
        &self.inner.binary_streams
    }

    fn lifecycle_lock(&self, sandbox_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.inner.locks.lock();
        locks.entry(sandbox_id.to_string()).or_default().clone()
    }

    fn forget_lock(&self, sandbox_id: &str) {
        let mut locks = self.inner.locks.lock();
        locks.remove(sandbox_id);
    }
}
