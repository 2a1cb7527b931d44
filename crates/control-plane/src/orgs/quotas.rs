//! Per-org quotas: sandboxes alive (failed ones too, until deleted: they may still hold node
//! resources), their vCPUs and memory together, sandboxes that exist (any state but
//! `deleted`), disk (the sandboxes' own disks and the org's volumes), snapshot bytes (the
//! org's checkpoints, imported ones too, and its suspended sandboxes' snapshots), and creates
//! per second. A refusal is `429 quota_exceeded` naming the quota, with `Retry-After`. The
//! members of an org's warm pools count like its other sandboxes, claimed or not: the pool
//! controller starts none past a quota, and a pool whose `min_ready` members alone exceed one
//! is refused.
//!
//! What each call asks is an `Ask`: new sandboxes (create, create from a checkpoint, fork,
//! pool fill), a wake (the sandbox exists and keeps its disk, so only the quotas on sandboxes
//! alive grow), a volume (disk only), a checkpoint or an import (snapshot bytes).
//!
//! The check and the record of what it admitted run under the org's quota lock, a lock of the
//! store ([`cove_store::LockStore`], key `quota:<org>`): on PostgreSQL a transaction-scoped
//! advisory lock, so concurrent calls of one org through any replicas cannot pass the same
//! last slot together. Creates per second are counted in this process's memory, per fixed
//! one-second window.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use cove_api_types::{Quotas, Resources};
use cove_store::{OrgUsage, StoreError, StoreLock};
use parking_lot::Mutex;

use crate::{ControlPlane, ServiceError};

/// `Retry-After` of a refusal for capacity (sandboxes, vCPUs, memory, disk): a guess at when
/// one of the org's sandboxes may have ended.
pub(crate) const CAPACITY_RETRY_S: u64 = 5;

/// In-memory quota state.
#[derive(Default)]
pub(crate) struct QuotaState {
    /// Per org: the start of its current one-second window and the creates in it.
    windows: Mutex<HashMap<String, (Instant, u32)>>,
    /// Pools whose refill a quota of their org stops (logged once until it starts one again).
    blocked_pools: Mutex<HashSet<String>>,
}

/// What a call asks of an org's quotas.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ask {
    /// `count` new sandboxes of `size` (created, restored, forked, or warm pool members).
    Sandboxes { size: Resources, count: u32 },
    /// A suspended sandbox of `size` runs again.
    Wake { size: Resources },
    /// A new volume of `size_mib`.
    Volume { size_mib: u64 },
    /// New snapshot bytes, `mib` rounded up: a checkpoint about to be saved asks 1 (its size
    /// is known once saved, so it is refused only when the org is at or past the quota); an
    /// import asks its size.
    Snapshot { mib: u64 },
}

/// The store lock key of `org`'s quotas.
fn quota_key(org: &str) -> String {
    format!("quota:{org}")
}

impl Ask {
    /// What it adds to each count of [`OrgUsage`].
    fn adds(self) -> OrgUsage {
        match self {
            Ask::Sandboxes { size, count } => {
                let n = u64::from(count);
                OrgUsage {
                    running: n,
                    vcpus: u64::from(size.vcpus) * n,
                    memory_mib: size.memory_mib * n,
                    sandboxes: n,
                    disk_mib: size.disk_mib.unwrap_or(0) * n,
                    snapshot_mib: 0,
                }
            }
            Ask::Wake { size } => OrgUsage {
                running: 1,
                vcpus: u64::from(size.vcpus),
                memory_mib: size.memory_mib,
                ..OrgUsage::default()
            },
            Ask::Volume { size_mib } => OrgUsage {
                disk_mib: size_mib,
                ..OrgUsage::default()
            },
            Ask::Snapshot { mib } => OrgUsage {
                snapshot_mib: mib,
                ..OrgUsage::default()
            },
        }
    }
}

/// The first quota of `quotas` that `used` plus `ask` goes past, as a refusal's message.
pub(crate) fn over_quota(org: &str, quotas: &Quotas, used: &OrgUsage, ask: Ask) -> Option<String> {
    let more = ask.adds();
    let checks = [
        (
            "max_running",
            quotas.max_running.map(u64::from),
            used.running,
            more.running,
            "sandboxes alive",
        ),
        (
            "max_vcpus",
            quotas.max_vcpus.map(u64::from),
            used.vcpus,
            more.vcpus,
            "vCPUs",
        ),
        (
            "max_memory_mib",
            quotas.max_memory_mib,
            used.memory_mib,
            more.memory_mib,
            "MiB of memory",
        ),
        (
            "max_sandboxes",
            quotas.max_sandboxes.map(u64::from),
            used.sandboxes,
            more.sandboxes,
            "sandboxes",
        ),
        (
            "max_disk_mib",
            quotas.max_disk_mib,
            used.disk_mib,
            more.disk_mib,
            "MiB of disk",
        ),
        (
            "max_snapshot_mib",
            quotas.max_snapshot_mib,
            used.snapshot_mib,
            more.snapshot_mib,
            "MiB of snapshots",
        ),
    ];
    checks.into_iter().find_map(|(name, max, used, more, what)| {
        let max = max?;
        let past = more > 0 && used.saturating_add(more) > max;
        past.then(|| {
            format!("quota {name} of org {org} exceeded: {used} of {max} {what} in use, {more} more asked")
        })
    })
}

/// Held while a call of an org with quotas is checked and recorded.
pub(crate) struct QuotaGuard {
    org: String,
    quotas: Quotas,
    _held: Option<StoreLock>,
}

/// A refusal for quota: `message` names it, `Retry-After` is `retry_after_s`.
pub(crate) fn exceeded(message: String, retry_after_s: u64) -> ServiceError {
    ServiceError::QuotaExceeded {
        message,
        retry_after_s,
    }
}

impl ControlPlane {
    /// Reads `org`'s quotas and takes its quota lock in the store (none for an org without
    /// quotas, or an unknown one). Hold the guard until what is admitted under it is recorded.
    pub(crate) async fn lock_quotas(&self, org: &str) -> Result<QuotaGuard, ServiceError> {
        let quotas = match self.store().get_org(org).await {
            Ok(o) => o.quotas,
            Err(StoreError::NotFound) => Quotas::default(),
            Err(e) => return Err(e.into()),
        };
        if quotas == Quotas::default() {
            return Ok(QuotaGuard {
                org: org.to_string(),
                quotas,
                _held: None,
            });
        }
        let held = self.store().lock(&quota_key(org)).await?;
        Ok(QuotaGuard {
            org: org.to_string(),
            quotas,
            _held: Some(held),
        })
    }

    /// Refuses `ask` when it would take the guard's org past a quota on what it holds.
    pub(crate) async fn check_quota(&self, g: &QuotaGuard, ask: Ask) -> Result<(), ServiceError> {
        let q = &g.quotas;
        let capped = q.max_running.is_some()
            || q.max_vcpus.is_some()
            || q.max_memory_mib.is_some()
            || q.max_sandboxes.is_some()
            || q.max_disk_mib.is_some()
            || q.max_snapshot_mib.is_some();
        if !capped {
            return Ok(());
        }
        let used = self.store().org_usage(&g.org).await?;
        match over_quota(&g.org, q, &used, ask) {
            Some(message) => Err(exceeded(message, CAPACITY_RETRY_S)),
            None => Ok(()),
        }
    }

    /// Counts `n` creates of the guard's org in its current second; refuses past its
    /// `max_creates_per_s`.
    pub(crate) fn check_create_rate(&self, g: &QuotaGuard, n: u32) -> Result<(), ServiceError> {
        match g.quotas.max_creates_per_s {
            Some(max) => self.take_create_slots(&g.org, max, n),
            None => Ok(()),
        }
    }

    /// Checks that `org` may start `count` more sandboxes of `size` now (every quota, creates
    /// per second included); the returned guard is to be held until they are recorded.
    pub(crate) async fn admit_sandboxes(
        &self,
        org: &str,
        size: &Resources,
        count: u32,
    ) -> Result<QuotaGuard, ServiceError> {
        let g = self.lock_quotas(org).await?;
        self.check_quota(&g, Ask::Sandboxes { size: *size, count })
            .await?;
        self.check_create_rate(&g, count)?;
        Ok(g)
    }

    /// Checks `ask` against `org`'s quotas on what it holds; hold the guard until it is
    /// recorded.
    pub(crate) async fn admit(&self, org: &str, ask: Ask) -> Result<QuotaGuard, ServiceError> {
        let g = self.lock_quotas(org).await?;
        self.check_quota(&g, ask).await?;
        Ok(g)
    }

    /// The snapshot bytes `org` may still add (`None`: no `max_snapshot_mib`); refuses with
    /// `quota_exceeded` when it has none left.
    pub(crate) async fn snapshot_room(&self, org: &str) -> Result<Option<u64>, ServiceError> {
        let g = self.admit(org, Ask::Snapshot { mib: 1 }).await?;
        let Some(max) = g.quotas.max_snapshot_mib else {
            return Ok(None);
        };
        let used = self.store().org_usage(org).await?.snapshot_mib;
        Ok(Some(max.saturating_sub(used).saturating_mul(1 << 20)))
    }

    /// Refuses a pool of `org` whose `min_ready` members of `size` alone exceed a quota.
    pub(crate) async fn check_pool_quota(
        &self,
        org: &str,
        size: &Resources,
        min_ready: u32,
    ) -> Result<(), ServiceError> {
        let quotas = match self.store().get_org(org).await {
            Ok(o) => o.quotas,
            Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let ask = Ask::Sandboxes {
            size: *size,
            count: min_ready,
        };
        match over_quota(org, &quotas, &OrgUsage::default(), ask) {
            Some(why) => Err(exceeded(
                format!("the pool's min_ready members alone exceed a quota: {why}"),
                CAPACITY_RETRY_S,
            )),
            None => Ok(()),
        }
    }

    /// Records whether pool `name`'s refill is stopped by a quota; returns whether that is
    /// news (so it is logged once per stop).
    pub(crate) fn pool_blocked(&self, name: &str, blocked: bool) -> bool {
        let mut set = self.inner.quotas.blocked_pools.lock();
        if blocked {
            set.insert(name.to_string())
        } else {
            set.remove(name)
        }
    }

    /// Counts `n` creates of `org` in its current second; refuses past `max`.
    fn take_create_slots(&self, org: &str, max: u32, n: u32) -> Result<(), ServiceError> {
        let now = Instant::now();
        let mut windows = self.inner.quotas.windows.lock();
        let (start, count) = windows.entry(org.to_string()).or_insert((now, 0));
        if now.duration_since(*start) >= Duration::from_secs(1) {
            *start = now;
            *count = 0;
        }
        if *count + n > max {
            return Err(exceeded(
                format!("quota max_creates_per_s of org {org} exceeded: {max} creates per second"),
                1,
            ));
        }
        *count += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(disk_mib: Option<u64>) -> Resources {
        Resources {
            vcpus: 2,
            memory_mib: 2048,
            pids_max: 1024,
            disk_mib,
        }
    }

    #[test]
    fn each_ask_is_held_against_the_quotas_it_grows() {
        let quotas = Quotas {
            max_sandboxes: Some(2),
            max_disk_mib: Some(10_000),
            ..Quotas::default()
        };
        let used = OrgUsage {
            sandboxes: 2,
            disk_mib: 9_000,
            ..OrgUsage::default()
        };
        let new = Ask::Sandboxes {
            size: size(Some(100)),
            count: 1,
        };
        let why = over_quota("acme", &quotas, &used, new).expect("refused");
        assert!(
            why.contains("max_sandboxes") && why.contains("acme"),
            "{why}"
        );
        // A wake adds no sandbox and no disk.
        let wake = Ask::Wake {
            size: size(Some(100)),
        };
        assert_eq!(over_quota("acme", &quotas, &used, wake), None);
        let vol = Ask::Volume { size_mib: 1_001 };
        let why = over_quota("acme", &quotas, &used, vol).expect("refused");
        assert!(why.contains("max_disk_mib"), "{why}");
        assert_eq!(
            over_quota("acme", &quotas, &used, Ask::Volume { size_mib: 1_000 }),
            None
        );
        let capped = Quotas {
            max_running: Some(1),
            ..Quotas::default()
        };
        let why =
            over_quota("acme", &capped, &OrgUsage { running: 1, ..used }, wake).expect("refused");
        assert!(why.contains("max_running"), "{why}");
    }
}
