//! Sandbox lifecycle: create, get, list, delete.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use cove_api_types::{
    CreateSandboxRequest, CreateSandboxResponse, Operation, OperationKind, ReleaseState, Sandbox,
    SandboxList, SandboxState,
};
use cove_domain::{ids, lifecycle, resources, validate, InvalidInput};
use cove_node_api::SandboxLaunch;
use cove_store::{NewOperation, SandboxFilter, StoreError};
use tracing::{info, warn};

use crate::operations::{request_hash, Begun, DEFAULT_DEADLINE};
use crate::{ControlPlane, ServiceError};

/// Template used when a create request names none.
pub const DEFAULT_TEMPLATE: &str = "base";

/// Largest page of a listing.
pub const MAX_PAGE: u32 = 500;

impl ControlPlane {
    /// Accepts a create request: validates it, records the sandbox (`creating`) and its operation,
    /// and starts it in the background. The same `idempotency_key` with the same body returns the
    /// first sandbox and operation.
    pub async fn create_sandbox(
        &self,
        req: CreateSandboxRequest,
        idempotency_key: Option<String>,
    ) -> Result<CreateSandboxResponse, ServiceError> {
        let template = req.template.clone().unwrap_or_else(|| DEFAULT_TEMPLATE.to_string());
        let recipe = self
            .node()
            .recipes()
            .into_iter()
            .find(|r| r.name == template)
            .ok_or_else(|| ServiceError::TemplateNotFound(template.clone()))?;
        let resources = resources::resolve(req.resources.as_ref())?;
        validate::env("env", &req.env)?;
        validate::metadata(&req.metadata)?;
        if let Some(cwd) = &req.cwd {
            validate::path("cwd", cwd.as_bytes())?;
            if !cwd.starts_with('/') {
                return Err(InvalidInput::new("cwd", "must be an absolute path").into());
            }
        }
        if let Some(user) = &req.user {
            validate::user("user", user)?;
        }
        let release = self.pick_release(&template, req.release).await?;

        let body = serde_json::to_value(&req).map_err(|e| ServiceError::Internal(e.to_string()))?;
        let sandbox_id = ids::new_sandbox_id();
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            kind: OperationKind::CreateSandbox,
            sandbox_id: Some(sandbox_id.clone()),
            template: Some(template.clone()),
            release: Some(release),
            request_hash: idempotency_key
                .as_ref()
                .map(|_| request_hash(OperationKind::CreateSandbox, &body)),
            idempotency_key,
            deadline: deadline(),
        };
        let op = match self.operations().begin(new_op).await? {
            Begun::Replayed(op) => {
                let id = op.sandbox_id.clone().unwrap_or_default();
                let sandbox = self.store().get_sandbox(&id).await?;
                return Ok(CreateSandboxResponse { sandbox, operation: op });
            }
            Begun::New(op) => op,
        };

        let mut env = recipe.env.clone();
        env.extend(req.env.clone());
        let now = Utc::now();
        let sandbox = Sandbox {
            id: sandbox_id.clone(),
            template,
            release,
            state: SandboxState::Creating,
            state_reason: None,
            runtime: self.inner.cfg.runtime.clone(),
            resources,
            env,
            metadata: req.metadata,
            cwd: req.cwd.unwrap_or(recipe.workdir),
            user: req.user.unwrap_or(recipe.user),
            created_at: now,
            updated_at: now,
        };
        if let Err(e) = self.store().insert_sandbox(&sandbox).await {
            let err = cove_api_types::OperationError {
                code: cove_api_types::ErrorCode::Internal,
                message: "could not record the sandbox".into(),
            };
            self.operations().set_state(&op.id, cove_api_types::OperationState::Failed, Some(err)).await;
            return Err(e.into());
        }
        info!(sandbox_id = %sandbox.id, op_id = %op.id, "sandbox accepted");

        let this = self.clone();
        let launch = SandboxLaunch {
            id: sandbox.id.clone(),
            template: sandbox.template.clone(),
            release,
            vcpus: resources.vcpus,
            memory_mib: resources.memory_mib,
            pids_max: resources.pids_max,
        };
        self.operations().run(&op, async move { this.start_sandbox(launch).await });
        Ok(CreateSandboxResponse { sandbox, operation: op })
    }

    async fn pick_release(&self, template: &str, asked: Option<u32>) -> Result<u32, ServiceError> {
        let releases = self.store().list_releases(template).await?;
        let ready = releases.iter().filter(|r| r.state == ReleaseState::Ready);
        let found = match asked {
            Some(n) => ready.into_iter().find(|r| r.number == n),
            None => ready.into_iter().max_by_key(|r| r.number),
        };
        match (found, asked) {
            (Some(r), _) => Ok(r.number),
            (None, Some(n)) => Err(ServiceError::ReleaseNotFound(format!(
                "template {template} has no ready release {n}"
            ))),
            (None, None) => Err(ServiceError::ReleaseNotFound(format!(
                "template {template} has no ready release; build one with `cove template build \
                 {template}`"
            ))),
        }
    }

    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), ServiceError> {
        let lock = self.lifecycle_lock(&launch.id);
        let _guard = lock.lock().await;
        let id = launch.id.clone();
        match self.node().start_sandbox(launch).await {
            Ok(()) => {
                let moved = self
                    .store()
                    .transition_sandbox(&id, &[SandboxState::Creating], SandboxState::Running, None)
                    .await?;
                if !moved {
                    // Deleted while starting: the delete operation (waiting on the lock) removes it.
                    info!(sandbox_id = %id, "sandbox started after it was deleted");
                }
                Ok(())
            }
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "sandbox failed to start");
                let _ = self.node().destroy_sandbox(&id).await;
                let reason = format!("start failed: {e}");
                self.store()
                    .transition_sandbox(&id, &[SandboxState::Creating], SandboxState::Failed, Some(&reason))
                    .await?;
                Err(crate::error::from_node(e, &id, crate::error::Subject::File, "sandbox"))
            }
        }
    }

    /// A sandbox that is not deleted.
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox, ServiceError> {
        if !ids::is_well_formed("sb", id) {
            return Err(ServiceError::SandboxNotFound(id.to_string()));
        }
        match self.store().get_sandbox(id).await {
            Ok(s) if !lifecycle::is_gone(s.state) => Ok(s),
            Ok(_) | Err(StoreError::NotFound) => Err(ServiceError::SandboxNotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// A sandbox that runs (else `sandbox_not_running` / `sandbox_not_found`).
    pub async fn running_sandbox(&self, id: &str) -> Result<Sandbox, ServiceError> {
        let s = self.get_sandbox(id).await?;
        if !lifecycle::serves_commands(s.state) {
            return Err(ServiceError::SandboxNotRunning { id: s.id, state: s.state });
        }
        Ok(s)
    }

    /// A page of sandboxes, newest first. `cursor` is the opaque `next_cursor` of the page before.
    pub async fn list_sandboxes(
        &self,
        state: Option<SandboxState>,
        template: Option<String>,
        limit: Option<u32>,
        cursor: Option<String>,
    ) -> Result<SandboxList, ServiceError> {
        let limit = limit.unwrap_or(100).clamp(1, MAX_PAGE);
        let after = cursor.map(|c| decode_cursor(&c)).transpose()?;
        let filter = SandboxFilter { state, template, include_deleted: false, limit, after };
        let sandboxes = self.store().list_sandboxes(&filter).await?;
        let next_cursor = if sandboxes.len() == limit as usize {
            sandboxes.last().map(|s| encode_cursor(s.created_at, &s.id))
        } else {
            None
        };
        Ok(SandboxList { sandboxes, next_cursor })
    }

    /// Starts deleting a sandbox. Deleting a deleted (or unknown) sandbox is `sandbox_not_found`.
    pub async fn delete_sandbox(&self, id: &str) -> Result<Operation, ServiceError> {
        let s = self.get_sandbox(id).await?;
        if s.state == SandboxState::Deleting {
            return Err(ServiceError::InvalidState {
                id: s.id,
                from: s.state,
                to: SandboxState::Deleting,
            });
        }
        let moved = self
            .store()
            .transition_sandbox(id, &[s.state], SandboxState::Deleting, None)
            .await?;
        if !moved {
            // Changed under us; report what it is now.
            let now = self.get_sandbox(id).await?;
            return Err(ServiceError::InvalidState {
                id: now.id,
                from: now.state,
                to: SandboxState::Deleting,
            });
        }
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            kind: OperationKind::DeleteSandbox,
            sandbox_id: Some(id.to_string()),
            template: None,
            release: None,
            idempotency_key: None,
            request_hash: None,
            deadline: deadline(),
        };
        let Begun::New(op) = self.operations().begin(new_op).await? else {
            return Err(ServiceError::Internal("delete replayed".into()));
        };
        let this = self.clone();
        let sandbox_id = id.to_string();
        self.operations().run(&op, async move { this.destroy(&sandbox_id).await });
        Ok(op)
    }

    async fn destroy(&self, id: &str) -> Result<(), ServiceError> {
        let lock = self.lifecycle_lock(id);
        let guard = lock.lock().await;
        if let Err(e) = self.node().destroy_sandbox(id).await {
            let reason = format!("delete failed: {e}");
            self.store()
                .transition_sandbox(id, &[SandboxState::Deleting], SandboxState::Failed, Some(&reason))
                .await?;
            return Err(crate::error::from_node(e, id, crate::error::Subject::File, "sandbox"));
        }
        self.store().delete_commands_of(id).await?;
        self.store()
            .transition_sandbox(id, &[SandboxState::Deleting], SandboxState::Deleted, None)
            .await?;
        drop(guard);
        self.forget_lock(id);
        info!(sandbox_id = %id, "sandbox deleted");
        Ok(())
    }
}

fn deadline() -> DateTime<Utc> {
    Utc::now() + ChronoDuration::from_std(DEFAULT_DEADLINE).unwrap_or(ChronoDuration::minutes(30))
}

fn encode_cursor(at: DateTime<Utc>, id: &str) -> String {
    format!("{}~{id}", at.timestamp_micros())
}

fn decode_cursor(c: &str) -> Result<(DateTime<Utc>, String), ServiceError> {
    let bad = || ServiceError::Invalid(InvalidInput::new("cursor", "is not a cursor from a listing"));
    let (micros, id) = c.split_once('~').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let at = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(bad)?;
    Ok((at, id.to_string()))
}
