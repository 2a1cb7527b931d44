//! Serving a create from a warm pool: a ready member is claimed in one atomic store step, the
//! create's per-sandbox settings are applied to it, and the create answers `running` with an
//! operation that already succeeded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use cove_api_types::{
    CreateSandboxRequest, CreateSandboxResponse, OperationKind, Sandbox, SecretRequest,
};
use cove_domain::ids;
use cove_store::{NewOperation, PoolClaim, PoolRecord, StoreError};
use tracing::{info, warn};

use crate::sandboxes::deadline;
use crate::{ControlPlane, ServiceError};

/// Why a create cannot be served by a pool member (`None`: it can). A member was booted before
/// the create came, so only what can be applied afterwards may differ from a cold start: env
/// defaults, metadata, cwd, user, idle timeout and TTL are records the control plane applies
/// when a command starts or the controller runs, an egress policy is the gateway's live
/// update (as `PUT /v1/sandboxes/{id}/network`), and secrets are handed to the gateway of a
/// member that booted trusting its gateway CA (their placeholders reach the commands started
/// after the claim), so they are applied at claim. Template, release and resources must equal
/// the member's (they decide which pool matches).
///
/// `has_start`: the release has a `START` command. Its process ran under the member's default
/// policy and without secrets before the claim: a connection it opened then would outlive a
/// stricter policy (the gateway applies a new policy to new connections), and it lacks the
/// placeholders a cold start gives it, so such a release takes another policy or secrets only
/// at a cold start.
///
/// `attach_volumes`: the node can mount volumes into a running sandbox (runc on a single
/// server; see [`ControlPlane::volumes_attachable`]): the create's volumes are then mounted
/// into the member at claim; otherwise (gVisor, VMs, a cluster) a create with volumes
/// cold-starts.
///
/// Every field of the request is named here, so a new one cannot be added without deciding
/// whether a member can take it at claim time. The answer is the reason label of a miss in
/// `cove_pool_claims_total`.
pub(crate) fn unclaimable(
    req: &CreateSandboxRequest,
    has_start: bool,
    attach_volumes: bool,
) -> Option<&'static str> {
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
    let policy = network.as_ref().is_some_and(|n| *n != Default::default());
    if checkpoint.is_some() {
        // A create from a checkpoint restores the checkpoint's files, which no member has.
        Some("checkpoint")
    } else if !secrets.is_empty() && has_start {
        Some("secrets_with_start")
    } else if !volumes.is_empty() && !attach_volumes {
        // Bound when the sandbox starts: this node cannot mount them into a running one.
        Some("volumes")
    } else if policy && has_start {
        Some("policy_with_start")
    } else {
        None
    }
}

/// How long creates reuse the pool definitions they read: a pool set or deleted through this
/// server clears them at once; one set or deleted on another replica is seen within this.
const POOLS_TTL: Duration = Duration::from_secs(1);

/// The pool definitions as creates read them, kept for [`POOLS_TTL`]: a burst of creates reads
/// the store's pools once, not once per create.
#[derive(Default)]
pub(crate) struct PoolsCache {
    read: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    /// Counts clears: a read that began before a clear is not kept.
    generation: u64,
    pools: Option<(Instant, Arc<Vec<PoolRecord>>)>,
}

impl PoolsCache {
    /// Forgets the definitions (a pool was set or deleted).
    pub(crate) fn clear(&self) {
        let mut read = self.read.lock();
        read.generation += 1;
        read.pools = None;
    }

    /// The definitions if read less than [`POOLS_TTL`] ago, else the generation a new read
    /// is to be kept under.
    fn fresh(&self) -> Result<Arc<Vec<PoolRecord>>, u64> {
        let read = self.read.lock();
        match &read.pools {
            Some((at, pools)) if at.elapsed() < POOLS_TTL => Ok(pools.clone()),
            _ => Err(read.generation),
        }
    }

    fn keep(&self, generation: u64, since: Instant, pools: Arc<Vec<PoolRecord>>) {
        let mut read = self.read.lock();
        if read.generation == generation {
            read.pools = Some((since, pools));
        }
    }
}

impl ControlPlane {
    /// The pool definitions, read from the store at most once per [`POOLS_TTL`].
    async fn pools_for_create(&self) -> Result<Arc<Vec<PoolRecord>>, ServiceError> {
        let generation = match self.inner.pools_cache.fresh() {
            Ok(pools) => return Ok(pools),
            Err(generation) => generation,
        };
        let since = Instant::now();
        let pools = Arc::new(self.store().list_pools().await?);
        self.inner
            .pools_cache
            .keep(generation, since, pools.clone());
        Ok(pools)
    }

    /// Serves the create of `wanted` (its settings resolved, state `creating`) from a pool
    /// when a pool keeps its template, release and resources and has a ready member: returns
    /// the claimed sandbox (`running`, with `wanted`'s per-sandbox settings) and a succeeded
    /// operation. `None` when no pool matches, or the matching pools are empty (a miss is
    /// counted on each, and the pool controller is woken to refill).
    ///
    /// `unclaimable`: why this create cannot take a member ([`unclaimable`]); with a matching
    /// pool it counts as a miss with that reason and the create cold-starts. `secrets`: the
    /// create's (with values), put on the member at claim. `latest`: the
    /// number of `wanted`'s template's latest ready release when the create asked for the
    /// latest (it is `wanted.release`), so a pool that follows the latest needs no lookup.
    pub(crate) async fn create_from_pool(
        &self,
        wanted: &Sandbox,
        latest: Option<u32>,
        unclaimable: Option<&'static str>,
        secrets: &BTreeMap<String, SecretRequest>,
        idempotency_key: Option<&str>,
        request_hash: Option<&str>,
    ) -> Result<Option<CreateSandboxResponse>, ServiceError> {
        let mut matching = Vec::new();
        for p in self.pools_for_create().await?.iter() {
            if p.org != wanted.org
                || p.template != wanted.template
                || p.resources != wanted.resources
            {
                continue;
            }
            let keeps = match (p.release, latest) {
                (None, Some(latest)) => Some(latest),
                _ => self.pool_release(p).await?,
            };
            if keeps == Some(wanted.release) {
                matching.push(p.name.clone());
            }
        }
        if matching.is_empty() {
            return Ok(None);
        }
        if let Some(reason) = unclaimable {
            crate::metrics::pool_miss(reason);
            info!(template = %wanted.template, reason, "create not servable by a warm pool; cold start");
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
            crate::metrics::pool_miss("empty");
            if let Err(e) = self.store().record_pool_misses(&matching).await {
                warn!(error = %e, "cannot count a pool miss");
            }
            info!(template = %wanted.template, release = wanted.release, "warm pool empty; cold start");
            return Ok(None);
        };
        crate::metrics::pool_hit();
        self.inner.events.notify();
        let mut sandbox = member.sandbox;
        if wanted.network != sandbox.network {
            if let Err(e) = self.claimed_policy(&sandbox.id, &wanted.network).await {
                // The member must not serve under a policy other than the one asked for.
                warn!(sandbox_id = %sandbox.id, error = %e, "cannot apply the egress policy to a claimed member; deleting it");
                self.drop_claimed(&sandbox).await;
                return Err(e);
            }
            sandbox.network = wanted.network.clone();
        }
        if !secrets.is_empty() {
            if let Err(e) = self.claimed_secrets(&sandbox.id, secrets).await {
                // Nor without the secrets asked for.
                warn!(sandbox_id = %sandbox.id, error = %e, "cannot hand the secrets to a claimed member; deleting it");
                self.drop_claimed(&sandbox).await;
                return Err(e);
            }
            sandbox.secrets = wanted.secrets.clone();
        }
        if !wanted.volumes.is_empty() {
            if let Err(e) = self.claimed_volumes(&sandbox, &wanted.volumes).await {
                // Nor without its volumes.
                warn!(sandbox_id = %sandbox.id, error = %e, "cannot attach the volumes to a claimed member; deleting it");
                self.drop_claimed(&sandbox).await;
                return Err(e);
            }
            sandbox.volumes = wanted.volumes.clone();
        }
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

    /// Deletes claimed member `s`, which could not take the create's settings: it is never
    /// handed out half-configured.
    async fn drop_claimed(&self, s: &Sandbox) {
        let why = Some("pool_claim_failed");
        // The delete runs on a sandbox moved to `deleting` (else it would stay `running` in
        // the store, gone from the node).
        match self
            .transition(
                &s.id,
                s.state,
                cove_api_types::SandboxState::Deleting,
                why,
                None,
            )
            .await
        {
            Ok(true) => {
                if let Err(e) = self.run_delete(&s.id, &s.org, deadline(), why).await {
                    warn!(sandbox_id = %s.id, error = %e, "cannot delete a claimed member");
                }
            }
            Ok(false) => {}
            Err(e) => warn!(sandbox_id = %s.id, error = %e, "cannot delete a claimed member"),
        }
    }

    /// Whether a create that mounts `mounts` can take a pool member: the node attaches volumes
    /// to a running sandbox, and every volume is on the server's own node (on a cluster a
    /// member may run on another node than the volumes, so such creates cold-start there).
    pub(crate) async fn volumes_attachable(
        &self,
        mounts: &[cove_api_types::VolumeMount],
    ) -> Result<bool, ServiceError> {
        if mounts.is_empty() || !self.node().capabilities().attach_volumes {
            return Ok(false);
        }
        for m in mounts {
            if self.volume_record(&m.name).await?.node.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Mounts `mounts` into claimed member `s`: its record first (a volume delete then sees
    /// them in use, and the member's delete releases them), then the node.
    async fn claimed_volumes(
        &self,
        s: &Sandbox,
        mounts: &[cove_api_types::VolumeMount],
    ) -> Result<(), ServiceError> {
        if !self.store().set_sandbox_volumes(&s.id, mounts).await? {
            return Err(ServiceError::SandboxNotFound(s.id.clone()));
        }
        let launch = self.launch_volumes(&s.org, mounts).await?;
        self.node()
            .attach_volumes(&s.id, launch)
            .await
            .map_err(|e| crate::error::from_node(e, &s.id))
    }

    /// Puts egress policy `policy` on claimed member `id`: its record, then the gateway (the
    /// member's first command follows it).
    async fn claimed_policy(
        &self,
        id: &str,
        policy: &cove_api_types::EgressPolicy,
    ) -> Result<(), ServiceError> {
        if !self.store().set_sandbox_network(id, policy).await? {
            return Err(ServiceError::SandboxNotFound(id.to_string()));
        }
        self.node()
            .set_sandbox_network(id, policy.clone())
            .await
            .map_err(|e| crate::error::from_node(e, id))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> BTreeMap<String, SecretRequest> {
        BTreeMap::from([(
            "API_KEY".to_string(),
            SecretRequest {
                value: "v".into(),
                hosts: vec!["api.test".parse().expect("host")],
            },
        )])
    }

    #[test]
    fn secrets_are_claimable_unless_a_start_process_ran_without_them() {
        let req = CreateSandboxRequest {
            secrets: secrets(),
            ..Default::default()
        };
        assert_eq!(unclaimable(&req, false, false), None);
        assert_eq!(unclaimable(&req, true, false), Some("secrets_with_start"));
        assert_eq!(
            unclaimable(&CreateSandboxRequest::default(), true, false),
            None,
            "nothing to apply: a START release is claimable"
        );
    }

    #[test]
    fn volumes_cold_start_only_where_they_cannot_be_attached() {
        let mount = cove_api_types::VolumeMount {
            name: "data".into(),
            path: "/data".into(),
            read_only: false,
        };
        let req = CreateSandboxRequest {
            volumes: vec![mount],
            secrets: secrets(),
            ..Default::default()
        };
        assert_eq!(unclaimable(&req, false, false), Some("volumes"));
        assert_eq!(unclaimable(&req, false, true), None, "attached at claim");
        let req = CreateSandboxRequest {
            checkpoint: Some("ck".into()),
            ..Default::default()
        };
        assert_eq!(unclaimable(&req, false, true), Some("checkpoint"));
    }
}
