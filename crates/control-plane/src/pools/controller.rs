//! The pool controller: one pass ([`ControlPlane::reconcile_pools`]) makes every pool's
//! members what its settings ask, and a loop runs it when woken (a pool was set, a create
//! claimed or missed a member; once no wake came for 100 ms, at most 1 s after the first, so a
//! burst of claims is served first) and every `controller_interval`.
//!
//! A pass, per pool: members that failed, run another release or size (a new release of a
//! pool that follows the latest), or belong to a pool that no longer exists are retired
//! (deleted); ready members beyond `max` are retired; then `min_ready - (ready + starting)`
//! members are started, never more than `max - (ready + starting)`, and none that would take
//! the pool's org past one of its quotas (members count toward them like any sandbox of the
//! org; a stopped refill is logged once and retried every pass). Passes run one at a time.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use cove_api_types::{Sandbox, SandboxState};
use cove_domain::ids;
use cove_store::{PoolMember, PoolRecord};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::fits;
use crate::orgs::quotas::Ask;

use crate::{ControlPlane, ServiceError};

/// How long the pool loop waits, once woken, for a pause in the wakes before it refills: a
/// burst of claims is served first, and its members' cold creates do not compete with it for
/// the store's writer and the cores.
const REFILL_QUIET: Duration = Duration::from_millis(100);
/// The longest a refill waits for that pause after the first wake (a steady stream of claims).
const REFILL_MAX_DELAY: Duration = Duration::from_secs(1);

impl ControlPlane {
    /// Wakes the pool loop (a pass runs soon, at most one queued).
    pub(crate) fn wake_pools(&self) {
        self.inner.pools_wake.notify_one();
    }

    /// Runs a pool pass at start, then whenever woken and every `controller_interval`, until
    /// `stop` fires.
    pub(crate) async fn pool_loop(&self, stop: CancellationToken) {
        let every = self
            .inner
            .cfg
            .controller_interval
            .max(Duration::from_millis(50));
        loop {
            if let Err(e) = self.reconcile_pools().await {
                warn!(error = %e, "pool pass failed");
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.inner.pools_wake.notified() => {
                    // Claims come in bursts: refill once after the burst, not once per claim
                    // while it is still being served.
                    if !self.burst_over(&stop).await {
                        break;
                    }
                }
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Waits until no wake came for [`REFILL_QUIET`], or [`REFILL_MAX_DELAY`] passed; `false`
    /// when `stop` fired meanwhile.
    async fn burst_over(&self, stop: &CancellationToken) -> bool {
        let first = tokio::time::Instant::now();
        loop {
            let left = REFILL_MAX_DELAY.saturating_sub(first.elapsed());
            if left.is_zero() {
                return true;
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = self.inner.pools_wake.notified() => {}
                () = tokio::time::sleep(REFILL_QUIET.min(left)) => return true,
            }
        }
    }

    /// One pass of the pool controller over every pool (see the module docs). Returns once
    /// the members it retires and starts are accepted; their operations run on.
    pub async fn reconcile_pools(&self) -> Result<(), ServiceError> {
        let _pass = self.inner.pools_pass.lock().await;
        let pools = self.store().list_pools().await?;
        let mut by_pool: HashMap<String, Vec<PoolMember>> = HashMap::new();
        for m in self.store().pool_members().await? {
            by_pool.entry(m.pool.clone()).or_default().push(m);
        }
        for p in &pools {
            let members = by_pool.remove(&p.name).unwrap_or_default();
            self.reconcile_pool(p, members).await?;
        }
        for m in by_pool.into_values().flatten() {
            self.retire(&m, "its pool was deleted").await;
        }
        Ok(())
    }

    async fn reconcile_pool(
        &self,
        p: &PoolRecord,
        members: Vec<PoolMember>,
    ) -> Result<(), ServiceError> {
        let target = self.pool_release(p).await?;
        let (mut ready, mut starting) = (0u32, 0u32);
        for m in &members {
            match m.sandbox.state {
                SandboxState::Failed => self.retire(m, "it failed").await,
                SandboxState::Creating | SandboxState::Running if !fits(p, target, m) => {
                    self.retire(m, "the pool keeps another release or size")
                        .await
                }
                SandboxState::Creating => starting += 1,
                SandboxState::Running if ready + starting >= p.max => {
                    self.retire(m, "the pool is above its max").await
                }
                SandboxState::Running => ready += 1,
                _ => {}
            }
        }
        let Some(release) = target else {
            warn!(pool = %p.name, template = %p.template, "pool has no ready release to keep");
            return Ok(());
        };
        let have = ready + starting;
        let start = p
            .min_ready
            .saturating_sub(have)
            .min(p.max.saturating_sub(have));
        if start > 0 {
            // One lookup for every member this pass boots: they share the release's digest.
            let picked = self
                .pick_release(&p.template, &crate::release_pins::Pin::Number(release))
                .await?;
            let defaults = self.release_defaults(&p.template, &picked)?;
            let mut started = 0;
            for _ in 0..start {
                // Members are the org's sandboxes: each is checked against its quotas, and
                // held under its quota lock until it is recorded.
                let quota = self.lock_quotas(&p.org).await?;
                let ask = Ask::Sandboxes {
                    size: p.resources,
                    count: 1,
                };
                match self.check_quota(&quota, ask).await {
                    Ok(()) => {}
                    Err(ServiceError::QuotaExceeded { message, .. }) => {
                        if self.pool_blocked(&p.name, true) {
                            warn!(pool = %p.name, org = %p.org, reason = %message,
                                "pool refill stopped by a quota of its org; retrying every pass");
                        }
                        break;
                    }
                    Err(e) => return Err(e),
                }
                self.start_member(p, release, picked.digest.clone(), &defaults)
                    .await?;
                drop(quota);
                started += 1;
            }
            if started > 0 {
                if self.pool_blocked(&p.name, false) {
                    info!(pool = %p.name, "pool refill resumed within its org's quotas");
                }
                info!(pool = %p.name, ready, starting, started, "pool refilling");
            }
        } else {
            self.pool_blocked(&p.name, false);
        }
        Ok(())
    }

    async fn start_member(
        &self,
        p: &PoolRecord,
        release: u32,
        release_digest: Option<String>,
        defaults: &cove_api_types::TemplateDefaults,
    ) -> Result<(), ServiceError> {
        let recipe = defaults.clone();
        let now = Utc::now();
        let member = Sandbox {
            id: ids::new_sandbox_id(),
            org: p.org.clone(),
            template: p.template.clone(),
            release,
            release_digest,
            state: SandboxState::Creating,
            state_reason: None,
            runtime: self.inner.cfg.runtime.clone(),
            resources: p.resources,
            env: recipe.env,
            metadata: Default::default(),
            cwd: recipe.workdir,
            user: recipe.user,
            created_at: now,
            updated_at: now,
            // Idle members are what a pool is for: no idle suspend, no TTL until claimed.
            idle_timeout_s: 0,
            ttl_s: None,
            expires_at: None,
            on_expiry: cove_api_types::OnExpiry::Delete,
            last_activity_at: Some(now),
            memory_restored: None,
            // Members boot with the default egress policy and no secrets (but trusting their
            // gateway CA); a claim puts the create's on (see `claim::unclaimable`).
            network: Default::default(),
            secrets: Default::default(),
            public: false,
            volumes: Vec::new(),
        };
        self.launch(member, Some(&p.name), None, None, Default::default(), None)
            .await?;
        Ok(())
    }

    /// Deletes member `m` unless a create claimed it meanwhile (compare-and-set in the store).
    pub(crate) async fn retire(&self, m: &PoolMember, why: &str) {
        let id = &m.sandbox.id;
        match self.store().retire_member(id, &m.pool).await {
            Ok(true) => {
                info!(sandbox_id = %id, pool = %m.pool, reason = why, "retiring a pool member");
                if let Err(e) = self
                    .run_delete(id, &m.sandbox.org, crate::sandboxes::deadline(), None)
                    .await
                {
                    warn!(sandbox_id = %id, error = %e, "cannot delete a retired member");
                }
            }
            Ok(false) => {}
            Err(e) => warn!(sandbox_id = %id, error = %e, "cannot retire a pool member"),
        }
    }
}
