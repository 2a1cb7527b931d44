//! Sandbox lifecycle: create, get, list, delete.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use cove_api_types::{
    CreateSandboxRequest, CreateSandboxResponse, Operation, OperationKind, Sandbox, SandboxList,
    SandboxState,
};
use cove_domain::{ids, lifecycle, resources, validate, InvalidInput};
use cove_node_api::SandboxLaunch;
use cove_store::{NewOperation, SandboxFilter, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::operations::{request_hash, Begun, DEFAULT_DEADLINE};
use crate::orgs::scope;
use crate::{ControlPlane, ServiceError};

/// Template used when a create request names none.
pub const DEFAULT_TEMPLATE: &str = "base";

/// Largest page of a listing.
pub const MAX_PAGE: u32 = 500;

/// How often a delete re-reads a sandbox whose state changed under it before giving up.
const DELETE_ATTEMPTS: u32 = 8;

/// Default idle timeout of a sandbox (6 h).
pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 6 * 3600;

/// Longest idle timeout or TTL a create may ask for (10 years, in seconds).
pub const MAX_TIMEOUT_S: u64 = 10 * 365 * 24 * 3600;

/// Free bytes a node's data dir needs for a new sandbox to be accepted (its directories,
/// runtime files and first writes).
const MIN_DISK_FREE_BYTES: u64 = 8 << 20;

/// A create request's checked settings ([`ControlPlane::create_settings`]).
struct CreateSettings<'a> {
    /// When the create was accepted (the sandbox's `created_at`).
    now: DateTime<Utc>,
    idle_timeout_s: u64,
    expires_at: Option<DateTime<Utc>>,
    on_expiry: cove_api_types::OnExpiry,
    network: cove_api_types::EgressPolicy,
    /// The volumes' exclusion, held until the sandbox is recorded.
    volumes: Option<crate::volumes::VolumesHeld<'a>>,
}

impl ControlPlane {
    /// A request's resources over the defaults, with the server's default own disk
    /// ([`crate::ControlPlaneConfig::default_disk_mib`]) where the request names no size.
    /// Errors: `invalid_argument` for a value out of bounds.
    pub(crate) fn resolve_resources(
        &self,
        req: Option<&cove_domain::ResourcesRequest>,
    ) -> Result<cove_domain::Resources, ServiceError> {
        let mut resources = resources::resolve(req)?;
        if resources.disk_mib.is_none() {
            resources.disk_mib = self.inner.cfg.default_disk_mib;
        }
        Ok(resources)
    }

    /// Checks what every create accepts whatever its source (a template, a checkpoint; a pool
    /// claim and E2B's create come through [`ControlPlane::create_sandbox`]): env, metadata,
    /// cwd, user, idle timeout, expiry, egress policy, secrets and volume mounts, against this
    /// server's settings. Errors: `invalid_argument` naming the field; `not_implemented` for
    /// secrets without a secrets key; what [`ControlPlane::check_volume_mounts`] answers.
    async fn create_settings(
        &self,
        req: &CreateSandboxRequest,
    ) -> Result<CreateSettings<'_>, ServiceError> {
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
        let idle_timeout_s = req.idle_timeout_s.unwrap_or(DEFAULT_IDLE_TIMEOUT_S);
        if idle_timeout_s > MAX_TIMEOUT_S {
            return Err(InvalidInput::new("idle_timeout_s", "must be at most 315360000").into());
        }
        let now = Utc::now();
        let (expires_at, on_expiry) = crate::expiry::of_create(req, now)?;
        self.check_on_expiry(on_expiry)?;
        let network = req.network.clone().unwrap_or_default();
        network.validate()?;
        crate::network::validate_secrets(&req.secrets, &req.env)?;
        let volumes = self.check_volume_mounts(&req.volumes).await?;
        self.check_network_supported(&network, !req.secrets.is_empty())?;
        if !req.secrets.is_empty() && self.inner.cfg.secrets_key.is_none() {
            return Err(ServiceError::NotImplemented(
                "this server has no secrets key".into(),
            ));
        }
        Ok(CreateSettings {
            now,
            idle_timeout_s,
            expires_at,
            on_expiry,
            network,
            volumes,
        })
    }

    /// Accepts a create request: validates it, records the sandbox (`creating`) and its operation,
    /// and starts it in the background. The same `idempotency_key` with the same body returns the
    /// first sandbox and operation.
    pub async fn create_sandbox(
        &self,
        req: CreateSandboxRequest,
        idempotency_key: Option<String>,
    ) -> Result<CreateSandboxResponse, ServiceError> {
        if req.checkpoint.is_some() {
            return self.create_from_checkpoint(req, idempotency_key).await;
        }
        let (template, pin) = crate::release_pins::parse(
            req.template.as_deref().unwrap_or(DEFAULT_TEMPLATE),
            req.release,
        )?;
        if !self.template_exists(&template).await? {
            return Err(ServiceError::TemplateNotFound(template.clone()));
        }
        let resources = self.resolve_resources(req.resources.as_ref())?;
        if let Some(runtime) = &req.runtime {
            let offered = self.node().capabilities().runtime;
            if *runtime != offered {
                return Err(InvalidInput::new(
                    "runtime",
                    format!(
                        "this server runs sandboxes on `{offered}` only (asked for `{runtime}`)"
                    ),
                )
                .into());
            }
        }
        // Held until the sandbox is recorded: its volumes cannot be deleted meanwhile.
        let CreateSettings {
            now,
            idle_timeout_s,
            expires_at,
            on_expiry,
            network,
            volumes: _volumes,
        } = self.create_settings(&req).await?;
        let picked = self.pick_release(&template, &pin).await?;
        let recipe = self.release_defaults(&template, &picked)?;

        let body = crate::network::hashable_body(&req)?;
        let request_hash = idempotency_key
            .as_ref()
            .map(|_| request_hash(OperationKind::CreateSandbox, &body));
        let mut env = recipe.env.clone();
        env.extend(req.env.clone());
        let sandbox = Sandbox {
            id: ids::new_sandbox_id(),
            org: scope::acting_org()?,
            template,
            release: picked.number,
            release_digest: picked.digest,
            state: SandboxState::Creating,
            state_reason: None,
            runtime: self.inner.cfg.runtime.clone(),
            resources,
            env,
            metadata: req.metadata.clone(),
            cwd: req.cwd.clone().unwrap_or(recipe.workdir),
            user: req.user.clone().unwrap_or(recipe.user),
            created_at: now,
            updated_at: now,
            idle_timeout_s,
            ttl_s: req.ttl_s,
            last_activity_at: Some(now),
            memory_restored: None,
            network,
            secrets: crate::network::public_secrets(&req.secrets),
            public: req.public,
            volumes: req.volumes.clone(),
            expires_at,
            on_expiry,
        };
        // Held until the sandbox is recorded, served by a pool or not. A pool member was
        // charged to the org when it was started: a claim holds nothing more.
        let quota = self.lock_quotas(&sandbox.org).await?;
        self.check_create_rate(&quota, 1)?;
        let attach_volumes = self.volumes_attachable(&req.volumes).await?;
        let unclaimable = crate::pools::unclaimable(&req, recipe.start.is_some(), attach_volumes);
        let latest = matches!(pin, crate::release_pins::Pin::Latest).then_some(sandbox.release);
        if let Some(served) = self
            .create_from_pool(
                &sandbox,
                latest,
                unclaimable,
                &req.secrets,
                idempotency_key.as_deref(),
                request_hash.as_deref(),
            )
            .await?
        {
            return Ok(served);
        }
        let new = crate::orgs::quotas::Ask::Sandboxes {
            size: sandbox.resources,
            count: 1,
        };
        self.check_quota(&quota, new).await?;
        self.check_disk_room().await?;
        self.launch(
            sandbox,
            None,
            idempotency_key,
            request_hash,
            req.secrets,
            None,
        )
        .await
    }

    /// Refuses a new sandbox with `no_space` (507) when its node's data dir is (nearly) full,
    /// before anything of it is recorded. A node that cannot tell is not refused.
    async fn check_disk_room(&self) -> Result<(), ServiceError> {
        let free = match self.node().capacity().await {
            Ok(c) => c.disk_available_bytes,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node's capacity");
                None
            }
        };
        match free {
            Some(free) if free < MIN_DISK_FREE_BYTES => Err(ServiceError::NoSpace(format!(
                "the node's disk is full ({} MiB free, a new sandbox needs {} MiB)",
                free >> 20,
                MIN_DISK_FREE_BYTES >> 20
            ))),
            _ => Ok(()),
        }
    }

    /// A create with `checkpoint`: the checkpoint's template, release and resources, the
    /// request's other settings over the checkpoint's defaults; started by restoring the
    /// checkpoint.
    async fn create_from_checkpoint(
        &self,
        req: CreateSandboxRequest,
        idempotency_key: Option<String>,
    ) -> Result<CreateSandboxResponse, ServiceError> {
        self.inner
            .cfg
            .features
            .require(crate::features::Feature::Checkpoints)?;
        for (field, given) in [
            ("template", req.template.is_some()),
            ("release", req.release.is_some()),
            ("resources", req.resources.is_some()),
        ] {
            if given {
                return Err(InvalidInput::new(
                    field,
                    "must be absent with `checkpoint` (the checkpoint's is used)",
                )
                .into());
            }
        }
        let ck_id = req.checkpoint.clone().unwrap_or_default();
        let c = self.ready_checkpoint(&ck_id).await?;
        self.require_feature(crate::features::Feature::Checkpoints, &c.org)
            .await?;
        if !req.volumes.is_empty() && c.org != scope::acting_org()? {
            // Volumes are looked up in the caller's org; the new sandbox is the checkpoint's.
            return Err(InvalidInput::new(
                "volumes",
                "must be empty for a sandbox made from another org's checkpoint",
            )
            .into());
        }
        // Held until the sandbox is recorded: its volumes cannot be deleted meanwhile.
        let CreateSettings {
            now,
            idle_timeout_s,
            expires_at,
            on_expiry,
            network,
            volumes: _volumes,
        } = self.create_settings(&req).await?;
        let picked = self
            .pick_release(&c.template, &crate::release_pins::Pin::Number(c.release))
            .await?;
        let body = crate::network::hashable_body(&req)?;
        let request_hash = idempotency_key
            .as_ref()
            .map(|_| request_hash(OperationKind::CreateSandbox, &body));
        let mut env = c.env.clone();
        env.extend(req.env.clone());
        let sandbox = Sandbox {
            id: ids::new_sandbox_id(),
            org: c.org.clone(),
            template: c.template.clone(),
            release: c.release,
            release_digest: picked.digest,
            state: SandboxState::Creating,
            state_reason: None,
            runtime: self.inner.cfg.runtime.clone(),
            resources: c.resources,
            env,
            metadata: req.metadata.clone(),
            cwd: req.cwd.clone().unwrap_or_else(|| c.cwd.clone()),
            user: req.user.clone().unwrap_or_else(|| c.user.clone()),
            created_at: now,
            updated_at: now,
            idle_timeout_s,
            ttl_s: req.ttl_s,
            last_activity_at: Some(now),
            memory_restored: None,
            network,
            secrets: crate::network::public_secrets(&req.secrets),
            public: req.public,
            volumes: req.volumes.clone(),
            expires_at,
            on_expiry,
        };
        let restore = crate::checkpoints::Restore {
            checkpoint_id: c.id,
            after_op: None,
        };
        let _quota = self
            .admit_sandboxes(&sandbox.org, &sandbox.resources, 1)
            .await?;
        self.launch(
            sandbox,
            None,
            idempotency_key,
            request_hash,
            req.secrets,
            Some(restore),
        )
        .await
    }

    /// Records `sandbox` (`creating`; a member of `pool` when given) and its create operation,
    /// and starts it in the background (from checkpoint `restore` when given). With an
    /// idempotency key already used for the same request, answers the first create instead.
    pub(crate) async fn launch(
        &self,
        sandbox: Sandbox,
        pool: Option<&str>,
        idempotency_key: Option<String>,
        request_hash: Option<String>,
        secrets: BTreeMap<String, cove_api_types::SecretRequest>,
        restore: Option<crate::checkpoints::Restore>,
    ) -> Result<CreateSandboxResponse, ServiceError> {
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: sandbox.org.clone(),
            kind: OperationKind::CreateSandbox,
            sandbox_id: Some(sandbox.id.clone()),
            template: Some(sandbox.template.clone()),
            release: Some(sandbox.release),
            request_hash,
            idempotency_key,
            deadline: deadline(),
        };
        let op = match self.operations().begin(new_op).await? {
            Begun::Replayed(op) => {
                let id = op.sandbox_id.clone().unwrap_or_default();
                let sandbox = self.store().get_sandbox(&id).await?;
                return Ok(CreateSandboxResponse {
                    sandbox,
                    operation: op,
                });
            }
            Begun::New(op) => op,
        };
        let inserted = match pool {
            Some(pool) => self
                .store()
                .insert_pool_member(&sandbox, pool)
                .await
                .map_err(ServiceError::from),
            None => match self.store().insert_sandbox(&sandbox).await {
                Ok(()) => self.store_secrets(&sandbox.id, &secrets).await,
                Err(e) => Err(e.into()),
            },
        };
        if let Err(e) = inserted {
            let err = cove_api_types::OperationError {
                code: cove_api_types::ErrorCode::Internal,
                message: "could not record the sandbox".into(),
            };
            self.operations()
                .set_state(&op.id, cove_api_types::OperationState::Failed, Some(err))
                .await;
            return Err(e);
        }
        info!(sandbox_id = %sandbox.id, op_id = %op.id, pool = pool.unwrap_or(""), "sandbox accepted");
        if let Some(r) = &restore {
            // Tells a replica that takes this create over that it cannot start it again from
            // the release (`takeover.rs`).
            let line = format!("{}{}", crate::takeover::RESTORE_LOG, r.checkpoint_id);
            self.operations().log(&op.id, &line).await;
        }
        if pool.is_none() {
            // A pool member's `sandbox.created` is recorded when a create claims it.
            let created = cove_store::NewEvent {
                kind: cove_api_types::EventType::SandboxCreated,
                operation_id: Some(op.id.clone()),
                reason: None,
                destination: None,
                host: None,
                port: None,
                rule: None,
            };
            if let Err(e) = self.record_event(&sandbox.id, created).await {
                warn!(sandbox_id = %sandbox.id, error = %e, "cannot record the created event");
            }
        }

        let ticket = self.ticket(&sandbox.id);
        let this = self.clone();
        let launch = SandboxLaunch {
            id: sandbox.id.clone(),
            template: sandbox.template.clone(),
            release: sandbox.release,
            release_digest: self.fetchable_digest(&sandbox),
            resources: sandbox.resources,
            network: sandbox.network.clone(),
            secrets: secrets
                .into_iter()
                .map(|(name, s)| {
                    (
                        name,
                        cove_node_api::LaunchSecret {
                            value: s.value,
                            hosts: s.hosts,
                        },
                    )
                })
                .collect(),
            // A pool member boots trusting its gateway CA, so a claim can hand it secrets.
            arm_secrets: pool.is_some(),
            volumes: match self.launch_volumes(&sandbox.org, &sandbox.volumes).await {
                Ok(v) => v,
                Err(e) => {
                    let why = format!("start failed: {e}");
                    self.transition(
                        &sandbox.id,
                        SandboxState::Creating,
                        SandboxState::Failed,
                        Some(&why),
                        Some(&op.id),
                    )
                    .await?;
                    return Err(e);
                }
            },
        };
        let op_id = op.id.clone();
        let accepted = std::time::Instant::now();
        self.operations()
            .run_cancellable(&op, move |cancel| async move {
                this.start_sandbox(launch, restore, ticket, &op_id, cancel, accepted)
                    .await
            });
        Ok(CreateSandboxResponse {
            sandbox,
            operation: op,
        })
    }

    /// Starts a created sandbox when its turn comes. A create cancelled before it finished
    /// leaves nothing behind: the sandbox ends `deleted`. `accepted` is when the create was
    /// accepted (for the create-to-running histogram; pool members' boots count too).
    async fn start_sandbox(
        &self,
        launch: SandboxLaunch,
        restore: Option<crate::checkpoints::Restore>,
        ticket: crate::lifecycle::Ticket,
        op_id: &str,
        cancel: CancellationToken,
        accepted: std::time::Instant,
    ) -> Result<(), ServiceError> {
        let id = launch.id.clone();
        let _turn = match ticket.wait(&cancel).await {
            Ok(turn) => turn,
            Err(e) => {
                self.cancelled_create(&id, op_id).await?;
                return Err(e);
            }
        };
        if cancel.is_cancelled() {
            self.cancelled_create(&id, op_id).await?;
            return Err(ServiceError::Cancelled("cancelled by request".into()));
        }
        if let Some(r) = &restore {
            if let Err(e) = self.await_checkpoint(r, &cancel).await {
                let reason = format!("start failed: {e}");
                self.transition(
                    &id,
                    SandboxState::Creating,
                    SandboxState::Failed,
                    Some(&reason),
                    Some(op_id),
                )
                .await?;
                return Err(e);
            }
        }
        let abandoned = AbandonedCreate::arm(self, &id, op_id);
        let policy = launch.network.clone();
        let started = match &restore {
            None => self.node().start_sandbox(launch).await,
            Some(r) => match self
                .node()
                .restore_checkpoint(launch, &r.checkpoint_id, cancel.clone())
                .await
            {
                Ok(woken) => {
                    self.store()
                        .set_memory_restored(&id, woken.memory_restored)
                        .await?;
                    Ok(())
                }
                Err(e) => Err(e),
            },
        };
        abandoned.disarm();
        match started {
            Ok(()) => {
                self.resync_network(&id, &policy).await;
                if let Err(e) = self.run_startup(&id, op_id, &cancel).await {
                    warn!(sandbox_id = %id, error = %e, "sandbox did not become ready");
                    if cancel.is_cancelled() {
                        self.cancelled_create(&id, op_id).await?;
                        return Err(e);
                    }
                    // The sandbox stays on its node, so what START left behind (its files,
                    // processes, logs) can be inspected; the delete removes it.
                    let reason = format!("start failed: {e} {}", lifecycle::KEPT_FOR_INSPECTION);
                    self.transition(
                        &id,
                        SandboxState::Creating,
                        SandboxState::Failed,
                        Some(&reason),
                        Some(op_id),
                    )
                    .await?;
                    return Err(e);
                }
                if cancel.is_cancelled() {
                    self.cancelled_create(&id, op_id).await?;
                    return Err(ServiceError::Cancelled("cancelled by request".into()));
                }
                let moved = self
                    .transition(
                        &id,
                        SandboxState::Creating,
                        SandboxState::Running,
                        None,
                        Some(op_id),
                    )
                    .await?;
                if moved {
                    crate::metrics::create_to_running(accepted.elapsed());
                } else {
                    // Deleted while starting: the delete operation (queued behind) removes it.
                    info!(sandbox_id = %id, "sandbox started after it was deleted");
                }
                self.touch(&id);
                Ok(())
            }
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "sandbox failed to start");
                let _ = self.node().destroy_sandbox(&id).await;
                let reason = format!("start failed: {e}");
                self.transition(
                    &id,
                    SandboxState::Creating,
                    SandboxState::Failed,
                    Some(&reason),
                    Some(op_id),
                )
                .await?;
                Err(crate::error::from_node(e, &id))
            }
        }
    }

    /// Removes what a cancelled create made and records the sandbox as deleted.
    async fn cancelled_create(&self, id: &str, op_id: &str) -> Result<(), ServiceError> {
        if let Err(e) = self.node().destroy_sandbox(id).await {
            warn!(sandbox_id = %id, error = %e, "cannot clean up a cancelled create");
        }
        self.transition(
            id,
            SandboxState::Creating,
            SandboxState::Deleted,
            Some("create cancelled"),
            Some(op_id),
        )
        .await?;
        info!(sandbox_id = %id, "create cancelled");
        Ok(())
    }

    /// A sandbox that is not deleted (another org's is not found).
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox, ServiceError> {
        let caller = scope::require()?;
        if !ids::is_well_formed("sb", id) {
            return Err(ServiceError::SandboxNotFound(id.to_string()));
        }
        match self.store().get_sandbox(id).await {
            Ok(s) if !lifecycle::is_gone(s.state) && caller.sees(&s.org) => Ok(s),
            Ok(_) | Err(StoreError::NotFound) => Err(ServiceError::SandboxNotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// A sandbox that runs (else `sandbox_not_running` / `sandbox_not_found`).
    /// Counts as activity of the sandbox (it is how commands, files and the data plane reach
    /// it).
    ///
    /// A `failed` sandbox whose instance is still on its node (its `READY` failed: the create
    /// keeps it for inspection) serves commands and files too, until it is deleted.
    pub async fn running_sandbox(&self, id: &str) -> Result<Sandbox, ServiceError> {
        let s = self.get_sandbox(id).await?;
        self.touch(&s.id);
        if lifecycle::kept_for_inspection(s.state, s.state_reason.as_deref())
            && self.still_on_node(&s.id).await
        {
            return Ok(s);
        }
        if !lifecycle::serves_commands(s.state) {
            return Err(ServiceError::SandboxNotRunning {
                id: s.id,
                state: s.state,
            });
        }
        Ok(s)
    }

    /// Whether the node still runs sandbox `id` (one kept for inspection may have stopped).
    async fn still_on_node(&self, id: &str) -> bool {
        matches!(
            self.node().inspect_sandbox(id).await,
            Ok(Some(cove_node_api::NodeSandboxState::Running))
        )
    }

    /// A page of sandboxes, newest first. `metadata` pairs must all match the sandbox's
    /// metadata. `cursor` is the opaque `next_cursor` of the page before.
    pub async fn list_sandboxes(
        &self,
        state: Option<SandboxState>,
        template: Option<String>,
        metadata: Vec<(String, String)>,
        limit: Option<u32>,
        cursor: Option<String>,
    ) -> Result<SandboxList, ServiceError> {
        let limit = limit.unwrap_or(100).clamp(1, MAX_PAGE);
        let after = cursor.map(|c| decode_cursor(&c)).transpose()?;
        let filter = SandboxFilter {
            org: scope::listing_org()?,
            state,
            template,
            metadata,
            include_deleted: false,
            limit,
            after,
        };
        let sandboxes = self.store().list_sandboxes(&filter).await?;
        let next_cursor = if sandboxes.len() == limit as usize {
            sandboxes.last().map(|s| encode_cursor(s.created_at, &s.id))
        } else {
            None
        };
        Ok(SandboxList {
            sandboxes,
            next_cursor,
        })
    }

    /// Starts deleting a sandbox: everything it has on the node and in the snapshot store goes.
    /// Deleting a deleted (or unknown) sandbox is `sandbox_not_found`; a delete cannot be
    /// cancelled. `deadline_s` as for lifecycle calls.
    pub async fn delete_sandbox(
        &self,
        id: &str,
        deadline_s: Option<u64>,
    ) -> Result<Operation, ServiceError> {
        self.delete_sandbox_because(id, deadline_s, None).await
    }

    /// [`ControlPlane::delete_sandbox`] that records `reason` (e.g. `ttl`, `expired`) as the
    /// sandbox's `state_reason` and on its `sandbox.deleted` event.
    pub(crate) async fn delete_sandbox_because(
        &self,
        id: &str,
        deadline_s: Option<u64>,
        reason: Option<&'static str>,
    ) -> Result<Operation, ServiceError> {
        let deadline = crate::operations::deadline_from(deadline_s)?;
        // A lifecycle call running meanwhile may move the sandbox between the read and the
        // compare-and-set; read again then (a delete wins over any other state but `deleting`).
        let mut attempts = 0;
        let org = loop {
            let s = self.get_sandbox(id).await?;
            if s.state == SandboxState::Deleting || attempts == DELETE_ATTEMPTS {
                return Err(ServiceError::InvalidState {
                    id: s.id,
                    from: s.state,
                    to: SandboxState::Deleting,
                });
            }
            if self
                .transition(id, s.state, SandboxState::Deleting, reason, None)
                .await?
            {
                break s.org;
            }
            attempts += 1;
        };
        self.run_delete(id, &org, deadline, reason).await
    }

    /// Records the delete operation of sandbox `id` of `org` (already moved to `deleting`)
    /// and runs it when the sandbox's turn comes.
    pub(crate) async fn run_delete(
        &self,
        id: &str,
        org: &str,
        deadline: DateTime<Utc>,
        reason: Option<&'static str>,
    ) -> Result<Operation, ServiceError> {
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: org.to_string(),
            kind: OperationKind::DeleteSandbox,
            sandbox_id: Some(id.to_string()),
            template: None,
            release: None,
            idempotency_key: None,
            request_hash: None,
            deadline,
        };
        let Begun::New(op) = self.operations().begin(new_op).await? else {
            return Err(ServiceError::Internal("delete replayed".into()));
        };
        let ticket = self.ticket(id);
        let this = self.clone();
        let sandbox_id = id.to_string();
        let op_id = op.id.clone();
        self.operations().run(&op, async move {
            let turn = ticket.wait(&CancellationToken::new()).await?;
            this.destroy(&sandbox_id, &op_id, turn, reason).await
        });
        Ok(op)
    }

    async fn destroy(
        &self,
        id: &str,
        op_id: &str,
        turn: tokio::sync::OwnedMutexGuard<()>,
        reason: Option<&str>,
    ) -> Result<(), ServiceError> {
        if let Err(e) = self.node().destroy_sandbox(id).await {
            let reason = format!("delete failed: {e}");
            self.transition(
                id,
                SandboxState::Deleting,
                SandboxState::Failed,
                Some(&reason),
                Some(op_id),
            )
            .await?;
            return Err(crate::error::from_node(e, id));
        }
        self.store().delete_commands_of(id).await?;
        self.transition(
            id,
            SandboxState::Deleting,
            SandboxState::Deleted,
            reason,
            Some(op_id),
        )
        .await?;
        drop(turn);
        self.forget_lock(id);
        self.inner.repairs.forget(id);
        info!(sandbox_id = %id, "sandbox deleted");
        self.release_volumes_of(id).await;
        Ok(())
    }
}

/// Cleans up after a create whose work was dropped while the node was starting the sandbox
/// (a start does not stop when told, so the operation drops it 30 s after its deadline): the
/// half-started sandbox is destroyed and recorded `failed`, instead of staying `creating` with
/// no operation left to finish it.
struct AbandonedCreate {
    /// `None` once the start returned.
    cp: Option<ControlPlane>,
    id: String,
    op_id: String,
}

impl AbandonedCreate {
    fn arm(cp: &ControlPlane, id: &str, op_id: &str) -> Self {
        AbandonedCreate {
            cp: Some(cp.clone()),
            id: id.to_string(),
            op_id: op_id.to_string(),
        }
    }

    fn disarm(mut self) {
        self.cp = None;
    }
}

impl Drop for AbandonedCreate {
    fn drop(&mut self) {
        let Some(cp) = self.cp.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = std::mem::take(&mut self.id);
        let op_id = std::mem::take(&mut self.op_id);
        // A clean-up after its request is gone: it runs as the server (`orgs::scope`).
        rt.spawn(scope::as_system(async move {
            warn!(sandbox_id = %id, "create abandoned at its deadline; removing the sandbox");
            if let Err(e) = cp.node().destroy_sandbox(&id).await {
                warn!(sandbox_id = %id, error = %e, "cannot clean up an abandoned create");
            }
            let why = "the sandbox did not start before the create's deadline";
            if let Err(e) = cp
                .transition(
                    &id,
                    SandboxState::Creating,
                    SandboxState::Failed,
                    Some(why),
                    Some(&op_id),
                )
                .await
            {
                warn!(sandbox_id = %id, error = %e, "cannot record an abandoned create");
            }
        }));
    }
}

pub(crate) fn deadline() -> DateTime<Utc> {
    Utc::now() + ChronoDuration::from_std(DEFAULT_DEADLINE).unwrap_or(ChronoDuration::minutes(30))
}

fn encode_cursor(at: DateTime<Utc>, id: &str) -> String {
    format!("{}~{id}", at.timestamp_micros())
}

fn decode_cursor(c: &str) -> Result<(DateTime<Utc>, String), ServiceError> {
    let bad = || {
        ServiceError::Invalid(InvalidInput::new(
            "cursor",
            "is not a cursor from a listing",
        ))
    };
    let (micros, id) = c.split_once('~').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let at = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(bad)?;
    Ok((at, id.to_string()))
}
