//! Reconciliation: make the store (desired state) and the node (actual state) agree.
//!
//! At start-up, before serving ([`ControlPlane::reconcile`]), after a clean stop or a crash:
//! - half-written snapshot uploads are removed; releases left `building` end `failed`;
//! - `creating`: adopted (→ `running`) when the node runs it, else removed (→ `failed`);
//! - `running`/`paused`: re-adopted with their commands when the node still runs them (the
//!   guest agent keeps running under runc while the server is down), else removed (→ `failed`);
//! - `suspending`: finished (→ `suspended`) when its snapshot is complete, else rolled back to
//!   the state before (the sandbox was only frozen) or, with no sandbox left, `failed`;
//! - `waking`: finished (→ `running`) when the node runs it, else back to `suspended` with the
//!   snapshot (wake again), or `failed` without one;
//! - `degraded`: back to `running` when the node runs it and its agent answers, else kept
//!   `degraded` with its files for the repair controller (`repair.rs`);
//! - `deleting`: finished (→ `deleted`);
//! - whatever the node or the snapshot store holds that no sandbox wants is removed;
//! - every unfinished operation ends: `succeeded` when its sandbox reached the state it asked
//!   for, else `failed` (`unavailable`) with the state the sandbox is in.
//!
//! While serving ([`ControlPlane::reconcile_running`], every `reconcile_interval`): sandboxes
//! that vanished from the node end `failed` (a running one whose init stopped but whose files
//! are there is left to the repair controller); node leftovers and snapshots of sandboxes that no
//! longer want them are removed. Sandboxes with a lifecycle call in flight are skipped.

use std::collections::HashSet;

use cove_api_types::{ErrorCode, OperationError, OperationKind, OperationState, SandboxState};
use cove_node_api::NodeSandboxState;
use tracing::{info, warn};

use crate::{ControlPlane, ServiceError};

/// Every state a sandbox can be in before it is deleted.
const LIVE: [SandboxState; 9] = [
    SandboxState::Creating,
    SandboxState::Running,
    SandboxState::Degraded,
    SandboxState::Paused,
    SandboxState::Suspending,
    SandboxState::Suspended,
    SandboxState::Waking,
    SandboxState::Deleting,
    SandboxState::Failed,
];

impl ControlPlane {
    /// Start-up reconciliation. Run once, before serving and before the controller starts.
    pub async fn reconcile(&self) -> Result<(), ServiceError> {
        for r in self.store().building_releases().await? {
            self.fail_release_build(&r.template, r.number).await?;
        }
        if let Err(e) = self.node().sweep_snapshots().await {
            warn!(error = %e, "cannot sweep half-written snapshots");
        }
        // `None` when the snapshot store cannot be listed: then nothing is decided on the
        // absence of a snapshot (a store that is down must not fail suspended sandboxes).
        let snapshots: Option<HashSet<String>> = match self.node().list_snapshots().await {
            Ok(ids) => Some(ids.into_iter().collect()),
            Err(e) => {
                warn!(error = %e, "cannot list snapshots");
                None
            }
        };
        let mut keep_on_node = HashSet::new();
        for s in self.store().sandboxes_in(&LIVE).await? {
            let id = s.id.as_str();
            let has_snapshot = snapshots.as_ref().map(|ids| ids.contains(id));
            if self.settle(id, s.state, has_snapshot).await? {
                keep_on_node.insert(s.id.clone());
            }
        }
        self.remove_unwanted(&keep_on_node, false).await?;
        self.fail_interrupted_checkpoints().await?;
        self.end_interrupted_operations().await
    }

    /// Fails the checkpoints a restart interrupted while they were saved, and drops what the
    /// snapshot store has of them.
    async fn fail_interrupted_checkpoints(&self) -> Result<(), ServiceError> {
        let why = "the server restarted while the checkpoint was saved";
        for id in self.store().fail_unfinished_checkpoints(why).await? {
            if let Err(e) = self.node().delete_checkpoint(&id).await {
                warn!(checkpoint_id = %id, error = %e, "cannot remove an interrupted checkpoint");
            }
            info!(checkpoint_id = %id, "interrupted checkpoint failed");
        }
        Ok(())
    }

    /// Settles one sandbox found in `state` at start-up; returns whether its node resources
    /// stay.
    pub(crate) async fn settle(
        &self,
        id: &str,
        state: SandboxState,
        has_snapshot: Option<bool>,
    ) -> Result<bool, ServiceError> {
        use SandboxState::*;
        let restarted = "after a server restart";
        match state {
            Creating => match self.adopt(id).await {
                Some(NodeSandboxState::Running) => {
                    self.transition(id, Creating, Running, Some(restarted), None)
                        .await?;
                    Ok(true)
                }
                _ => {
                    let _ = self.node().destroy_sandbox(id).await;
                    let why = "the server restarted while the sandbox was being created";
                    self.transition(id, Creating, Failed, Some(why), None)
                        .await?;
                    Ok(false)
                }
            },
            Running | Paused => {
                if has_snapshot == Some(true) {
                    // Left over from a wake interrupted after the sandbox ran again.
                    let _ = self.node().delete_snapshot(id).await;
                }
                match self.adopt(id).await {
                    Some(NodeSandboxState::Running) => {
                        if state != Running {
                            self.transition(id, state, Running, Some(restarted), None)
                                .await?;
                        }
                        info!(sandbox_id = %id, "sandbox re-adopted");
                        Ok(true)
                    }
                    Some(NodeSandboxState::Paused) => {
                        if state != Paused {
                            self.transition(id, state, Paused, Some(restarted), None)
                                .await?;
                        }
                        info!(sandbox_id = %id, "paused sandbox re-adopted");
                        Ok(true)
                    }
                    _ => {
                        let _ = self.node().destroy_sandbox(id).await;
                        let why = "the sandbox stopped while the server was down";
                        self.transition(id, state, Failed, Some(why), None).await?;
                        Ok(false)
                    }
                }
            }
            Degraded => {
                if let Some(NodeSandboxState::Running) = self.adopt(id).await {
                    let why = "its guest agent answers again after a server restart";
                    self.transition(id, Degraded, Running, Some(why), None)
                        .await?;
                }
                // Else the repair controller repairs it from its files.
                Ok(true)
            }
            Suspending => {
                if has_snapshot == Some(true) {
                    self.node().release_sandbox(id).await.map_err(internal)?;
                    self.finish_suspend(id, None, Some("finished after a server restart"))
                        .await?;
                    return Ok(false);
                }
                // No complete snapshot, but the upload may have put some of its artifacts in
                // place (the manifest goes last): a sandbox that is not suspended keeps none.
                if let Err(e) = self.node().delete_snapshot(id).await {
                    warn!(sandbox_id = %id, error = %e, "cannot remove a half-written snapshot");
                }
                match self.adopt(id).await {
                    Some(node @ (NodeSandboxState::Running | NodeSandboxState::Paused)) => {
                        let back = self.prior_state(id).await;
                        if back == Running && node == NodeSandboxState::Paused {
                            self.node().resume_sandbox(id).await.map_err(internal)?;
                        }
                        let why = "suspend interrupted by a server restart and rolled back";
                        self.transition(id, Suspending, back, Some(why), None)
                            .await?;
                        Ok(true)
                    }
                    _ => {
                        let _ = self.node().destroy_sandbox(id).await;
                        let why = "the server restarted while the sandbox was being suspended, \
                                   before its snapshot was complete";
                        self.transition(id, Suspending, Failed, Some(why), None)
                            .await?;
                        Ok(false)
                    }
                }
            }
            Waking => match self.adopt(id).await {
                Some(NodeSandboxState::Running) => {
                    let memory = self.node().capabilities().suspend_memory;
                    self.finish_wake(id, None, memory).await?;
                    Ok(true)
                }
                _ => {
                    self.node().release_sandbox(id).await.map_err(internal)?;
                    // An unknown answer (store down) keeps the sandbox suspended: wake again.
                    if has_snapshot != Some(false) {
                        let why = "wake interrupted by a server restart; wake it again";
                        self.transition(id, Waking, Suspended, Some(why), None)
                            .await?;
                    } else {
                        let why = "wake interrupted by a server restart and the snapshot is gone";
                        self.transition(id, Waking, Failed, Some(why), None).await?;
                    }
                    Ok(false)
                }
            },
            Deleting => {
                match self.node().destroy_sandbox(id).await {
                    Ok(()) => {
                        self.store().delete_commands_of(id).await?;
                        self.transition(id, Deleting, Deleted, None, None).await?;
                    }
                    Err(e) => {
                        warn!(sandbox_id = %id, error = %e, "cannot finish delete");
                        let why = format!("delete failed: {e}");
                        self.transition(id, Deleting, Failed, Some(&why), None)
                            .await?;
                    }
                }
                Ok(false)
            }
            Suspended => {
                if has_snapshot == Some(false) {
                    let why = "the snapshot of the suspended sandbox is missing";
                    self.transition(id, Suspended, Failed, Some(why), None)
                        .await?;
                }
                Ok(false)
            }
            Failed | Deleted => Ok(false),
        }
    }

    pub(crate) async fn adopt(&self, id: &str) -> Option<NodeSandboxState> {
        match self.node().adopt_sandbox(id).await {
            Ok(Some(state @ (NodeSandboxState::Running | NodeSandboxState::Paused))) => {
                self.rearm_secrets(id).await;
                Some(state)
            }
            Ok(state) => state,
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "cannot adopt sandbox");
                None
            }
        }
    }

    /// Removes node resources no sandbox wants (keeping the snapshot of a suspended one), and
    /// snapshots of sandboxes that are not suspended. While serving (`live`), sandboxes whose
    /// lifecycle lock is taken are left alone, and each decision is made on the sandbox's state
    /// read under its lock: a state read before the node was listed may be stale (a wake or a
    /// create that finished meanwhile would otherwise be torn down as a leftover).
    async fn remove_unwanted(
        &self,
        keep_on_node: &HashSet<String>,
        live: bool,
    ) -> Result<(), ServiceError> {
        match self.node().list_sandboxes().await {
            Ok(ids) => {
                for id in ids.into_iter().filter(|id| !keep_on_node.contains(id)) {
                    let Some(_turn) = self.quiet_turn(&id, live) else {
                        continue;
                    };
                    let Some(state) = self.state_now(&id).await else {
                        continue;
                    };
                    if state == Some(SandboxState::Failed) && self.kept_for_inspection(&id).await {
                        // Its READY failed: it stays until deleted (the delete removes it).
                        // After a restart it is adopted again, or removed when it stopped.
                        if live || self.adopt(&id).await == Some(NodeSandboxState::Running) {
                            continue;
                        }
                    } else if live
                        && matches!(state, Some(s) if s != SandboxState::Failed && s != SandboxState::Suspended)
                    {
                        continue;
                    }
                    if state == Some(SandboxState::Suspended) {
                        warn!(sandbox_id = %id, "releasing node leftovers of a suspended sandbox");
                        let _ = self.node().release_sandbox(&id).await;
                    } else {
                        warn!(sandbox_id = %id, "destroying orphaned sandbox");
                        if let Err(e) = self.node().destroy_sandbox(&id).await {
                            warn!(sandbox_id = %id, error = %e, "cannot destroy orphan");
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot list the node's sandboxes"),
        }
        match self.node().list_snapshots().await {
            Ok(ids) => {
                for id in ids {
                    let Some(_turn) = self.quiet_turn(&id, live) else {
                        continue;
                    };
                    let Some(state) = self.state_now(&id).await else {
                        continue;
                    };
                    let wanted = matches!(
                        state,
                        Some(
                            SandboxState::Suspended
                                | SandboxState::Suspending
                                | SandboxState::Waking
                        )
                    );
                    if wanted || (live && state.is_some_and(|s| s != SandboxState::Failed)) {
                        continue;
                    }
                    warn!(sandbox_id = %id, "deleting an orphaned snapshot");
                    if let Err(e) = self.node().delete_snapshot(&id).await {
                        warn!(sandbox_id = %id, error = %e, "cannot delete orphaned snapshot");
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot list snapshots"),
        }
        Ok(())
    }

    /// The state of sandbox `id` as the store has it now: `Some(None)` when no live sandbox
    /// has this id (never created, or deleted), `None` when the store cannot tell (then
    /// nothing is decided about it).
    async fn state_now(&self, id: &str) -> Option<Option<SandboxState>> {
        match self.store().get_sandbox(id).await {
            Ok(s) if LIVE.contains(&s.state) || s.state == SandboxState::Failed => {
                Some(Some(s.state))
            }
            Ok(_) | Err(cove_store::StoreError::NotFound) => Some(None),
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "cannot read sandbox state");
                None
            }
        }
    }

    /// Whether failed sandbox `id` is one kept on its node for inspection (`false` when the
    /// store cannot tell: it is then removed like any failed sandbox's leftovers).
    async fn kept_for_inspection(&self, id: &str) -> bool {
        self.store().get_sandbox(id).await.is_ok_and(|s| {
            cove_domain::lifecycle::kept_for_inspection(s.state, s.state_reason.as_deref())
        })
    }

    /// The lifecycle lock of `id` if nothing holds it (always "free" at start-up).
    fn quiet_turn(&self, id: &str, live: bool) -> Option<Option<tokio::sync::OwnedMutexGuard<()>>> {
        if !live {
            return Some(None);
        }
        self.lifecycle_lock(id).try_lock_owned().ok().map(Some)
    }

    /// Ends every operation left unfinished by the previous run.
    async fn end_interrupted_operations(&self) -> Result<(), ServiceError> {
        for op in self.store().unfinished_operations().await? {
            let now = match &op.sandbox_id {
                Some(id) => self.store().get_sandbox(id).await.ok().map(|s| s.state),
                None => None,
            };
            let reached = matches!(
                (op.kind, now),
                (OperationKind::CreateSandbox, Some(SandboxState::Running))
                    | (OperationKind::DeleteSandbox, Some(SandboxState::Deleted))
                    | (OperationKind::PauseSandbox, Some(SandboxState::Paused))
                    | (OperationKind::ResumeSandbox, Some(SandboxState::Running))
                    | (OperationKind::SuspendSandbox, Some(SandboxState::Suspended))
                    | (OperationKind::WakeSandbox, Some(SandboxState::Running))
            );
            if reached {
                self.operations()
                    .set_state(&op.id, OperationState::Succeeded, None)
                    .await;
                info!(op_id = %op.id, "interrupted operation completed by reconciliation");
                continue;
            }
            let message = match now {
                Some(state) => format!(
                    "the server restarted while the operation ran; the sandbox is {}",
                    state.as_str()
                ),
                None => "the server restarted while the operation ran".to_string(),
            };
            let err = OperationError {
                code: ErrorCode::Unavailable,
                message,
            };
            self.operations()
                .set_state(&op.id, OperationState::Failed, Some(err))
                .await;
            info!(op_id = %op.id, "interrupted operation marked failed");
        }
        Ok(())
    }

    /// Periodic reconciliation while serving. Returns whether it had to pass over a sandbox
    /// of a lost node because a call held its lifecycle lock (a repair's agent check to that
    /// node can, for up to its timeout): the caller then reconciles again soon, so the sandbox
    /// still fails `node_lost` within about the heartbeat timeout.
    pub(crate) async fn reconcile_running(&self) -> Result<bool, ServiceError> {
        let mut keep = HashSet::new();
        let mut busy_on_lost_node = false;
        let live = [SandboxState::Running, SandboxState::Paused];
        let shared = self.operations().lease().is_some();
        for s in self.store().sandboxes_in(&live).await? {
            let Some(_turn) = self.quiet_turn(&s.id, true) else {
                busy_on_lost_node |= self.placement().on_lost_node(&s.id).is_some();
                keep.insert(s.id);
                continue;
            };
            // Another replica may be moving it (its lifecycle lock is that replica's).
            if shared && self.store().has_unfinished_operation(&s.id).await? {
                keep.insert(s.id);
                continue;
            }
            let on_node = match self.node().inspect_sandbox(&s.id).await {
                Ok(state) => state,
                Err(e) => {
                    warn!(sandbox_id = %s.id, error = %e, "cannot inspect sandbox");
                    keep.insert(s.id);
                    continue;
                }
            };
            if matches!(
                on_node,
                Some(NodeSandboxState::Running | NodeSandboxState::Paused)
            ) {
                keep.insert(s.id);
                continue;
            }
            // Its init (the guest agent) died or its container went, but its files are there:
            // the repair controller marks it degraded and restarts it on them.
            if s.state == SandboxState::Running && self.repairable(&s.id).await {
                keep.insert(s.id);
                continue;
            }
            // Re-read under the lock: a call may have moved it meanwhile.
            let Ok(now) = self.store().get_sandbox(&s.id).await else {
                continue;
            };
            if now.state != s.state {
                continue;
            }
            let why = match self.node().failure_reason(&s.id).await {
                Some(reason) => reason,
                None => "the sandbox vanished from its node".to_string(),
            };
            warn!(sandbox_id = %s.id, reason = %why, "sandbox vanished from its node");
            self.transition(&s.id, s.state, SandboxState::Failed, Some(&why), None)
                .await?;
        }
        self.remove_unwanted(&keep, true).await?;
        Ok(busy_on_lost_node)
    }
}

impl ControlPlane {
    /// Whether the node still has what a repair needs of a sandbox whose container stopped or
    /// went (its files): the agent check answers rather than `SandboxNotFound`.
    async fn repairable(&self, id: &str) -> bool {
        let timeout = self.inner.cfg.agent_repair.timeout;
        matches!(
            self.node().check_agent(id, timeout).await,
            Ok(cove_node_api::AgentHealth::Dead { .. })
        )
    }
}

fn internal(e: cove_node_api::NodeError) -> ServiceError {
    ServiceError::Internal(e.to_string())
}
