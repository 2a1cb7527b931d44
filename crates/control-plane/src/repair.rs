//! The repair controller: every [`AgentRepair::interval`] it pings the guest agent of every
//! running sandbox ([`cove_node_api::NodeLifecycle::check_agent`]). One that died, or that
//! did not answer [`AgentRepair::misses`] checks in a row (a busy agent may miss one), moves
//! `running → degraded` (event `sandbox.degraded` with the reason), and the node
//! repairs it ([`cove_node_api::NodeLifecycle::repair_sandbox`]: restarted on its own files);
//! then it moves `degraded → running` (event `sandbox.repaired`). After
//! [`AgentRepair::max_attempts`] failed repairs in a row it ends `failed` with the last error.
//!
//! Commands that ran when the agent died end with it: their records are marked as ended by
//! the restart, and asking for one answers `409 guest_restarted` with the repair's reason
//! (`command_record` in `commands.rs`). A sandbox with a lifecycle call in flight is skipped
//! this pass (its lifecycle lock is taken).

use std::collections::HashMap;
use std::time::Duration;

use cove_api_types::SandboxState;
use cove_node_api::{AgentHealth, NodeError};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::{ControlPlane, ServiceError};

/// Settings of the repair controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentRepair {
    /// How often running sandboxes' agents are pinged (default 5 s; `--agent-check-interval-ms`).
    pub interval: Duration,
    /// How long an agent has to answer a ping (default 3 s).
    pub timeout: Duration,
    /// Failed repairs in a row before the sandbox ends `failed` (default 3, at least 1).
    pub max_attempts: u32,
    /// Unanswered pings in a row (the agent's process alive) before the sandbox is degraded
    /// (default 3, at least 1). A dead agent is degraded at the first check.
    pub misses: u32,
}

impl Default for AgentRepair {
    fn default() -> Self {
        AgentRepair {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(3),
            max_attempts: 3,
            misses: 3,
        }
    }
}

/// Failed repairs in a row per degraded sandbox, and the reason of each sandbox's last repair
/// that restarted its processes (what an old command id is told).
#[derive(Default)]
pub(crate) struct Attempts {
    failed: Mutex<HashMap<String, u32>>,
    missed: Mutex<HashMap<String, u32>>,
    restarted: Mutex<HashMap<String, String>>,
}

/// Adds one to `id`'s count in `map`; returns the count.
fn count_one(map: &Mutex<HashMap<String, u32>>, id: &str) -> u32 {
    let mut m = map.lock();
    let n = m.entry(id.to_string()).or_insert(0);
    *n += 1;
    *n
}

impl Attempts {
    /// Counts one more failed repair of `id`; returns the count.
    fn fail(&self, id: &str) -> u32 {
        count_one(&self.failed, id)
    }

    /// Counts one more unanswered ping of `id`; returns the count.
    fn miss(&self, id: &str) -> u32 {
        count_one(&self.missed, id)
    }

    fn clear_misses(&self, id: &str) {
        self.missed.lock().remove(id);
    }

    fn clear(&self, id: &str) {
        self.failed.lock().remove(id);
    }

    fn set_restarted(&self, id: &str, reason: String) {
        self.restarted.lock().insert(id.to_string(), reason);
    }

    /// Drops everything kept about sandbox `id` (it was deleted).
    pub(crate) fn forget(&self, id: &str) {
        for map in [&self.failed, &self.missed] {
            map.lock().remove(id);
        }
        self.restarted.lock().remove(id);
    }

    /// Why the processes of sandbox `id` last restarted in a repair, if they did.
    pub(crate) fn restarted(&self, id: &str) -> Option<String> {
        self.restarted.lock().get(id).cloned()
    }
}

impl ControlPlane {
    /// Runs a repair pass every [`AgentRepair::interval`] until `stop`.
    pub(crate) async fn repair_loop(&self, stop: CancellationToken) {
        let every = self
            .inner
            .cfg
            .agent_repair
            .interval
            .max(Duration::from_millis(50));
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
            if let Err(e) = self.repair_pass().await {
                warn!(error = %e, "agent repair pass failed");
            }
        }
    }

    /// One pass: checks every running sandbox's agent, repairs every degraded sandbox.
    pub async fn repair_pass(&self) -> Result<(), ServiceError> {
        let states = [SandboxState::Running, SandboxState::Degraded];
        for s in self.store().sandboxes_in(&states).await? {
            let span = tracing::info_span!("repair", sandbox_id = %s.id);
            self.check_and_repair(&s.id).instrument(span).await?;
        }
        Ok(())
    }

    /// Checks (running) or repairs (degraded) one sandbox under its lifecycle lock; a sandbox
    /// whose lock is taken is left for the next pass.
    async fn check_and_repair(&self, id: &str) -> Result<(), ServiceError> {
        let Ok(_turn) = self.lifecycle_lock(id).try_lock_owned() else {
            return Ok(());
        };
        // Read under the lock: a call may have moved it since the listing.
        let Ok(s) = self.store().get_sandbox(id).await else {
            return Ok(());
        };
        let cfg = self.inner.cfg.agent_repair;
        if s.state == SandboxState::Running {
            let reason = match self.node().check_agent(id, cfg.timeout).await {
                Ok(AgentHealth::Ok) => {
                    self.inner.repairs.clear_misses(id);
                    return Ok(());
                }
                Ok(AgentHealth::Dead { reason }) => reason,
                Ok(AgentHealth::Unresponsive { reason }) => {
                    let n = self.inner.repairs.miss(id);
                    if n < cfg.misses.max(1) {
                        warn!(sandbox_id = %id, missed = n, "guest agent missed a ping");
                        return Ok(());
                    }
                    format!("{reason} ({n} checks in a row)")
                }
                // Nothing of it on the node, or the node does not answer: periodic
                // reconciliation settles those, not a repair.
                Err(e) => {
                    warn!(sandbox_id = %id, error = %e, "cannot check the guest agent");
                    return Ok(());
                }
            };
            self.inner.repairs.clear_misses(id);
            warn!(sandbox_id = %id, reason = %reason, "guest agent unresponsive");
            let moved = self
                .transition(
                    id,
                    SandboxState::Running,
                    SandboxState::Degraded,
                    Some(&reason),
                    None,
                )
                .await?;
            if !moved {
                return Ok(());
            }
        } else if s.state != SandboxState::Degraded {
            return Ok(());
        }
        // As degraded now, with its reason.
        let Ok(s) = self.store().get_sandbox(id).await else {
            return Ok(());
        };
        if s.state != SandboxState::Degraded {
            return Ok(());
        }
        self.repair(&s).await
    }

    /// Asks the node to repair degraded sandbox `s`; on success it runs again, after
    /// [`AgentRepair::max_attempts`] failures it ends `failed`.
    async fn repair(&self, s: &cove_api_types::Sandbox) -> Result<(), ServiceError> {
        let id = s.id.as_str();
        let launch = self.launch_of(s).await?;
        let cfg = self.inner.cfg.agent_repair;
        match self.node().repair_sandbox(launch).await {
            Ok(info) => {
                self.inner.repairs.clear(id);
                let why = if info.processes_restarted {
                    let degraded = s.state_reason.clone().unwrap_or_default();
                    self.inner.repairs.set_restarted(id, degraded);
                    self.store().mark_guest_restarted(id).await?;
                    "repaired: the guest agent was restarted with the sandbox's processes; \
                     its files are kept, commands that ran ended"
                } else {
                    "repaired: the guest agent was restarted"
                };
                self.rearm_secrets(id).await;
                self.transition(
                    id,
                    SandboxState::Degraded,
                    SandboxState::Running,
                    Some(why),
                    None,
                )
                .await?;
                info!(sandbox_id = %id, "sandbox repaired");
                Ok(())
            }
            Err(e) => {
                let n = self.inner.repairs.fail(id);
                warn!(sandbox_id = %id, attempt = n, error = %e, "repair failed");
                let gone = matches!(e, NodeError::SandboxNotFound(_));
                if !gone && n < cfg.max_attempts.max(1) {
                    return Ok(());
                }
                self.inner.repairs.clear(id);
                let why = if gone {
                    "repair impossible: the sandbox's files are gone from its node".to_string()
                } else {
                    format!("repair failed {n} times: {}", public_reason(&e))
                };
                self.transition(
                    id,
                    SandboxState::Degraded,
                    SandboxState::Failed,
                    Some(&why),
                    None,
                )
                .await?;
                Ok(())
            }
        }
    }
}

/// What a state reason may say of a node error: 5xx kinds carry host detail (logged above),
/// so they are named by kind only.
fn public_reason(e: &NodeError) -> String {
    match e {
        NodeError::Runtime(_) => "the runtime could not restart the sandbox".into(),
        NodeError::Internal(_) | NodeError::Build(_) => "an internal error on its node".into(),
        other => other.to_string(),
    }
}
