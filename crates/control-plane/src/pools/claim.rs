//! Serving a create from a warm pool: a ready member is claimed in one atomic store step, the
//! create's per-sandbox settings are applied to it, and the create answers `running` with an
//! operation that already succeeded.

use cove_api_types::{CreateSandboxRequest, CreateSandboxResponse, OperationKind, Sandbox};
use cove_domain::ids;
use cove_store::{NewOperation, PoolClaim, StoreError};
use tracing::{info, warn};

use crate::sandboxes::deadline;
use crate::{ControlPlane, ServiceError};

/// Whether a create may be served by a pool member. A member was booted before the create
/// came, so only what can be applied afterwards may differ from a cold start: env defaults,
/// metadata, cwd, user, idle timeout and TTL are records the control plane applies when a
/// command starts or the controller runs, so they are applied at claim. Template, release and
/// resources must equal the member's (they decide which pool matches).
///
/// Every field of the request is named here, so a new one cannot be added without deciding
/// whether a member can take it at claim time. Options that change how the sandbox is built
/// or wired (an egress policy, secrets, mounts) cannot: such a create must return `false`
/// here and cold-starts (a miss).
pub(crate) fn claimable(req: &CreateSandboxRequest) -> bool {
    let CreateSandboxRequest {
        template: _,
        release: _,
        // Checked against the server's before a pool is looked at: every member is on it.
        runtime: _,
        resources: _,
        env: _,
        metadata: _,
        cwd: _,
        user: _,
        idle_timeout_s: _,
        ttl_s: _,
        // Set on the claimed member right after the claim.
        expires_at: _,
        on_expiry: _,
        network,
        secrets,
        checkpoint,
        // Set on the claimed member right after the claim.
        public: _,
        volumes,
    } = req;
    // A member boots with the default egress policy and no secrets; another policy or any
    // secret is wired into the sandbox's network before it boots.
    // A create from a checkpoint restores the checkpoint's files, which no member has.
    // Volumes are bound when the sandbox starts.
    network.as_ref().is_none_or(|n| *n == Default::default())
        && secrets.is_empty()
        && checkpoint.is_none()
        && volumes.is_empty()
}

impl ControlPlane {
    /// Serves the create of `wanted` (its settings resolved, state `creating`) from a pool
    /// when a pool keeps its template, release and resources and has a ready member: returns
    /// the claimed sandbox (`running`, with `wanted`'s per-sandbox settings) and a succeeded
    /// operation. `None` when no pool matches, or the matching pools are empty (a miss is
    /// counted on each, and the pool controller is woken to refill).
    pub(crate) async fn create_from_pool(
        &self,
        wanted: &Sandbox,
        idempotency_key: Option<&str>,
        request_hash: Option<&str>,
    ) -> Result<Option<CreateSandboxResponse>, ServiceError> {
        let mut matching = Vec::new();
        for p in self.store().list_pools().await? {
            if p.org == wanted.org
                && p.template == wanted.template
                && p.resources == wanted.resources
                && self.pool_release(&p).await? == Some(wanted.release)
            {
                matching.push(p.name);
            }
        }
        if matching.is_empty() {
            return Ok(None);
        }
        if let Some(key) = idempotency_key {
            let kind = OperationKind::CreateSandbox;
            if let Some(op) = self
                .operations()
                .replay(&wanted.org, kind, key, request_hash)
                .await?
            {
                return Ok(Some(self.replayed(op).await?));
            }
        }
        let claim = PoolClaim {
            org: wanted.org.clone(),
            template: wanted.template.clone(),
            release: wanted.release,
            resources: wanted.resources,
            env: wanted.env.clone(),
            metadata: wanted.metadata.clone(),
            cwd: wanted.cwd.clone(),
            user: wanted.user.clone(),
            idle_timeout_s: wanted.idle_timeout_s,
            ttl_s: wanted.ttl_s,
            at: wanted.created_at,
        };
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: wanted.org.clone(),
            kind: OperationKind::CreateSandbox,
            sandbox_id: None,
            template: Some(wanted.template.clone()),
            release: Some(wanted.release),
            idempotency_key: idempotency_key.map(str::to_string),
            request_hash: request_hash.map(str::to_string),
            deadline: deadline(),
        };
        let claimed = match self.store().claim_member(&claim, &new_op).await {
            Ok(claimed) => claimed,
            // A concurrent create with the same key won; nothing was claimed.
            Err(StoreError::Conflict(_)) if idempotency_key.is_some() => {
                let kind = OperationKind::CreateSandbox;
                let key = idempotency_key.unwrap_or_default();
                return match self
                    .operations()
                    .replay(&wanted.org, kind, key, request_hash)
                    .await?
                {
                    Some(op) => Ok(Some(self.replayed(op).await?)),
                    None => Err(ServiceError::Internal("idempotency key conflict".into())),
                };
            }
            Err(e) => return Err(e.into()),
        };
        self.wake_pools();
        let Some((member, operation)) = claimed else {
            crate::metrics::pool_claim("miss");
            if let Err(e) = self.store().record_pool_misses(&matching).await {
                warn!(error = %e, "cannot count a pool miss");
            }
            info!(template = %wanted.template, release = wanted.release, "warm pool empty; cold start");
            return Ok(None);
        };
        crate::metrics::pool_claim("hit");
        self.inner.events.notify();
        let mut sandbox = member.sandbox;
        if wanted.public {
            self.store().set_sandbox_public(&sandbox.id, true).await?;
            sandbox.public = true;
        }
        if wanted.expires_at.is_some() {
            self.store()
                .set_sandbox_expiry(&sandbox.id, wanted.expires_at, wanted.on_expiry)
                .await?;
            sandbox.expires_at = wanted.expires_at;
            sandbox.on_expiry = wanted.on_expiry;
        }
        self.touch(&sandbox.id);
        info!(sandbox_id = %sandbox.id, op_id = %operation.id, pool = %member.pool, "sandbox served by a warm pool");
        Ok(Some(CreateSandboxResponse { sandbox, operation }))
    }

    async fn replayed(
        &self,
        op: cove_api_types::Operation,
    ) -> Result<CreateSandboxResponse, ServiceError> {
        let id = op.sandbox_id.clone().unwrap_or_default();
        let sandbox = self.store().get_sandbox(&id).await?;
        Ok(CreateSandboxResponse {
            sandbox,
            operation: op,
        })
    }
}
