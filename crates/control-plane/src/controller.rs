//! The controller: a background loop started by the server and stopped at shutdown. Every
//! `controller_interval` it flushes activity times to the store, suspends idle sandboxes,
//! deletes sandboxes whose TTL has passed, and (every minute) enforces the retention of operations,
//! events, ended commands and suspended sandboxes (`retention.rs`);
//! every `reconcile_interval` it re-checks desired against actual state
//! (`ControlPlane::reconcile_running`). Beside it run the pool loop and the repair loop
//! (`repair.rs`: guest agents checked every `agent_repair.interval`, degraded sandboxes
//! repaired).
//!
//! Idle means: no API or data-plane access, no state change and no command running in the
//! guest for the sandbox's `idle_timeout_s` (0 = never). A running sandbox with a running command is
//! touched instead; a paused sandbox's frozen commands do not count.

use std::time::Duration;

use cove_api_types::SandboxState;
use cove_domain::CommandState;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::lifecycle::LifecycleVerb;
use crate::{ControlPlane, ServiceError};

/// How often records past their retention are purged (`retention.rs`).
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// How long the idle check waits for a guest to list its commands.
const COMMANDS_TIMEOUT: Duration = Duration::from_secs(2);

/// A running controller loop, and the pool loop beside it (`ControlPlane::reconcile_pools`
/// at start, when woken, and every `controller_interval`).
pub struct Controller {
    stop: CancellationToken,
    task: JoinHandle<()>,
    pools: JoinHandle<()>,
    repair: JoinHandle<()>,
}

impl Controller {
    /// Starts the loop over `cp`.
    pub fn start(cp: ControlPlane) -> Controller {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let span = tracing::info_span!("controller");
        let pools_cp = cp.clone();
        let repair_cp = cp.clone();
        let denials = (cp.clone(), stop.clone());
        tokio::spawn(
            async move { denials.0.record_denials(denials.1).await }
                .instrument(tracing::info_span!("network_denials")),
        );
        let task = tokio::spawn(async move { cp.control_loop(token).await }.instrument(span));
        let token = stop.clone();
        let span = tracing::info_span!("pool_controller");
        let pools = tokio::spawn(async move { pools_cp.pool_loop(token).await }.instrument(span));
        let token = stop.clone();
        let span = tracing::info_span!("repair_controller");
        let repair =
            tokio::spawn(async move { repair_cp.repair_loop(token).await }.instrument(span));
        Controller {
            stop,
            task,
            pools,
            repair,
        }
    }

    /// Stops the loop and waits (at most 10 s) for its current pass to end. Operations it
    /// started keep running.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.pools).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.repair).await;
    }
}

impl ControlPlane {
    async fn control_loop(&self, stop: CancellationToken) {
        let every = self
            .inner
            .cfg
            .controller_interval
            .max(Duration::from_millis(50));
        let mut last_purge: Option<Instant> = None;
        let mut last_reconcile = Instant::now();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
            if let Err(e) = self.flush_activity().await {
                warn!(error = %e, "cannot flush activity");
            }
            if let Err(e) = self.suspend_idle().await {
                warn!(error = %e, "idle check failed");
            }
            if let Err(e) = self.end_expired().await {
                warn!(error = %e, "TTL check failed");
            }
            if last_purge.is_none_or(|t| t.elapsed() >= PURGE_EVERY) {
                last_purge = Some(Instant::now());
                if let Err(e) = self.enforce_retention().await {
                    warn!(error = %e, "purge failed");
                }
            }
            // A node lost, or back with sandboxes placed nowhere, since the last pass: its
            // sandboxes are settled now, not at the next periodic reconciliation.
            let mut node_lost = false;
            if let Some(c) = &self.inner.cluster {
                let lost = c.expire();
                c.record_states(&lost).await;
                for node in &lost {
                    self.detach_lost_node_volumes(node).await;
                }
                node_lost = !lost.is_empty() | c.take_changed();
            }
            if node_lost || last_reconcile.elapsed() >= self.inner.cfg.reconcile_interval {
                last_reconcile = Instant::now();
                match self.reconcile_running().await {
                    // Settle those at the next pass rather than the next periodic one.
                    Ok(true) => {
                        if let Some(c) = &self.inner.cluster {
                            c.mark_changed();
                        }
                    }
                    Ok(false) => {}
                    Err(e) => warn!(error = %e, "periodic reconciliation failed"),
                }
            }
        }
        // Keep what was seen since the last pass.
        if let Err(e) = self.flush_activity().await {
            warn!(error = %e, "cannot flush activity");
        }
    }

    /// Writes the in-memory activity times to the store.
    pub(crate) async fn flush_activity(&self) -> Result<(), ServiceError> {
        let seen = self.inner.activity.take();
        Ok(self.store().record_activity(&seen).await?)
    }

    /// Starts an idle suspend of every running or paused sandbox idle past its timeout.
    async fn suspend_idle(&self) -> Result<(), ServiceError> {
        let now = self.inner.cfg.clock.now();
        let live = [SandboxState::Running, SandboxState::Paused];
        for s in self.store().sandboxes_in(&live).await? {
            if s.idle_timeout_s == 0 {
                continue;
            }
            // A state change (a resume, a wake) restarts the idle clock too.
            let last = s.last_activity_at.unwrap_or(s.created_at).max(s.updated_at);
            let idle = (now - last).to_std().unwrap_or(Duration::ZERO);
            if idle < Duration::from_secs(s.idle_timeout_s) {
                continue;
            }
            if self.store().has_unfinished_operation(&s.id).await? {
                continue;
            }
            if s.state == SandboxState::Running && self.has_running_command(&s.id).await {
                self.touch(&s.id);
                continue;
            }
            match self
                .begin_lifecycle(
                    &s.id,
                    LifecycleVerb::Suspend,
                    None,
                    None,
                    None,
                    Some("idle"),
                )
                .await
            {
                Ok(op) => info!(sandbox_id = %s.id, op_id = %op.id, idle_s = idle.as_secs(),
                    "suspending an idle sandbox"),
                Err(e) => warn!(sandbox_id = %s.id, error = %e, "cannot suspend an idle sandbox"),
            }
        }
        Ok(())
    }

    async fn has_running_command(&self, id: &str) -> bool {
        match tokio::time::timeout(COMMANDS_TIMEOUT, self.node().commands(id)).await {
            Ok(Ok(commands)) => commands.iter().any(|c| c.state == CommandState::Running),
            // An agent that does not answer is not proof of activity.
            _ => false,
        }
    }

    /// Deletes every sandbox whose TTL has passed.
    async fn end_expired(&self) -> Result<(), ServiceError> {
        let now = self.inner.cfg.clock.now();
        let states = [
            SandboxState::Creating,
            SandboxState::Running,
            SandboxState::Paused,
            SandboxState::Suspended,
            SandboxState::Failed,
        ];
        for s in self.store().sandboxes_in(&states).await? {
            let Some(ttl) = s.ttl_s else { continue };
            let ends = s.created_at + chrono::Duration::seconds(ttl.min(i64::MAX as u64) as i64);
            if now < ends {
                continue;
            }
            match self.delete_sandbox(&s.id, None).await {
                Ok(op) => {
                    info!(sandbox_id = %s.id, op_id = %op.id, "deleting a sandbox at its TTL")
                }
                Err(e) => warn!(sandbox_id = %s.id, error = %e, "cannot delete an expired sandbox"),
            }
        }
        Ok(())
    }
}
