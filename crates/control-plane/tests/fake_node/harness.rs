//! One control plane over the fake node and a fresh store, with frozen time.
//!
//! Time: [`Harness::new`] pauses tokio's clock and keeps it from auto-advancing (a blocking
//! task is alive for the test's life: tokio never auto-advances while one runs). The store's
//! SQLite work runs on a thread of its own, so with auto-advance on, time would jump whenever
//! the test waits for the database; frozen, time moves only when a test calls
//! [`Harness::advance`]. A watchdog lets time run again after [`WATCHDOG`] of real time, so a
//! test that hangs fails on its own timeouts instead of hanging the suite.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cove_api_types::{
    CreateSandboxRequest, ErrorCode, EventType, LifecycleRequest, Operation, OperationState,
    Sandbox, SandboxState,
};
use cove_cluster::Cluster;
use cove_control_plane::orgs::{scope, Actor, Caller};
use cove_control_plane::{Clock, ControlPlane, ControlPlaneConfig, LifecycleVerb, ServiceError};
use cove_store::{SqliteStore, Store};
use cove_test_support::FakeNode;

/// Runs a test's body as the server (`Caller::system()`: every org, the default org for new
/// resources). A test calls services directly, outside any request, and services refuse to
/// run without a caller (`orgs::scope`); a test that acts as an org's key or the admin token
/// scopes that caller inside.
pub use cove_control_plane::orgs::scope::as_system;

/// The caller of an API key of `org` (`key-of-{org}`).
fn key_of(org: &str) -> Caller {
    Caller {
        org: org.into(),
        actor: Actor::Key(format!("key-of-{org}")),
    }
}

/// Runs `f` as an API key of `org`.
pub async fn as_org<F: Future>(org: &str, f: F) -> F::Output {
    scope::scoped(key_of(org), f).await
}

/// Real time after which a frozen test's clock is let go (it then fails on its timeouts).
pub const WATCHDOG: Duration = Duration::from_secs(20);

/// A wall clock that follows tokio's (paused) clock: the real time when it was made, plus the
/// tokio time elapsed since.
#[derive(Debug)]
pub struct TokioClock {
    base: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl TokioClock {
    fn new() -> Self {
        TokioClock {
            base: Utc::now(),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        self.base + chrono::Duration::from_std(self.start.elapsed()).unwrap_or_default()
    }
}

/// Keeps tokio from auto-advancing its paused clock while it lives (or until the watchdog).
struct Frozen(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

fn freeze() -> Frozen {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = rx.recv_timeout(WATCHDOG);
    });
    Frozen(tx)
}

/// A control plane over a fake node and a fresh store, in frozen time.
pub struct Harness {
    /// The services under test.
    pub cp: ControlPlane,
    /// The node they drive.
    pub node: FakeNode,
    /// The cluster the services drive instead of `node`, when the test made one.
    pub cluster: Option<Arc<Cluster>>,
    store: Arc<dyn Store>,
    pub cfg: ControlPlaneConfig,
    _dir: tempfile::TempDir,
    _frozen: Frozen,
}

/// A fresh, empty store in `dir`.
async fn fresh_store(dir: &std::path::Path) -> Arc<dyn Store> {
    Arc::new(
        SqliteStore::open(&dir.join("store.db"))
            .await
            .expect("open store"),
    )
}

/// The one place a control plane is built over a store and the fake node.
fn control_plane(
    store: &Arc<dyn Store>,
    node: &FakeNode,
    cluster: Option<&Arc<Cluster>>,
    cfg: &ControlPlaneConfig,
) -> ControlPlane {
    match cluster {
        Some(c) => ControlPlane::with_placement(store.clone(), c.clone(), cfg.clone()),
        None => ControlPlane::new(store.clone(), Arc::new(node.clone()), cfg.clone()),
    }
}

impl Harness {
    /// Default fake node, default settings, release 1 of `base` built.
    pub async fn new() -> Harness {
        Harness::with(FakeNode::new(), |_| {}).await
    }

    /// `node`, the settings as `tune` leaves them, release 1 of `base` built.
    pub async fn with(node: FakeNode, tune: impl FnOnce(&mut ControlPlaneConfig)) -> Harness {
        Harness::with_cluster(node, None, tune).await
    }

    /// Services over `cluster` when given (`node` is then one of its nodes), else over `node`;
    /// the settings as `tune` leaves them; release 1 of `base` built.
    pub async fn with_cluster(
        node: FakeNode,
        cluster: Option<Arc<Cluster>>,
        tune: impl FnOnce(&mut ControlPlaneConfig),
    ) -> Harness {
        tokio::time::pause();
        let frozen = freeze();
        let dir = tempfile::tempdir().expect("tempdir");
        let store = fresh_store(dir.path()).await;
        let mut cfg = ControlPlaneConfig::new("http://127.0.0.1:9");
        cfg.clock = Arc::new(TokioClock::new());
        tune(&mut cfg);
        let cp = control_plane(&store, &node, cluster.as_ref(), &cfg);
        let h = Harness {
            cp,
            node,
            cluster,
            store,
            cfg,
            _dir: dir,
            _frozen: frozen,
        };
        // Set-up is no test's request: it runs as the server whatever the test runs as.
        let op = as_system(async {
            let built =
                h.cp.build_release("base", Default::default())
                    .await
                    .expect("build base");
            h.settle(&built.operation.id).await
        })
        .await;
        assert_eq!(op.state, OperationState::Succeeded, "{op:?}");
        h
    }

    /// A new control plane over the same store and node, as after a server restart (the old
    /// one's work is abandoned where it is: hung node calls stay hung).
    pub fn restart(&mut self) {
        self.cp = control_plane(&self.store, &self.node, self.cluster.as_ref(), &self.cfg);
    }

    /// Another replica beside [`Harness::cp`]: a second control plane over the same store and
    /// node, with its own replica id.
    pub fn replica(&self) -> ControlPlane {
        let mut cfg = self.cfg.clone();
        cfg.replica_id = format!("{}-other", cfg.replica_id);
        control_plane(&self.store, &self.node, self.cluster.as_ref(), &cfg)
    }

    /// Moves tokio's clock (and so the control plane's) forward by `d`, and 1 ms more:
    /// tokio rounds timer deadlines up to the next millisecond, so a timer set `d` ago would
    /// otherwise be a fraction of a millisecond short. Then gives woken tasks their turn.
    pub async fn advance(&self, d: Duration) {
        tokio::time::advance(d + Duration::from_millis(1)).await;
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Runs one pass of the controller `controller_interval` from now and waits for it to
    /// end (operations it started keep running).
    pub async fn controller_pass(&self) {
        let controller = cove_control_plane::Controller::start(self.cp.clone());
        // Its first turn starts its timer.
        self.advance(Duration::ZERO).await;
        self.advance(self.cfg.controller_interval).await;
        controller.stop().await;
    }

    /// The operations of sandbox `id` of `kind`, newest first.
    pub async fn ops_of(&self, id: &str, kind: cove_api_types::OperationKind) -> Vec<Operation> {
        let ops = self
            .cp
            .operations()
            .list(Some(id), None)
            .await
            .expect("ops");
        ops.into_iter().filter(|o| o.kind == kind).collect()
    }

    /// Accepts a create of a `base` sandbox with `req`'s settings.
    pub async fn create_with(&self, req: CreateSandboxRequest) -> (Sandbox, Operation) {
        let r = self.cp.create_sandbox(req, None).await.expect("create");
        (r.sandbox, r.operation)
    }

    /// A running `base` sandbox; returns its id.
    pub async fn running(&self) -> String {
        self.running_with(CreateSandboxRequest::default()).await
    }

    /// A running sandbox created with `req`; returns its id.
    pub async fn running_with(&self, req: CreateSandboxRequest) -> String {
        let (s, op) = self.create_with(req).await;
        self.succeeds(&op).await;
        assert_eq!(self.state(&s.id).await, SandboxState::Running);
        s.id
    }

    /// The operation once it is final (fails the test if it does not end).
    pub async fn settle(&self, op_id: &str) -> Operation {
        let start = std::time::Instant::now();
        loop {
            let op = self
                .cp
                .operations()
                .wait(op_id, Duration::from_secs(60))
                .await
                .expect("wait");
            if op.state.is_final() {
                return op;
            }
            assert!(
                start.elapsed() < WATCHDOG * 2,
                "operation {op_id} did not end: {op:?}"
            );
        }
    }

    /// Waits for `op` and checks it succeeded.
    pub async fn succeeds(&self, op: &Operation) -> Operation {
        let done = self.settle(&op.id).await;
        assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
        done
    }

    /// Waits for `op` and checks it ended in `state` with error `code`.
    pub async fn ends(&self, op: &Operation, state: OperationState, code: ErrorCode) -> Operation {
        let done = self.settle(&op.id).await;
        assert_eq!(done.state, state, "{done:?}");
        assert_eq!(done.error.as_ref().map(|e| e.code), Some(code), "{done:?}");
        done
    }

    /// Accepts a lifecycle call without key or deadline.
    pub async fn call(&self, id: &str, verb: LifecycleVerb) -> Result<Operation, ServiceError> {
        self.cp
            .lifecycle(id, verb, LifecycleRequest::default(), None)
            .await
    }

    /// Makes a lifecycle call and waits for it to succeed.
    pub async fn apply(&self, id: &str, verb: LifecycleVerb) {
        let op = self.call(id, verb).await.expect("accepted");
        self.succeeds(&op).await;
    }

    /// The sandbox as stored, deleted ones included.
    pub async fn sandbox(&self, id: &str) -> Sandbox {
        self.cp.store().get_sandbox(id).await.expect("stored")
    }

    /// Its state as stored.
    pub async fn state(&self, id: &str) -> SandboxState {
        self.sandbox(id).await.state
    }

    /// The kinds of event recorded for sandbox `id`, in order.
    pub async fn events(&self, id: &str) -> Vec<EventType> {
        self.event_log(id)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// The events of sandbox `id` with their reasons, in order.
    pub async fn event_log(&self, id: &str) -> Vec<(EventType, Option<String>)> {
        self.cp
            .store()
            .events_after(None, 0, 500)
            .await
            .expect("events")
            .into_iter()
            .filter(|e| e.sandbox_id == id)
            .map(|e| (e.kind, e.reason))
            .collect()
    }
}

/// Waits until `check` holds, giving background work turns in between (at most 10 s of real
/// time, less than [`WATCHDOG`], so a failure names what was awaited).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < WATCHDOG / 2,
            "timed out waiting for {what}"
        );
        tokio::task::yield_now().await;
    }
}

/// The API code of a failed call.
pub fn code<T: std::fmt::Debug>(r: Result<T, ServiceError>) -> ErrorCode {
    r.expect_err("the call fails").code()
}
