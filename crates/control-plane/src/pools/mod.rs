//! Warm pools: booted, idle sandboxes of one template release and size, kept ready so a
//! matching create is served without a boot.
//!
//! - `put_pool` / `get_pool` / `list_pools` / `delete_pool`: the pool's settings
//!   (`PUT/GET/DELETE /v1/pools/{name}`); deleting a pool drains it (its members are deleted).
//! - [`claim`]: a create whose template, release and resources equal a ready member's takes
//!   it (one atomic store step) and answers `running` at once; see [`unclaimable`] for the
//!   creates that never use a pool.
//! - [`controller`]: the pass that keeps `min_ready` members booted, never more than `max`,
//!   and retires members of an old release or size, of a deleted pool, or that failed.
//!
//! Members are sandbox rows marked with their pool in the store: `GET /v1/sandboxes` does not
//! list them and their ids are handed out only when claimed. They use node resources like any
//! sandbox (a node counts them) and count toward their pool's org's quotas, claimed or not
//! (a pool whose `min_ready` members alone exceed one is refused with `quota_exceeded`); they
//! belong to no caller until claimed. After a restart the
//! start-up reconciliation adopts members the node still runs (or fails them, and the pool
//! pass replaces them) like any other sandbox.

use chrono::Utc;
use cove_api_types::{Pool, PoolList, PutPoolRequest, SandboxState, MAX_POOL_SIZE};
use cove_domain::InvalidInput;
use cove_store::{PoolMember, PoolRecord, StoreError};

use crate::orgs::scope;
use crate::release_pins::Pin;
use crate::{ControlPlane, ServiceError};

pub(crate) mod claim;
pub(crate) mod controller;

pub(crate) use claim::unclaimable;

/// Longest pool name.
const MAX_NAME: usize = 63;

impl ControlPlane {
    /// Creates pool `name` or replaces its settings (its counters stay) and wakes the pool
    /// controller. Errors: `invalid_argument` (name, sizes, resources), `template_not_found`,
    /// `release_not_found` (a pinned release that is not ready).
    pub async fn put_pool(&self, name: &str, req: PutPoolRequest) -> Result<Pool, ServiceError> {
        check_name(name)?;
        if !self.template_exists(&req.template).await? {
            return Err(ServiceError::TemplateNotFound(req.template));
        }
        if let Some(n) = req.release {
            self.pick_release(&req.template, &Pin::Number(n)).await?;
        }
        let resources = self.resolve_resources(req.resources.as_ref())?;
        if req.max == 0 || req.max > MAX_POOL_SIZE {
            return Err(InvalidInput::new("max", format!("must be 1 to {MAX_POOL_SIZE}")).into());
        }
        if req.min_ready > req.max {
            return Err(InvalidInput::new("min_ready", "must be at most max").into());
        }
        let org = scope::acting_org()?;
        self.check_pool_quota(&org, &resources, req.min_ready)
            .await?;
        let now = Utc::now();
        let record = PoolRecord {
            name: name.to_string(),
            org,
            template: req.template,
            release: req.release,
            resources,
            min_ready: req.min_ready,
            max: req.max,
            hits: 0,
            misses: 0,
            created_at: now,
            updated_at: now,
        };
        let stored = match self.store().put_pool(&record).await {
            Ok(stored) => stored,
            Err(StoreError::Conflict(_)) => {
                return Err(ServiceError::AlreadyExists(format!(
                    "pool name {name} is taken (pool names are shared by every org)"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        self.inner.pools_cache.clear();
        tracing::info!(pool = %name, min_ready = stored.min_ready, max = stored.max, "pool set");
        self.wake_pools();
        self.pool_view(stored).await
    }

    /// One pool with its sizes; `pool_not_found` when there is none.
    pub async fn get_pool(&self, name: &str) -> Result<Pool, ServiceError> {
        let record = self.own_pool(name).await?;
        self.pool_view(record).await
    }

    /// Pool `name` when the caller's org owns it (another org's is `pool_not_found`).
    async fn own_pool(&self, name: &str) -> Result<PoolRecord, ServiceError> {
        let caller = scope::require()?;
        match self.store().get_pool(name).await {
            Ok(r) if caller.sees(&r.org) => Ok(r),
            Ok(_) | Err(StoreError::NotFound) => Err(ServiceError::PoolNotFound(name.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// Every pool with its sizes, by name.
    pub async fn list_pools(&self) -> Result<PoolList, ServiceError> {
        let caller = scope::require()?;
        let members = self.store().pool_members().await?;
        let mut pools = Vec::new();
        for record in self.store().list_pools().await? {
            if !caller.sees(&record.org) {
                continue;
            }
            let target = self.pool_release(&record).await?;
            pools.push(view(record, target, &members));
        }
        Ok(PoolList { pools })
    }

    /// Removes pool `name` and starts deleting its members (`pool_not_found` when there is
    /// none). Members still booting are deleted by the pool controller once they are up.
    pub async fn delete_pool(&self, name: &str) -> Result<(), ServiceError> {
        self.own_pool(name).await?;
        let deleted = self.store().delete_pool(name).await?;
        self.inner.pools_cache.clear();
        if !deleted {
            return Err(ServiceError::PoolNotFound(name.to_string()));
        }
        tracing::info!(pool = %name, "pool deleted; draining its members");
        for m in self.store().pool_members().await? {
            if m.pool == name {
                self.retire(&m, "its pool was deleted").await;
            }
        }
        Ok(())
    }

    async fn pool_view(&self, record: PoolRecord) -> Result<Pool, ServiceError> {
        let members = self.store().pool_members().await?;
        let target = self.pool_release(&record).await?;
        Ok(view(record, target, &members))
    }

    /// The release a pool keeps: its pinned one, else its template's latest ready release
    /// (`None` when there is none yet).
    pub(crate) async fn pool_release(&self, p: &PoolRecord) -> Result<Option<u32>, ServiceError> {
        if p.release.is_some() {
            return Ok(p.release);
        }
        match self.pick_release(&p.template, &Pin::Latest).await {
            Ok(r) => Ok(Some(r.number)),
            Err(ServiceError::ReleaseNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Whether member `m` is what pool `p` keeps now (its release `target` and its size).
pub(crate) fn fits(p: &PoolRecord, target: Option<u32>, m: &PoolMember) -> bool {
    m.pool == p.name
        && Some(m.sandbox.release) == target
        && m.sandbox.template == p.template
        && m.sandbox.resources == p.resources
}

fn view(p: PoolRecord, target: Option<u32>, members: &[PoolMember]) -> Pool {
    let mine = members.iter().filter(|m| fits(&p, target, m));
    let (mut ready, mut starting) = (0, 0);
    for m in mine {
        match m.sandbox.state {
            SandboxState::Running => ready += 1,
            SandboxState::Creating => starting += 1,
            _ => {}
        }
    }
    Pool {
        org: p.org.clone(),
        name: p.name,
        template: p.template,
        release: p.release,
        resources: p.resources,
        min_ready: p.min_ready,
        max: p.max,
        ready,
        starting,
        hits: p.hits,
        misses: p.misses,
        created_at: p.created_at,
        updated_at: p.updated_at,
    }
}

fn check_name(name: &str) -> Result<(), InvalidInput> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::new(
            "name",
            "must be 1 to 63 characters of a-z, 0-9 and -",
        ))
    }
}
