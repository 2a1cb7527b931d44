//! Operation takeover: the leader of replicas on a shared store claims operations whose lease
//! ran out (their replica died, or lost the store for longer than the lease) and drives each
//! to its end from where the sandbox is now. A claim is one replica's (the store's claim is
//! atomic) and is leased to the claimer, so no operation runs twice at once.
//!
//! - A move the dead replica left half-way is settled first, as a restart would settle it
//!   (`reconcile.rs`): `suspending` ends `suspended` when the snapshot is complete, else is
//!   rolled back; `waking` ends `running` when the node runs the sandbox, else is back to
//!   `suspended`; `deleting` is finished.
//! - Then the operation runs again: a create adopts the sandbox when its node runs it, else
//!   removes what was half made and starts it anew; pause, resume, suspend and wake apply their
//!   verb (a no-op when the sandbox is already where it asked); a delete ends `deleted`.
//! - A sandbox left in a passing state with no operation at all (its replica died between the
//!   two writes) is settled as a restart would settle it, once it has been so for a lease.
//! - A build, a checkpoint, a rollback, or a create from a checkpoint cannot be resumed: it ends
//!   `failed` (`unavailable`; the sandbox of such a create ends `failed` too), and a release
//!   left `building` ends `failed`.

use cove_api_types::{
    ErrorCode, Operation, OperationError, OperationKind, OperationState, SandboxState,
};
use cove_node_api::NodeSandboxState;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::lifecycle::LifecycleVerb;
use crate::{ControlPlane, ServiceError};

/// How a create from a checkpoint marks its operation's log (followed by the checkpoint id).
pub(crate) const RESTORE_LOG: &str = "restore from checkpoint ";

/// Most operations claimed in one pass.
const CLAIM_BATCH: u32 = 64;
/// Attempts at finishing a taken-over create, and the pause between them.
const CREATE_ATTEMPTS: u32 = 5;
const CREATE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl ControlPlane {
    /// Claims the operations whose lease ran out and starts driving each to its end.
    pub(crate) async fn take_over_expired(&self) {
        let Some(lease) = self.operations().lease().cloned() else {
            return;
        };
        let now = chrono::Utc::now();
        let span =
            chrono::Duration::from_std(lease.duration).unwrap_or(chrono::Duration::seconds(10));
        let claimed = self
            .store()
            .claim_expired_operations(&lease.owner, now, now - span, now + span, CLAIM_BATCH)
            .await;
        match claimed {
            Ok(ops) => {
                for op in ops {
                    info!(op_id = %op.id, kind = op.kind.as_str(),
                        sandbox_id = op.sandbox_id.as_deref().unwrap_or(""),
                        "taking over an operation of a replica that stopped");
                    crate::metrics::taken_over(op.kind);
                    self.take_over(op).await;
                }
            }
            Err(e) => warn!(error = %e, "cannot claim expired operations"),
        }
    }

    /// Settles sandboxes a replica that died left in a passing state with no operation to
    /// finish it (it died between the state's change and the operation's record, as a delete
    /// may): the way a restart settles them, once they have been so for longer than a lease.
    pub(crate) async fn settle_orphans(&self) -> Result<(), ServiceError> {
        let Some(lease) = self.operations().lease().cloned() else {
            return Ok(());
        };
        let passing = [
            SandboxState::Creating,
            SandboxState::Suspending,
            SandboxState::Waking,
            SandboxState::Deleting,
        ];
        let span =
            chrono::Duration::from_std(lease.duration).unwrap_or(chrono::Duration::seconds(10));
        let before = chrono::Utc::now() - span;
        for s in self.store().sandboxes_in(&passing).await? {
            if s.updated_at >= before || self.store().has_unfinished_operation(&s.id).await? {
                continue;
            }
            let Ok(_turn) = self.lifecycle_lock(&s.id).try_lock_owned() else {
                continue;
            };
            // Read again under the lock: an operation may have been recorded meanwhile.
            if self.store().has_unfinished_operation(&s.id).await? {
                continue;
            }
            let now = self.store().get_sandbox(&s.id).await?;
            if now.state != s.state {
                continue;
            }
            warn!(sandbox_id = %s.id, state = s.state.as_str(),
                "settling a sandbox left passing with no operation");
            let has_snapshot = self.node().has_snapshot(&s.id).await.ok();
            self.settle(&s.id, s.state, has_snapshot).await?;
        }
        Ok(())
    }

    async fn take_over(&self, op: Operation) {
        let verb = match op.kind {
            OperationKind::PauseSandbox => Some(LifecycleVerb::Pause),
            OperationKind::ResumeSandbox => Some(LifecycleVerb::Resume),
            OperationKind::SuspendSandbox => Some(LifecycleVerb::Suspend),
            OperationKind::WakeSandbox => Some(LifecycleVerb::Wake),
            _ => None,
        };
        let resumable = verb.is_some()
            || matches!(
                op.kind,
                OperationKind::CreateSandbox | OperationKind::DeleteSandbox
            );
        let Some(id) = op.sandbox_id.clone().filter(|_| resumable) else {
            if let (OperationKind::BuildRelease, Some(t), Some(n)) =
                (op.kind, &op.template, op.release)
            {
                if let Err(e) = self.fail_release_build(t, n).await {
                    warn!(op_id = %op.id, error = %e, "cannot fail an interrupted build");
                }
            }
            let err = OperationError {
                code: ErrorCode::Unavailable,
                message: format!(
                    "the replica running this {} stopped; it cannot be resumed",
                    op.kind.as_str()
                ),
            };
            self.operations()
                .set_state(&op.id, OperationState::Failed, Some(err))
                .await;
            return;
        };
        let ticket = self.ticket(&id);
        let this = self.clone();
        let (op_id, kind) = (op.id.clone(), op.kind);
        self.operations()
            .run_cancellable(&op, move |cancel| async move {
                let _turn = ticket.wait(&cancel).await?;
                this.drive_taken(&id, kind, verb, &op_id, &cancel).await
            });
    }

    /// Drives a taken-over operation of sandbox `id` to its end.
    async fn drive_taken(
        &self,
        id: &str,
        kind: OperationKind,
        verb: Option<LifecycleVerb>,
        op_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        let s = self.store().get_sandbox(id).await?;
        if matches!(
            s.state,
            SandboxState::Suspending | SandboxState::Waking | SandboxState::Deleting
        ) {
            let has_snapshot = self.node().has_snapshot(id).await.ok();
            self.settle(id, s.state, has_snapshot).await?;
        }
        match (kind, verb) {
            (OperationKind::CreateSandbox, _) => self.finish_create(id, op_id, cancel).await,
            (_, Some(verb)) => self.apply(id, verb, op_id, cancel, None).await,
            _ => match self.store().get_sandbox(id).await?.state {
                SandboxState::Deleted => Ok(()),
                other => Err(ServiceError::Unavailable(format!(
                    "the delete could not be finished: the sandbox is {}",
                    other.as_str()
                ))),
            },
        }
    }

    /// Finishes a create its replica left: adopts the sandbox when its node runs it, else
    /// removes what was half made and starts it again.
    async fn finish_create(
        &self,
        id: &str,
        op_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        let s = self.store().get_sandbox(id).await?;
        let from_checkpoint = self
            .store()
            .operation_logs(op_id, 0, 16)
            .await?
            .iter()
            .any(|(_, line)| line.starts_with(RESTORE_LOG));
        if from_checkpoint && s.state == SandboxState::Creating {
            let _ = self.node().destroy_sandbox(id).await;
            let why = "the replica restoring it from a checkpoint stopped; create it again";
            self.transition(
                id,
                SandboxState::Creating,
                SandboxState::Failed,
                Some(why),
                Some(op_id),
            )
            .await?;
            return Err(ServiceError::Unavailable(why.into()));
        }
        match s.state {
            SandboxState::Creating => {}
            SandboxState::Running | SandboxState::Paused | SandboxState::Degraded => return Ok(()),
            other => {
                return Err(ServiceError::Unavailable(format!(
                    "the create could not be finished: the sandbox is {}",
                    other.as_str()
                )))
            }
        }
        // The node may still be finishing the first attempt (its call outlives the replica
        // that made it): adopt it once it runs, else remove what was half made and start again;
        // a start that collides with the first attempt's leftovers is tried again.
        let mut failed = None;
        for attempt in 0..CREATE_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(CREATE_RETRY).await;
            }
            if let Some(NodeSandboxState::Running) = self.adopt(id).await {
                info!(sandbox_id = %id, "taken-over create adopted from its node");
                self.transition(
                    id,
                    SandboxState::Creating,
                    SandboxState::Running,
                    None,
                    Some(op_id),
                )
                .await?;
                self.touch(id);
                return Ok(());
            }
            let _ = self.node().destroy_sandbox(id).await;
            let launch = self.launch_of(&s).await?;
            let policy = launch.network.clone();
            failed = match self.node().start_sandbox(launch).await {
                Ok(()) => {
                    self.resync_network(id, &policy).await;
                    self.run_startup(id, op_id, cancel).await.err()
                }
                Err(e) => {
                    warn!(sandbox_id = %id, attempt, error = %e, "taken-over create did not start");
                    Some(crate::error::from_node(e, id))
                }
            };
            if failed.is_none() || cancel.is_cancelled() {
                break;
            }
        }
        if let Some(e) = failed {
            warn!(sandbox_id = %id, error = %e, "taken-over create failed");
            let _ = self.node().destroy_sandbox(id).await;
            let reason = format!("start failed: {e}");
            self.transition(
                id,
                SandboxState::Creating,
                SandboxState::Failed,
                Some(&reason),
                Some(op_id),
            )
            .await?;
            return Err(e);
        }
        self.transition(
            id,
            SandboxState::Creating,
            SandboxState::Running,
            None,
            Some(op_id),
        )
        .await?;
        self.touch(id);
        info!(sandbox_id = %id, "taken-over create finished");
        Ok(())
    }
}
