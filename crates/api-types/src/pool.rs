//! Warm pools: booted, idle sandboxes of one template release and size, kept ready so a
//! matching `POST /v1/sandboxes` is served without a boot.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Resources, ResourcesRequest};

/// Largest `max` of a pool (members booted and kept per pool).
pub const MAX_POOL_SIZE: u32 = 256;

/// `PUT /v1/pools/{name}` body: creates the pool or replaces its settings (its counters stay).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutPoolRequest {
    /// Template whose sandboxes the pool keeps.
    pub template: String,
    /// Release to keep (default: the template's latest ready release, followed when a newer
    /// one is published; members of the old release are retired).
    #[serde(default)]
    pub release: Option<u32>,
    /// Size of the members; a create is served from the pool only when its resolved resources
    /// are exactly these (same defaults as `POST /v1/sandboxes`).
    #[serde(default)]
    pub resources: Option<ResourcesRequest>,
    /// Members kept booted and idle (0 to `max`).
    pub min_ready: u32,
    /// Most members at once, ready and starting (1 to 256).
    pub max: u32,
}

/// A warm pool and its sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Pool {
    /// Name (`[a-z0-9-]`, 1 to 63 characters).
    pub name: String,
    /// The org it belongs to (its members are that org's sandboxes once claimed).
    #[serde(default = "crate::default_org")]
    pub org: String,
    /// Template of its members.
    pub template: String,
    /// Pinned release; `None` follows the latest ready release.
    pub release: Option<u32>,
    /// Size of its members.
    pub resources: Resources,
    /// Members kept booted and idle.
    pub min_ready: u32,
    /// Most members at once.
    pub max: u32,
    /// Members booted and idle now (claimable).
    pub ready: u32,
    /// Members booting now.
    pub starting: u32,
    /// Creates served by a ready member since the pool was created.
    pub hits: u64,
    /// Creates that matched the pool but found it empty (and cold-started).
    pub misses: u64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change of its settings.
    pub updated_at: DateTime<Utc>,
}

/// `GET /v1/pools` answer, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PoolList {
    /// Every pool.
    pub pools: Vec<Pool>,
}
