//! Start-up reconciliation: make the store and the node agree after a restart or a crash.
//!
//! - operations left `pending`/`running` end `failed` (the work that ran them is gone);
//! - releases left `building` end `failed` and their files are removed;
//! - sandboxes left `creating` end `failed`, `deleting` ones are finished;
//! - `running`/`paused` sandboxes are re-adopted when the node still runs them, else `failed`;
//! - containers the node has but the store does not want are destroyed (no orphans).

use std::collections::HashSet;

use cove_api_types::{ErrorCode, OperationError, OperationState, ReleaseState, SandboxState};
use cove_node_api::NodeSandboxState;
use tracing::{info, warn};

use crate::{ControlPlane, ServiceError};

impl ControlPlane {
    /// Reconciles desired (store) and actual (node) state. Run once at start, before serving.
    pub async fn reconcile(&self) -> Result<(), ServiceError> {
        for op in self.store().unfinished_operations().await? {
            let err = OperationError {
                code: ErrorCode::Unavailable,
                message: "the server restarted while the operation ran".into(),
            };
            self.operations().set_state(&op.id, OperationState::Failed, Some(err)).await;
            info!(op_id = %op.id, "interrupted operation marked failed");
        }
        for r in self.store().building_releases().await? {
            let _ = self.node().remove_release(&r.template, r.number).await;
            self.store().set_release_state(&r.template, r.number, ReleaseState::Failed, None).await?;
        }
        let mut wanted = HashSet::new();
        let live = [SandboxState::Creating, SandboxState::Deleting, SandboxState::Running, SandboxState::Paused];
        for s in self.store().sandboxes_in(&live).await? {
            match s.state {
                SandboxState::Creating => {
                    let _ = self.node().destroy_sandbox(&s.id).await;
                    let why = "the server restarted while the sandbox was being created";
                    self.mark(&s.id, s.state, SandboxState::Failed, Some(why)).await?;
                }
                SandboxState::Deleting => {
                    match self.node().destroy_sandbox(&s.id).await {
                        Ok(()) => {
                            self.store().delete_commands_of(&s.id).await?;
                            self.mark(&s.id, s.state, SandboxState::Deleted, None).await?;
                        }
                        Err(e) => {
                            warn!(sandbox_id = %s.id, error = %e, "cannot finish delete");
                            let why = format!("delete failed: {e}");
                            self.mark(&s.id, s.state, SandboxState::Failed, Some(&why)).await?;
                        }
                    }
                }
                _ => match self.node().adopt_sandbox(&s.id).await {
                    Ok(Some(NodeSandboxState::Running)) => {
                        wanted.insert(s.id.clone());
                        self.mark(&s.id, s.state, SandboxState::Running, None).await?;
                        info!(sandbox_id = %s.id, "sandbox re-adopted");
                    }
                    Ok(Some(NodeSandboxState::Paused)) => {
                        wanted.insert(s.id.clone());
                        self.mark(&s.id, s.state, SandboxState::Paused, None).await?;
                    }
                    other => {
                        if let Err(e) = &other {
                            warn!(sandbox_id = %s.id, error = %e, "cannot adopt sandbox");
                        }
                        let _ = self.node().destroy_sandbox(&s.id).await;
                        let why = "the sandbox stopped while the server was down";
                        self.mark(&s.id, s.state, SandboxState::Failed, Some(why)).await?;
                    }
                },
            }
        }
        match self.node().list_sandboxes().await {
            Ok(ids) => {
                for id in ids.into_iter().filter(|id| !wanted.contains(id)) {
                    warn!(sandbox_id = %id, "destroying orphaned sandbox");
                    if let Err(e) = self.node().destroy_sandbox(&id).await {
                        warn!(sandbox_id = %id, error = %e, "cannot destroy orphan");
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot list the node's sandboxes"),
        }
        Ok(())
    }

    async fn mark(
        &self,
        id: &str,
        from: SandboxState,
        to: SandboxState,
        why: Option<&str>,
    ) -> Result<(), ServiceError> {
        if from != to {
            self.store().transition_sandbox(id, &[from], to, why).await?;
        }
        Ok(())
    }
}
