//! The controller: a background loop started by the server and stopped at shutdown. Every
//! `controller_interval` it flushes activity times to the store, suspends idle sandboxes,
//! and (every minute) enforces the retention of operations,
//! events, ended commands and suspended sandboxes (`retention.rs`);
//! every `reconcile_interval` it re-checks desired against actual state
//! (`ControlPlane::reconcile_running`). Beside it run the pool loop, the repair loop
//! (`repair.rs`: guest agents checked every `agent_repair.interval`, degraded sandboxes
//! repaired) and, on a single server, the expiry loop ([`Expiry`], `expiry.rs`), which every
//! replica on a shared store runs whether it leads or not.
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
use crate::orgs::scope::as_system;
use crate::{ControlPlane, ServiceError};

/// How often records past their retention are purged (`retention.rs`).
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// How long the idle check waits for a guest to list its commands.
const COMMANDS_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest time between expiry passes (`controller_interval` when shorter).
const EXPIRY_EVERY: Duration = Duration::from_secs(1);

/// A running controller loop, and the pool loop beside it (`ControlPlane::reconcile_pools`
/// at start, when woken, and every `controller_interval`).
pub struct Controller {
    stop: CancellationToken,
    task: JoinHandle<()>,
    pools: JoinHandle<()>,
    repair: JoinHandle<()>,
    expiry: Option<Expiry>,
}

impl Controller {
    /// Starts the loops over `cp`, the expiry loop among them (a server alone on its store).
    pub fn start(cp: ControlPlane) -> Controller {
        let expiry = Expiry::start(cp.clone());
        let mut c = Controller::start_leading(cp);
        c.expiry = Some(expiry);
        c
    }

    /// Starts the loops a leader among replicas runs (every replica runs its own expiry
    /// loop).
    pub(crate) fn start_leading(cp: ControlPlane) -> Controller {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let span = tracing::info_span!("controller");
        let pools_cp = cp.clone();
        let repair_cp = cp.clone();
        let denials = (cp.clone(), stop.clone());
        // The loops are no tenant's request: they run as the server (`orgs::scope`).
        tokio::spawn(
            as_system(async move { denials.0.record_denials(denials.1).await })
                .instrument(tracing::info_span!("network_denials")),
        );
        let task =
            tokio::spawn(as_system(async move { cp.control_loop(token).await }).instrument(span));
        let token = stop.clone();
        let span = tracing::info_span!("pool_controller");
        let pools = tokio::spawn(
            as_system(async move { pools_cp.pool_loop(token).await }).instrument(span),
        );
        let token = stop.clone();
        let span = tracing::info_span!("repair_controller");
        let repair = tokio::spawn(
            as_system(async move { repair_cp.repair_loop(token).await }).instrument(span),
        );
        Controller {
            stop,
            task,
            pools,
            repair,
            expiry: None,
        }
    }

    /// Stops the loop and waits (at most 10 s) for its current pass to end. Operations it
    /// started keep running.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.pools).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.repair).await;
        if let Some(expiry) = self.expiry {
            expiry.stop().await;
        }
    }
}

/// The expiry loop (`expiry.rs`): every `controller_interval`, at most every second, claims
/// the sandboxes whose expiry has passed and deletes or suspends them. Every replica runs one.
pub struct Expiry {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Expiry {
    /// Starts the loop over `cp`.
    pub fn start(cp: ControlPlane) -> Expiry {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let every = cp
            .inner
            .cfg
            .controller_interval
            .min(EXPIRY_EVERY)
            .max(Duration::from_millis(50));
        let span = tracing::info_span!("expiry");
        let task = tokio::spawn(
            as_system(async move {
                loop {
                    tokio::select! {
                        () = token.cancelled() => break,
                        () = tokio::time::sleep(every) => {}
                    }
                    if let Err(e) = cp.end_expired().await {
                        warn!(error = %e, "expiry pass failed");
                    }
                }
            })
            .instrument(span),
        );
        Expiry { stop, task }
    }

    /// Stops the loop and waits (at most 10 s) for its current pass to end.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
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
            if last_purge.is_none_or(|t| t.elapsed() >= PURGE_EVERY) {
                last_purge = Some(Instant::now());
                if let Err(e) = self.enforce_retention().await {
                    warn!(error = %e, "purge failed");
                }
            }
            // A node lost, or back with sandboxes placed nowhere, since the last pass: its
            // sandboxes are settled now, not at the next periodic reconciliation.
            let lost = self.placement().expire_lost().await;
            for node in &lost {
                self.detach_lost_node_volumes(node).await;
            }
            let node_lost = !lost.is_empty() | self.placement().take_changed();
            if node_lost || last_reconcile.elapsed() >= self.inner.cfg.reconcile_interval {
                last_reconcile = Instant::now();
                match self.reconcile_running().await {
                    // Settle those at the next pass rather than the next periodic one.
                    Ok(true) => self.placement().mark_changed(),
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
}
