//! Warm pools: their rows, and the membership of sandboxes in them.
//!
//! A member is a sandbox row whose `pool` column names its pool. Members are not listed by
//! [`crate::SandboxStore::list_sandboxes`]. A create claims a ready (`running`) member with
//! [`PoolStore::claim_member`]: one atomic step that takes the row out of its pool, applies the
//! create's per-sandbox settings and counts a hit, so two concurrent creates never get the same
//! member.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{Resources, Sandbox};

use crate::StoreError;

/// A pool's row: its settings and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRecord {
    /// Name (the key: one namespace for every org).
    pub name: String,
    /// The org it belongs to (and its members, once claimed).
    pub org: String,
    /// Template of its members.
    pub template: String,
    /// Pinned release (`None`: the latest ready one).
    pub release: Option<u32>,
    /// Size of its members.
    pub resources: Resources,
    /// Members kept ready.
    pub min_ready: u32,
    /// Most members at once.
    pub max: u32,
    /// Creates served by a member.
    pub hits: u64,
    /// Creates that matched but found no ready member.
    pub misses: u64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change of its settings.
    pub updated_at: DateTime<Utc>,
}

/// A sandbox that belongs to a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolMember {
    /// The pool it belongs to.
    pub pool: String,
    /// Its row.
    pub sandbox: Sandbox,
}

/// What a create asks of a member, and the per-sandbox settings it applies when it claims one.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolClaim {
    /// The org claiming: only its own pools' members match.
    pub org: String,
    /// Template the member must run.
    pub template: String,
    /// Release the member must run.
    pub release: u32,
    /// Resources the member must have (all fields equal).
    pub resources: Resources,
    /// The sandbox's environment (replaces the member's).
    pub env: BTreeMap<String, String>,
    /// The sandbox's metadata.
    pub metadata: BTreeMap<String, String>,
    /// Default working directory of commands.
    pub cwd: String,
    /// Default user of commands.
    pub user: String,
    /// Idle timeout in seconds (0 = never).
    pub idle_timeout_s: u64,
    /// Seconds after `at` at which the sandbox is deleted.
    pub ttl_s: Option<u64>,
    /// The claim time: the sandbox's new `created_at`, `updated_at` and `last_activity_at`.
    pub at: DateTime<Utc>,
}

/// Pool rows and membership.
#[async_trait]
pub trait PoolStore: Send + Sync {
    /// Creates pool `p.name` or replaces its settings (template, release, resources,
    /// min_ready, max, updated_at); an existing pool keeps its counters and `created_at`.
    /// Returns the row as stored. A name taken by another org's pool is
    /// [`StoreError::Conflict`] (nothing is written).
    async fn put_pool(&self, p: &PoolRecord) -> Result<PoolRecord, StoreError>;

    /// One pool; [`StoreError::NotFound`] when there is none.
    async fn get_pool(&self, name: &str) -> Result<PoolRecord, StoreError>;

    /// Every pool, by name.
    async fn list_pools(&self) -> Result<Vec<PoolRecord>, StoreError>;

    /// Removes pool `name` (its members stay rows naming it, for the controller to retire).
    /// Returns whether it existed.
    async fn delete_pool(&self, name: &str) -> Result<bool, StoreError>;

    /// Inserts sandbox `s` as a member of pool `pool`. A taken id is [`StoreError::Conflict`].
    async fn insert_pool_member(&self, s: &Sandbox, pool: &str) -> Result<(), StoreError>;

    /// Every member that is not `deleted`, of every pool (also of pools that no longer
    /// exist), in no particular order.
    async fn pool_members(&self) -> Result<Vec<PoolMember>, StoreError>;

    /// In one transaction: takes one `running` member of any pool of the claim's org whose template, release and
    /// resources equal the claim's out of its pool, applies the claim's settings to it, adds
    /// one to that pool's `hits`, records `op` for it (its `sandbox_id` is set to the member's)
    /// already `succeeded`, and records its `sandbox.created` event. Returns the claimed
    /// sandbox with the pool's name and the operation, or `None` when no member matches
    /// (nothing is written). Concurrent claims never return the same member. An idempotency
    /// key of `op` already taken is [`StoreError::Conflict`] and nothing is claimed.
    async fn claim_member(
        &self,
        c: &PoolClaim,
        op: &crate::NewOperation,
    ) -> Result<Option<(PoolMember, cove_api_types::Operation)>, StoreError>;

    /// Adds one to the `misses` of each named pool (unknown names are skipped).
    async fn record_pool_misses(&self, names: &[String]) -> Result<(), StoreError>;

    /// Moves member `id` of pool `pool` to `deleting` (remembering the state left), if it is
    /// still a member of that pool and `creating`, `running` or `failed`: a compare-and-set
    /// against a concurrent claim. Returns whether it moved.
    async fn retire_member(&self, id: &str, pool: &str) -> Result<bool, StoreError>;
}
