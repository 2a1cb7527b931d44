//! Guest agent health and repair: [`NodeAgent::check_agent_now`] pings a sandbox's agent with
//! a deadline; [`NodeAgent::repair_now`] brings back a sandbox whose agent died or hangs
//! without losing its files.
//!
//! On runc and qemu the guest agent is the sandbox's init (PID 1 of its namespaces, or the
//! VM's init): an agent killed from the host (`kill -9`, the OOM killer) takes the sandbox's
//! processes with it, and a hung one cannot be replaced while it holds PID 1. So a repair
//! stops what is left of the sandbox (the runtime keeps its files: `upper/` or its disk) and
//! starts it again on the same directory, with its network and counters; commands that ran
//! are gone and the caller says so.

use cove_node_api::{AgentHealth, RepairInfo};

use super::*;

impl NodeAgent {
    /// See [`NodeLifecycle::check_agent`]. Reasons name no host path (they become the
    /// sandbox's `state_reason`); the detail goes to the log.
    pub(super) async fn check_agent_now(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<AgentHealth, NodeError> {
        let dead = |reason: String| Ok(AgentHealth::Dead { reason });
        match self.runtime.state(id).await.map_err(runtime_err)? {
            None => {
                if tokio::fs::metadata(self.sandbox_dir(id)).await.is_err() {
                    return Err(NodeError::SandboxNotFound(id.to_string()));
                }
                dead("the sandbox's container is gone (its files are kept)".into())
            }
            Some(RuntimeState::Paused) => Ok(AgentHealth::Ok),
            Some(RuntimeState::Created | RuntimeState::Stopped) => {
                match self.runtime.failure(id, &self.sandbox_dir(id)).await {
                    // The sandbox itself failed (a guest kernel panic, the VM process gone):
                    // not an agent to repair; reconciliation fails it with this reason.
                    Some(reason) => Err(NodeError::FailedPrecondition(format!(
                        "the sandbox stopped: {reason}"
                    ))),
                    None => dead("the guest agent (the sandbox's init) exited".to_string()),
                }
            }
            Some(RuntimeState::Running) => {
                let Ok(client) = self.guest(id) else {
                    return dead("the node holds no connection to its guest agent".into());
                };
                match tokio::time::timeout(timeout, client.ping()).await {
                    Ok(Ok(())) => Ok(AgentHealth::Ok),
                    Ok(Err(e)) => {
                        warn!(sandbox_id = %id, error = %e, "guest agent does not answer");
                        dead("the guest agent does not accept calls".into())
                    }
                    Err(_) => {
                        warn!(sandbox_id = %id, timeout_ms = timeout.as_millis() as u64,
                            "guest agent ping timed out");
                        Ok(AgentHealth::Unresponsive {
                            reason: format!(
                                "the guest agent did not answer a ping within {} ms",
                                timeout.as_millis()
                            ),
                        })
                    }
                }
            }
        }
    }

    /// See [`NodeLifecycle::repair_sandbox`]: stop what is left (files kept), start again on
    /// the same directory, wait for the agent.
    pub(super) async fn repair_now(&self, launch: &SandboxLaunch) -> Result<RepairInfo, NodeError> {
        let id = launch.id.as_str();
        let dir = self.sandbox_dir(id);
        if tokio::fs::metadata(&dir).await.is_err() {
            return Err(NodeError::SandboxNotFound(id.to_string()));
        }
        // Its traffic keeps counting from where it was.
        let carried = self.net_counters(id);
        self.set_guest(id, None);
        self.runtime.stop(id, &dir).await.map_err(runtime_err)?;
        self.detach_network(id).await?;
        self.launch(launch, carried, true).await?;
        info!(sandbox_id = %id, "sandbox repaired: restarted on its own files");
        Ok(RepairInfo {
            processes_restarted: true,
        })
    }
}
