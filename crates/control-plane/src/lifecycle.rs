//! Sandbox lifecycle calls: pause, resume, suspend, wake; the per-sandbox queue that orders
//! them; and the one place a sandbox changes state ([`ControlPlane::transition`]), which
//! records the matching event.
//!
//! Ordering: a call joins its sandbox's queue before it is acknowledged (`202`), and calls run
//! one at a time in queue order. So an acknowledged pause is never undone by an earlier resume
//! that finishes later, and five concurrent resumes of a paused sandbox resume it once (the
//! other four find it running and succeed without doing anything).
//!
//! Asking for the state the sandbox is already in succeeds as a no-op (`resume` of a running
//! sandbox, `pause` of a paused one, `suspend` of a suspended one, `wake` of a running one);
//! an illegal move is `invalid_state` (409), checked when the call is made and again when it
//! runs. `wake` is the one verb for every resting state (paused → resume, suspended →
//! restore); `resume` is the paused-only form.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use cove_api_types::{
    LifecycleRequest, Operation, OperationKind, RuntimeCapabilities, Sandbox, SandboxState,
};
use cove_domain::{ids, lifecycle};
use cove_store::{NewEvent, NewOperation};
use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::from_node;
use crate::operations::{deadline_from, request_hash, Begun};
use crate::{ControlPlane, ServiceError};

/// A lifecycle call on a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleVerb {
    /// Freeze its processes.
    Pause,
    /// Thaw them.
    Resume,
    /// Save it to the snapshot store and release its node resources.
    Suspend,
    /// Bring it back to running from whatever resting state it is in: a paused sandbox is
    /// resumed, a suspended one restored from the snapshot store and started.
    Wake,
}

impl LifecycleVerb {
    fn kind(self) -> OperationKind {
        match self {
            LifecycleVerb::Pause => OperationKind::PauseSandbox,
            LifecycleVerb::Resume => OperationKind::ResumeSandbox,
            LifecycleVerb::Suspend => OperationKind::SuspendSandbox,
            LifecycleVerb::Wake => OperationKind::WakeSandbox,
        }
    }

    /// The state the call leads to.
    fn target(self) -> SandboxState {
        match self {
            LifecycleVerb::Pause => SandboxState::Paused,
            LifecycleVerb::Resume | LifecycleVerb::Wake => SandboxState::Running,
            LifecycleVerb::Suspend => SandboxState::Suspended,
        }
    }

    /// Whether the call may be made on a sandbox in `state` (a no-op included).
    fn accepts(self, state: SandboxState) -> bool {
        use SandboxState::*;
        match self {
            LifecycleVerb::Pause => matches!(state, Running | Paused),
            LifecycleVerb::Resume => matches!(state, Paused | Running),
            LifecycleVerb::Suspend => matches!(state, Running | Paused | Suspending | Suspended),
            LifecycleVerb::Wake => matches!(state, Suspended | Waking | Paused | Running),
        }
    }
}

/// A place in a sandbox's lifecycle queue, taken when a call is acknowledged.
pub(crate) struct Ticket {
    acquire: Pin<Box<dyn Future<Output = OwnedMutexGuard<()>> + Send>>,
}

impl Ticket {
    /// Waits for this ticket's turn; `Cancelled` if `cancel` fires first (the place is given
    /// up, later tickets move on).
    pub(crate) async fn wait(
        self,
        cancel: &CancellationToken,
    ) -> Result<OwnedMutexGuard<()>, ServiceError> {
        tokio::select! {
            guard = self.acquire => Ok(guard),
            () = cancel.cancelled() => Err(ServiceError::Cancelled("cancelled by request".into())),
        }
    }
}

impl ControlPlane {
    /// Joins the lifecycle queue of `sandbox_id` now. tokio's mutex is fair (waiters are served
    /// in the order they first polled), so the acquire future is polled once here, before the
    /// call is acknowledged; a no-op waker suffices, as the real one replaces it when the
    /// ticket is awaited.
    pub(crate) fn ticket(&self, sandbox_id: &str) -> Ticket {
        let lock = self.lifecycle_lock(sandbox_id);
        let mut acquire: Pin<Box<dyn Future<Output = OwnedMutexGuard<()>> + Send>> =
            Box::pin(lock.lock_owned());
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if let Poll::Ready(guard) = acquire.as_mut().poll(&mut cx) {
            acquire = Box::pin(std::future::ready(guard));
        }
        Ticket { acquire }
    }

    /// Records API or data-plane access to a sandbox (for idle suspends): a surface calls it
    /// when a client reads or uses the sandbox in a way its own service call does not record.
    pub fn touch(&self, sandbox_id: &str) {
        self.inner
            .activity
            .touch(sandbox_id, self.inner.cfg.clock.now());
    }

    /// What the runtime and snapshot store can do.
    pub fn capabilities(&self) -> RuntimeCapabilities {
        let caps = self.node().capabilities();
        RuntimeCapabilities {
            runtime: caps.runtime,
            boundary: caps.boundary,
            pause: caps.pause,
            suspend_memory: caps.suspend_memory,
            snapshot_store: caps.snapshot_store,
            network: caps.network,
            user_namespaces: caps.user_namespaces,
            volumes: self.volumes_offered().is_ok() && self.volumes_kept(),
            retention: self.inner.cfg.retention.info(),
            default_disk_mib: self.inner.cfg.default_disk_mib,
        }
    }

    /// Accepts a lifecycle call: checks it against the sandbox's state, records its operation
    /// (the same `idempotency_key` with the same body returns the earlier operation), joins the
    /// sandbox's queue, and runs it in the background.
    pub async fn lifecycle(
        &self,
        id: &str,
        verb: LifecycleVerb,
        req: LifecycleRequest,
        idempotency_key: Option<String>,
    ) -> Result<Operation, ServiceError> {
        let hash = idempotency_key.as_ref().map(|_| {
            let body = serde_json::json!({ "sandbox_id": id, "deadline_s": req.deadline_s });
            request_hash(verb.kind(), &body)
        });
        let op = self
            .begin_lifecycle(id, verb, req.deadline_s, idempotency_key, hash, None)
            .await?;
        self.touch(id);
        Ok(op)
    }

    /// Starts a lifecycle operation; `reason` (e.g. `idle`) goes into its event.
    pub(crate) async fn begin_lifecycle(
        &self,
        id: &str,
        verb: LifecycleVerb,
        deadline_s: Option<u64>,
        idempotency_key: Option<String>,
        request_hash: Option<String>,
        reason: Option<&'static str>,
    ) -> Result<Operation, ServiceError> {
        let s = self.get_sandbox(id).await?;
        if !verb.accepts(s.state) {
            return Err(ServiceError::InvalidState {
                id: s.id,
                from: s.state,
                to: verb.target(),
            });
        }
        // A wake makes a suspended sandbox hold CPU and memory again.
        let _quota = if verb == LifecycleVerb::Wake && s.state == SandboxState::Suspended {
            let ask = crate::orgs::quotas::Ask::Wake { size: s.resources };
            Some(self.admit(&s.org, ask).await?)
        } else {
            None
        };
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: s.org.clone(),
            kind: verb.kind(),
            sandbox_id: Some(s.id.clone()),
            template: None,
            release: None,
            idempotency_key,
            request_hash,
            deadline: deadline_from(deadline_s)?,
        };
        let op = match self.operations().begin(new_op).await? {
            Begun::Replayed(op) => return Ok(op),
            Begun::New(op) => op,
        };
        let ticket = self.ticket(&s.id);
        let this = self.clone();
        let op_id = op.id.clone();
        self.operations()
            .run_cancellable(&op, move |cancel| async move {
                let _turn = ticket.wait(&cancel).await?;
                this.apply(&s.id, verb, &op_id, &cancel, reason).await
            });
        Ok(op)
    }

    /// Runs a lifecycle call whose turn has come.
    pub(crate) async fn apply(
        &self,
        id: &str,
        verb: LifecycleVerb,
        op_id: &str,
        cancel: &CancellationToken,
        reason: Option<&'static str>,
    ) -> Result<(), ServiceError> {
        if cancel.is_cancelled() {
            return Err(ServiceError::Cancelled("cancelled by request".into()));
        }
        let s = self.get_sandbox(id).await?;
        let illegal = || ServiceError::InvalidState {
            id: id.to_string(),
            from: s.state,
            to: verb.target(),
        };
        use SandboxState::*;
        match (verb, s.state) {
            (LifecycleVerb::Pause, Paused)
            | (LifecycleVerb::Resume, Running)
            | (LifecycleVerb::Suspend, Suspended)
            | (LifecycleVerb::Wake, Running) => Ok(()),
            (LifecycleVerb::Pause, Running) => {
                self.node()
                    .pause_sandbox(id)
                    .await
                    .map_err(|e| node_err(e, id))?;
                self.move_or_conflict(id, Running, Paused, op_id, reason)
                    .await
            }
            (LifecycleVerb::Resume | LifecycleVerb::Wake, Paused) => {
                self.node()
                    .resume_sandbox(id)
                    .await
                    .map_err(|e| node_err(e, id))?;
                self.move_or_conflict(id, Paused, Running, op_id, reason)
                    .await
            }
            (LifecycleVerb::Suspend, Running | Paused) => {
                self.suspend_now(&s, op_id, cancel, reason).await
            }
            (LifecycleVerb::Wake, Suspended) => self.wake_now(&s, op_id, cancel).await,
            _ => Err(illegal()),
        }
    }

    /// Saves a running or paused sandbox to the snapshot store and releases its node resources.
    /// A failure before the snapshot is complete rolls it back to its state before.
    async fn suspend_now(
        &self,
        s: &Sandbox,
        op_id: &str,
        cancel: &CancellationToken,
        reason: Option<&'static str>,
    ) -> Result<(), ServiceError> {
        let id = s.id.as_str();
        self.move_or_conflict(id, s.state, SandboxState::Suspending, op_id, None)
            .await?;
        let result = self.node().suspend_sandbox(id, cancel.clone()).await;
        match result {
            Ok(info) => {
                info!(sandbox_id = %id, file_bytes = info.file_bytes, "sandbox suspended");
                // Its snapshot's bytes are its org's (`max_snapshot_mib`) until a wake.
                self.store().set_snapshot_bytes(id, info.file_bytes).await?;
                self.finish_suspend(id, Some(op_id), reason).await
            }
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "suspend failed");
                // The snapshot may be complete even so (a failure while releasing resources).
                if matches!(self.node().has_snapshot(id).await, Ok(true))
                    && !matches!(e, cove_node_api::NodeError::Cancelled)
                {
                    self.node()
                        .release_sandbox(id)
                        .await
                        .map_err(|e| node_err(e, id))?;
                    return self.finish_suspend(id, Some(op_id), reason).await;
                }
                let _ = self.node().delete_snapshot(id).await;
                let back = self.prior_state(id).await;
                let why = format!("suspend rolled back: {e}");
                self.transition(id, SandboxState::Suspending, back, Some(&why), Some(op_id))
                    .await?;
                Err(node_err(e, id))
            }
        }
    }

    /// Records a suspend whose snapshot is complete and whose node resources are released.
    pub(crate) async fn finish_suspend(
        &self,
        id: &str,
        op_id: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), ServiceError> {
        // Commands do not survive a suspend on a runtime that cannot save memory; where it can,
        // they are kept until the wake says whether memory really came back.
        if !self.node().capabilities().suspend_memory {
            self.store().mark_guest_restarted(id).await?;
        }
        let moved = self
            .transition(
                id,
                SandboxState::Suspending,
                SandboxState::Suspended,
                reason,
                op_id,
            )
            .await?;
        if !moved {
            // Deleted meanwhile: the delete, queued behind this call, removes the snapshot.
            info!(sandbox_id = %id, "sandbox suspended after it was deleted");
        }
        self.release_volumes_of(id).await;
        Ok(())
    }

    /// Detaches the object volumes sandbox `id` mounted that no sandbox holds any more (after
    /// it was suspended or deleted, or failed to wake).
    pub(crate) async fn release_volumes_of(&self, id: &str) {
        match self.store().get_sandbox(id).await {
            Ok(s) => self.release_object_volumes(&s.org, &s.volumes).await,
            Err(e) => warn!(sandbox_id = %id, error = %e, "cannot read a sandbox's volumes"),
        }
    }

    /// Restores a suspended sandbox and starts it; a failure leaves it suspended.
    async fn wake_now(
        &self,
        s: &Sandbox,
        op_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        let id = s.id.as_str();
        {
            // Checked again where the wake is recorded, under the org's quota lock: another
            // wake or create of the org (through any replica) may have taken the room since
            // this one was accepted.
            let ask = crate::orgs::quotas::Ask::Wake { size: s.resources };
            let _quota = self.admit(&s.org, ask).await?;
            self.move_or_conflict(
                id,
                SandboxState::Suspended,
                SandboxState::Waking,
                op_id,
                None,
            )
            .await?;
        }
        let launch = match self.launch_of(s).await {
            Ok(l) => l,
            Err(e) => {
                let why = format!("wake failed: {e}");
                self.transition(
                    id,
                    SandboxState::Waking,
                    SandboxState::Suspended,
                    Some(&why),
                    Some(op_id),
                )
                .await?;
                return Err(e);
            }
        };
        let policy = launch.network.clone();
        match self.node().wake_sandbox(launch, cancel.clone()).await {
            Ok(woken) => {
                self.resync_network(id, &policy).await;
                if !woken.memory_restored {
                    // Its processes restarted: so does the template's START.
                    if let Err(e) = self.run_startup(id, op_id, cancel).await {
                        warn!(sandbox_id = %id, error = %e, "woken sandbox did not become ready");
                    }
                }
                self.finish_wake(id, Some(op_id), woken.memory_restored)
                    .await?;
                self.touch(id);
                Ok(())
            }
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "wake failed");
                let why = format!("wake failed: {e}");
                self.transition(
                    id,
                    SandboxState::Waking,
                    SandboxState::Suspended,
                    Some(&why),
                    Some(op_id),
                )
                .await?;
                self.release_volumes_of(id).await;
                Err(node_err(e, id))
            }
        }
    }

    /// Records a woken sandbox as running and drops its snapshot (its files live on the node
    /// again).
    pub(crate) async fn finish_wake(
        &self,
        id: &str,
        op_id: Option<&str>,
        memory_restored: bool,
    ) -> Result<(), ServiceError> {
        self.store()
            .set_memory_restored(id, memory_restored)
            .await?;
        if !memory_restored {
            // Processes restarted (a runtime without memory snapshots, or a restore that fell
            // back to a cold boot): the commands from before are gone; keyed ones stay as
            // markers so a retry is told it cannot be answered exactly once.
            self.store().mark_guest_restarted(id).await?;
        }
        self.transition(id, SandboxState::Waking, SandboxState::Running, None, op_id)
            .await?;
        self.store().set_snapshot_bytes(id, 0).await?;
        if let Err(e) = self.node().delete_snapshot(id).await {
            // A stale snapshot is removed by the next start-up reconciliation.
            warn!(sandbox_id = %id, error = %e, "cannot delete the snapshot of a woken sandbox");
        }
        Ok(())
    }

    /// The state a sandbox left for `suspending` (`running` when unknown).
    pub(crate) async fn prior_state(&self, id: &str) -> SandboxState {
        match self.store().prior_state(id).await {
            Ok(Some(s @ (SandboxState::Running | SandboxState::Paused))) => s,
            _ => SandboxState::Running,
        }
    }

    /// Moves a sandbox from `from` to `to`, or fails with `invalid_state` (409) naming the
    /// state it is in now.
    async fn move_or_conflict(
        &self,
        id: &str,
        from: SandboxState,
        to: SandboxState,
        op_id: &str,
        reason: Option<&str>,
    ) -> Result<(), ServiceError> {
        if self.transition(id, from, to, reason, Some(op_id)).await? {
            return Ok(());
        }
        let now = self.get_sandbox(id).await?;
        Err(ServiceError::InvalidState {
            id: id.to_string(),
            from: now.state,
            to,
        })
    }

    /// The one way a sandbox changes state: `from` → `to` if it is in `from` (compare-and-set),
    /// with `reason` as its `state_reason`, recording the move's event (with `op_id`) in the
    /// same transaction. Returns whether it moved. An illegal move is a bug (`internal`).
    pub(crate) async fn transition(
        &self,
        id: &str,
        from: SandboxState,
        to: SandboxState,
        reason: Option<&str>,
        op_id: Option<&str>,
    ) -> Result<bool, ServiceError> {
        if !lifecycle::can_transition(from, to) {
            return Err(ServiceError::Internal(format!(
                "illegal move of sandbox {id} from {} to {}",
                from.as_str(),
                to.as_str()
            )));
        }
        let event = lifecycle::event_for(from, to).map(|kind| NewEvent {
            kind,
            operation_id: op_id.map(str::to_string),
            reason: reason.map(str::to_string),
            destination: None,
            host: None,
            port: None,
            rule: None,
        });
        let moved = self
            .store()
            .transition_with_event(id, &[from], to, reason, event.as_ref())
            .await?;
        if moved {
            if event.is_some() {
                self.inner.events.notify();
            }
            info!(sandbox_id = %id, from = from.as_str(), to = to.as_str(), "sandbox state changed");
        }
        Ok(moved)
    }

    /// Records an event that is not a state move (`sandbox.created`).
    pub(crate) async fn record_event(&self, id: &str, event: NewEvent) -> Result<(), ServiceError> {
        self.store().record_event(id, &event).await?;
        self.inner.events.notify();
        Ok(())
    }
}

fn node_err(e: cove_node_api::NodeError, id: &str) -> ServiceError {
    from_node(e, id)
}
