//! Checkpoints: take one of a running sandbox (an operation; the sandbox keeps running after
//! a brief freeze), list, get and delete them, roll a sandbox back to one, and fork a running
//! sandbox into new ones through a fresh checkpoint. Creating a sandbox from a checkpoint is
//! [`ControlPlane::create_sandbox`] with `checkpoint`.
//!
//! A checkpoint is a row (`creating` → `ready` | `failed`) and, once `ready`, a complete
//! snapshot in the node's snapshot store under its id. It outlives its sandbox. Taking one and
//! rolling back join the sandbox's lifecycle queue, so they never overlap a pause, suspend or
//! delete of the same sandbox.
//!
//! What a restore brings back depends on the runtime: files always; on runc the processes
//! restart (commands from before are gone, `memory_restored` is false), on qemu the memory
//! comes back with the VM.
//!
//! Volumes are outside every checkpoint: a checkpoint holds none of their data, a rollback
//! leaves them as they are, a fork mounts its parent's volumes at the same paths (read-write
//! ones are then shared with the parent, as any volume mounted by several sandboxes), and a
//! sandbox created from a checkpoint mounts the volumes its create request names (none by
//! default).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use cove_api_types::{
    Checkpoint, CheckpointList, CheckpointState, CreateCheckpointRequest, CreateCheckpointResponse,
    ForkRequest, ForkResponse, Operation, OperationKind, RollbackRequest, Sandbox, SandboxState,
};
use cove_domain::{ids, validate, InvalidInput};
use cove_store::{NewOperation, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::from_node;
use crate::features::Feature;
use crate::operations::{deadline_from, request_hash, Begun};
use crate::orgs::scope;
use crate::{ControlPlane, ServiceError};

/// Most forks one call makes.
pub const MAX_FORKS: u32 = 16;

/// Longest checkpoint name, in bytes.
const MAX_NAME_BYTES: usize = 128;

/// Where a sandbox being created starts from, when not from its release's root filesystem.
#[derive(Debug, Clone)]
pub(crate) struct Restore {
    /// The checkpoint.
    pub(crate) checkpoint_id: String,
    /// The operation saving it, when it may not be `ready` yet (a fork's).
    pub(crate) after_op: Option<String>,
}

impl ControlPlane {
    /// Accepts a checkpoint of running or paused sandbox `sandbox_id`: records it (`creating`)
    /// and its `checkpoint_sandbox` operation, and saves it in the background when the
    /// sandbox's turn comes. The same `idempotency_key` with the same body answers the first
    /// call.
    ///
    /// # Errors
    /// `feature_disabled`, `sandbox_not_found`, `sandbox_not_running` (not running or paused),
    /// `invalid_argument` (`name`), `idempotency_mismatch`.
    pub async fn create_checkpoint(
        &self,
        sandbox_id: &str,
        req: CreateCheckpointRequest,
        idempotency_key: Option<String>,
    ) -> Result<CreateCheckpointResponse, ServiceError> {
        self.inner.cfg.features.require(Feature::Checkpoints)?;
        if let Some(name) = &req.name {
            if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control)
            {
                return Err(InvalidInput::new(
                    "name",
                    "must be 1 to 128 bytes without control characters",
                )
                .into());
            }
        }
        let s = self.checkpointable(sandbox_id).await?;
        self.require_feature(Feature::Checkpoints, &s.org).await?;
        let hash = idempotency_key.as_ref().map(|_| {
            let body = serde_json::json!({ "sandbox_id": s.id, "name": req.name });
            request_hash(OperationKind::CheckpointSandbox, &body)
        });
        // Its size is known once saved: refused only while the org is at or past its
        // `max_snapshot_mib` (held until the checkpoint is recorded).
        let _quota = self
            .admit(&s.org, crate::orgs::quotas::Ask::Snapshot { mib: 1 })
            .await?;
        let (checkpoint, operation) = self
            .begin_checkpoint(&s, req.name, idempotency_key, hash)
            .await?;
        self.touch(&s.id);
        Ok(CreateCheckpointResponse {
            checkpoint,
            operation,
        })
    }

    /// One checkpoint, for `GET /v1/checkpoints/{cid}`.
    ///
    /// # Errors
    /// `feature_disabled`, `checkpoint_not_found`.
    pub async fn checkpoint(&self, id: &str) -> Result<Checkpoint, ServiceError> {
        self.inner.cfg.features.require(Feature::Checkpoints)?;
        let c = self.get_checkpoint(id).await?;
        self.require_feature(Feature::Checkpoints, &c.org).await?;
        Ok(c)
    }

    /// One checkpoint.
    ///
    /// # Errors
    /// `checkpoint_not_found`.
    pub async fn get_checkpoint(&self, id: &str) -> Result<Checkpoint, ServiceError> {
        let caller = scope::require()?;
        if !ids::is_well_formed("ck", id) {
            return Err(ServiceError::CheckpointNotFound(id.to_string()));
        }
        match self.store().get_checkpoint(id).await {
            Ok(c) if caller.sees(&c.org) => Ok(c),
            Ok(_) => Err(ServiceError::CheckpointNotFound(id.to_string())),
            Err(StoreError::NotFound) => Err(ServiceError::CheckpointNotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// The checkpoints of sandbox `sandbox_id` (every checkpoint when `None`), newest first.
    /// A deleted sandbox's checkpoints are still listed.
    ///
    /// # Errors
    /// `feature_disabled`; `sandbox_not_found` for an id no sandbox ever had.
    pub async fn list_checkpoints(
        &self,
        sandbox_id: Option<&str>,
    ) -> Result<CheckpointList, ServiceError> {
        let caller = scope::require()?;
        self.require_feature(Feature::Checkpoints, &caller.org)
            .await?;
        if let Some(id) = sandbox_id {
            match self.store().get_sandbox(id).await {
                Ok(s) if caller.sees(&s.org) => {}
                Ok(_) | Err(StoreError::NotFound) => {
                    return Err(ServiceError::SandboxNotFound(id.to_string()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        let checkpoints = self
            .store()
            .list_checkpoints(caller.listing_org().as_deref(), sandbox_id)
            .await?;
        Ok(CheckpointList { checkpoints })
    }

    /// Deletes a `ready` or `failed` checkpoint: its bytes from the snapshot store, then its
    /// row.
    ///
    /// # Errors
    /// `feature_disabled`, `checkpoint_not_found`, `failed_precondition` while it is being
    /// saved.
    pub async fn delete_checkpoint(&self, id: &str) -> Result<(), ServiceError> {
        self.inner.cfg.features.require(Feature::Checkpoints)?;
        let c = self.get_checkpoint(id).await?;
        self.require_feature(Feature::Checkpoints, &c.org).await?;
        if c.state == CheckpointState::Creating {
            return Err(ServiceError::FailedPrecondition(format!(
                "checkpoint {id} is still being saved (operation {})",
                c.operation_id.as_deref().unwrap_or("unknown")
            )));
        }
        self.node()
            .delete_checkpoint(id)
            .await
            .map_err(|e| from_node(e, &c.sandbox_id))?;
        self.store().delete_checkpoint(id).await?;
        info!(checkpoint_id = %id, sandbox_id = %c.sandbox_id, "checkpoint deleted");
        Ok(())
    }

    /// Accepts a rollback of running or paused sandbox `sandbox_id` to its `ready` checkpoint
    /// `req.checkpoint` (a `rollback_sandbox` operation). When it runs, the sandbox's
    /// processes, files and network are replaced by the checkpoint's and it ends `running`; on
    /// runc the processes restart, so every command of the sandbox ends (its rows are dropped,
    /// keyed ones stay as `guest_restarted` markers). A failed restore leaves the sandbox
    /// `failed` (its node state was already replaced).
    ///
    /// # Errors
    /// `feature_disabled`, `sandbox_not_found`, `sandbox_not_running`,
    /// `checkpoint_not_found`, `invalid_argument` (`checkpoint` of another sandbox),
    /// `failed_precondition` (checkpoint not `ready`), `idempotency_mismatch`.
    pub async fn rollback(
        &self,
        sandbox_id: &str,
        req: RollbackRequest,
        idempotency_key: Option<String>,
    ) -> Result<Operation, ServiceError> {
        self.inner.cfg.features.require(Feature::Checkpoints)?;
        let s = self.checkpointable(sandbox_id).await?;
        self.require_feature(Feature::Checkpoints, &s.org).await?;
        let c = self.ready_checkpoint(&req.checkpoint).await?;
        if c.sandbox_id != s.id {
            return Err(InvalidInput::new(
                "checkpoint",
                "is a checkpoint of another sandbox (create a sandbox from it instead)",
            )
            .into());
        }
        let hash = idempotency_key.as_ref().map(|_| {
            let body = serde_json::json!({ "sandbox_id": s.id, "checkpoint": c.id,
                "deadline_s": req.deadline_s });
            request_hash(OperationKind::RollbackSandbox, &body)
        });
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: s.org.clone(),
            kind: OperationKind::RollbackSandbox,
            sandbox_id: Some(s.id.clone()),
            template: None,
            release: None,
            idempotency_key,
            request_hash: hash,
            deadline: deadline_from(req.deadline_s)?,
        };
        let op = match self.operations().begin(new_op).await? {
            Begun::Replayed(op) => return Ok(op),
            Begun::New(op) => op,
        };
        let ticket = self.ticket(&s.id);
        let this = self.clone();
        let op_id = op.id.clone();
        let id = s.id.clone();
        self.operations()
            .run_cancellable(&op, move |cancel| async move {
                let _turn = ticket.wait(&cancel).await?;
                this.rollback_now(&id, &c, &op_id, &cancel).await
            });
        self.touch(&s.id);
        Ok(op)
    }

    /// Forks running or paused sandbox `sandbox_id` into `req.count` new sandboxes: takes a
    /// fresh checkpoint of it and creates each fork from it (their create operations wait for
    /// the checkpoint). A fork has its own id, hostname and network address, the parent's
    /// template, release, resources, environment, working directory, user and egress policy,
    /// `req.metadata` as its labels, and no secrets. It mounts the parent's volumes at the
    /// same paths, read-only where the parent's are (read-write ones are shared with it).
    ///
    /// # Errors
    /// `feature_disabled` (`fork` or `checkpoints`; `volumes` when the parent mounts volumes
    /// and the feature is off for its org), `sandbox_not_found`, `sandbox_not_running`,
    /// `invalid_argument` (`count` 1 to 16, `metadata`).
    pub async fn fork(
        &self,
        sandbox_id: &str,
        req: ForkRequest,
    ) -> Result<ForkResponse, ServiceError> {
        self.inner.cfg.features.require(Feature::Fork)?;
        self.inner.cfg.features.require(Feature::Checkpoints)?;
        if req.count == 0 || req.count > MAX_FORKS {
            return Err(InvalidInput::new("count", "must be 1 to 16").into());
        }
        validate::metadata(&req.metadata)?;
        let s = self.checkpointable(sandbox_id).await?;
        self.require_feature(Feature::Fork, &s.org).await?;
        self.require_feature(Feature::Checkpoints, &s.org).await?;
        // Held until the forks are recorded: the volumes they mount cannot be deleted
        // meanwhile (the parent may be deleted and its volumes with it).
        let _volumes = if s.volumes.is_empty() {
            None
        } else {
            self.volumes_offered()?;
            self.require_feature(Feature::Volumes, &s.org).await?;
            let held = self.lock_volumes(&s.org).await?;
            self.check_fork_volumes(&s.org, &s.volumes).await?;
            Some(held)
        };
        let quota = self
            .admit_sandboxes(&s.org, &s.resources, req.count)
            .await?;
        // The fork's checkpoint is kept too: snapshot bytes of the org.
        self.check_quota(&quota, crate::orgs::quotas::Ask::Snapshot { mib: 1 })
            .await?;
        let (checkpoint, operation) = self
            .begin_checkpoint(&s, Some(format!("fork of {}", s.id)), None, None)
            .await?;
        let mut sandboxes = Vec::with_capacity(req.count as usize);
        for _ in 0..req.count {
            let fork = self.sandbox_from(&checkpoint, &s, req.metadata.clone());
            let restore = Restore {
                checkpoint_id: checkpoint.id.clone(),
                after_op: Some(operation.id.clone()),
            };
            sandboxes.push(
                self.launch(fork, None, None, None, BTreeMap::new(), Some(restore))
                    .await?,
            );
        }
        self.touch(&s.id);
        info!(sandbox_id = %s.id, checkpoint_id = %checkpoint.id, count = req.count, "sandbox forked");
        Ok(ForkResponse {
            checkpoint,
            operation,
            sandboxes,
        })
    }

    /// A new sandbox (`creating`) of checkpoint `c`'s template, release and resources, with
    /// `like`'s defaults (environment, cwd, user, idle timeout, egress policy) and volumes.
    pub(crate) fn sandbox_from(
        &self,
        c: &Checkpoint,
        like: &Sandbox,
        metadata: BTreeMap<String, String>,
    ) -> Sandbox {
        let now = Utc::now();
        Sandbox {
            id: ids::new_sandbox_id(),
            org: c.org.clone(),
            template: c.template.clone(),
            release: c.release,
            release_digest: like.release_digest.clone(),
            state: SandboxState::Creating,
            state_reason: None,
            runtime: self.inner.cfg.runtime.clone(),
            resources: c.resources,
            env: like.env.clone(),
            metadata,
            cwd: like.cwd.clone(),
            user: like.user.clone(),
            created_at: now,
            updated_at: now,
            idle_timeout_s: like.idle_timeout_s,
            ttl_s: None,
            expires_at: None,
            on_expiry: cove_api_types::OnExpiry::Delete,
            last_activity_at: Some(now),
            memory_restored: None,
            network: like.network.clone(),
            secrets: BTreeMap::new(),
            public: like.public,
            volumes: like.volumes.clone(),
        }
    }

    /// A checkpoint that is `ready`.
    ///
    /// # Errors
    /// `checkpoint_not_found`, `failed_precondition` (still being saved, or failed).
    pub(crate) async fn ready_checkpoint(&self, id: &str) -> Result<Checkpoint, ServiceError> {
        let c = self.get_checkpoint(id).await?;
        match c.state {
            CheckpointState::Ready => Ok(c),
            CheckpointState::Creating => Err(ServiceError::FailedPrecondition(format!(
                "checkpoint {id} is still being saved (operation {})",
                c.operation_id.as_deref().unwrap_or("unknown")
            ))),
            CheckpointState::Failed => Err(ServiceError::FailedPrecondition(format!(
                "checkpoint {id} failed: {}",
                c.state_reason.as_deref().unwrap_or("unknown reason")
            ))),
        }
    }

    /// Waits until the checkpoint saved by operation `op_id` is `ready` (a fork's create
    /// waits for its parent's checkpoint).
    ///
    /// # Errors
    /// `cancelled` when `cancel` fires first; `failed_precondition` when the checkpoint
    /// failed.
    pub(crate) async fn await_checkpoint(
        &self,
        r: &Restore,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        if let Some(op_id) = &r.after_op {
            loop {
                let op = tokio::select! {
                    op = self.operations().wait(op_id, Duration::from_secs(30)) => op?,
                    () = cancel.cancelled() => {
                        return Err(ServiceError::Cancelled("cancelled by request".into()))
                    }
                };
                if op.state.is_final() {
                    break;
                }
            }
        }
        self.ready_checkpoint(&r.checkpoint_id).await.map(drop)
    }

    /// A sandbox that can be checkpointed now (`running` or `paused`).
    async fn checkpointable(&self, id: &str) -> Result<Sandbox, ServiceError> {
        let s = self.get_sandbox(id).await?;
        if !matches!(s.state, SandboxState::Running | SandboxState::Paused) {
            return Err(ServiceError::SandboxNotRunning {
                id: s.id,
                state: s.state,
            });
        }
        Ok(s)
    }

    /// Records checkpoint `name` of `s` and its operation, and saves it when `s`'s turn
    /// comes.
    async fn begin_checkpoint(
        &self,
        s: &Sandbox,
        name: Option<String>,
        idempotency_key: Option<String>,
        request_hash: Option<String>,
    ) -> Result<(Checkpoint, Operation), ServiceError> {
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: s.org.clone(),
            kind: OperationKind::CheckpointSandbox,
            sandbox_id: Some(s.id.clone()),
            template: None,
            release: None,
            idempotency_key,
            request_hash,
            deadline: deadline_from(None)?,
        };
        let op = match self.operations().begin(new_op).await? {
            Begun::Replayed(op) => {
                let found = self
                    .store()
                    .list_checkpoints(Some(&s.org), Some(&s.id))
                    .await?
                    .into_iter()
                    .find(|c| c.operation_id.as_deref() == Some(op.id.as_str()))
                    .ok_or_else(|| {
                        ServiceError::Internal(format!("operation {} has no checkpoint", op.id))
                    })?;
                return Ok((found, op));
            }
            Begun::New(op) => op,
        };
        let checkpoint = Checkpoint {
            id: ids::new_checkpoint_id(),
            org: s.org.clone(),
            sandbox_id: s.id.clone(),
            name,
            state: CheckpointState::Creating,
            state_reason: None,
            template: s.template.clone(),
            release: s.release,
            resources: s.resources,
            env: s.env.clone(),
            cwd: s.cwd.clone(),
            user: s.user.clone(),
            runtime: s.runtime.clone(),
            memory: false,
            file_bytes: 0,
            pause_ms: None,
            operation_id: Some(op.id.clone()),
            created_at: Utc::now(),
        };
        if let Err(e) = self.store().insert_checkpoint(&checkpoint).await {
            let err = cove_api_types::OperationError {
                code: cove_api_types::ErrorCode::Internal,
                message: "could not record the checkpoint".into(),
            };
            self.operations()
                .set_state(&op.id, cove_api_types::OperationState::Failed, Some(err))
                .await;
            return Err(e.into());
        }
        let ticket = self.ticket(&s.id);
        let this = self.clone();
        let c = checkpoint.clone();
        self.operations()
            .run_cancellable(&op, move |cancel| async move {
                let saved = async {
                    let _turn = ticket.wait(&cancel).await?;
                    this.save_checkpoint(&c, &cancel).await
                }
                .await;
                if let Err(e) = &saved {
                    this.checkpoint_failed(&c.id, &e.public_message()).await;
                }
                saved
            });
        Ok((checkpoint, op))
    }

    /// Saves checkpoint `c` on the node and records it `ready`.
    async fn save_checkpoint(
        &self,
        c: &Checkpoint,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        let s = self.checkpointable(&c.sandbox_id).await?;
        let info = self
            .node()
            .checkpoint_sandbox(&s.id, &c.id, cancel.clone())
            .await
            .map_err(|e| from_node(e, &s.id))?;
        let ready = self
            .store()
            .checkpoint_ready(&c.id, info.file_bytes, info.memory, info.pause_ms)
            .await?;
        if !ready {
            // Deleted meanwhile (it cannot be: deletes refuse `creating`), or failed by a
            // restart's reconciliation: its bytes go.
            let _ = self.node().delete_checkpoint(&c.id).await;
            return Err(ServiceError::Internal(format!(
                "checkpoint {} is no longer being saved",
                c.id
            )));
        }
        crate::metrics::checkpoint_pause(Duration::from_millis(info.pause_ms));
        info!(sandbox_id = %s.id, checkpoint_id = %c.id, file_bytes = info.file_bytes,
            pause_ms = info.pause_ms, "checkpoint ready");
        Ok(())
    }

    /// Records checkpoint `id` failed (a no-op once it is `ready`) and drops whatever the
    /// snapshot store has of it.
    async fn checkpoint_failed(&self, id: &str, reason: &str) {
        match self.store().checkpoint_failed(id, reason).await {
            Ok(true) => {
                if let Err(e) = self.node().delete_checkpoint(id).await {
                    warn!(checkpoint_id = %id, error = %e, "cannot remove a failed checkpoint");
                }
            }
            Ok(false) => {}
            Err(e) => warn!(checkpoint_id = %id, error = %e, "cannot record a failed checkpoint"),
        }
    }

    /// Replaces sandbox `id`'s node state with checkpoint `c` and records it running.
    async fn rollback_now(
        &self,
        id: &str,
        c: &Checkpoint,
        op_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        if cancel.is_cancelled() {
            return Err(ServiceError::Cancelled("cancelled by request".into()));
        }
        let s = self.checkpointable(id).await?;
        let launch = self.launch_of(&s).await?;
        let policy = launch.network.clone();
        match self
            .node()
            .restore_checkpoint(launch, &c.id, cancel.clone())
            .await
        {
            Ok(woken) => {
                self.store()
                    .set_memory_restored(id, woken.memory_restored)
                    .await?;
                if !woken.memory_restored {
                    self.store().mark_guest_restarted(id).await?;
                }
                self.resync_network(id, &policy).await;
                if s.state == SandboxState::Paused {
                    self.transition(
                        id,
                        SandboxState::Paused,
                        SandboxState::Running,
                        Some("rolled back"),
                        Some(op_id),
                    )
                    .await?;
                }
                self.touch(id);
                info!(sandbox_id = %id, checkpoint_id = %c.id,
                    memory_restored = woken.memory_restored, "sandbox rolled back");
                Ok(())
            }
            Err(e) => {
                warn!(sandbox_id = %id, checkpoint_id = %c.id, error = %e, "rollback failed");
                let why = format!("rollback to {} failed: {e}", c.id);
                self.transition(id, s.state, SandboxState::Failed, Some(&why), Some(op_id))
                    .await?;
                Err(from_node(e, id))
            }
        }
    }
}
