//! Per-org quotas: sandboxes alive, their vCPUs and memory together, and creates per second.
//! A refusal is `429 quota_exceeded` naming the quota, with `Retry-After`. Unclaimed warm pool
//! members count toward none of them; a claimed one counts like any sandbox.
//!
//! The check and the insert of the new sandbox run under the org's own lock, so concurrent
//! creates of one org cannot pass the same last slot together. Creates per second are counted
//! in this process's memory, per fixed one-second window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cove_api_types::{Quotas, Resources};
use cove_store::StoreError;

use crate::{ControlPlane, ServiceError};

/// `Retry-After` of a refusal for capacity (sandboxes, vCPUs, memory): a guess at when one of
/// the org's sandboxes may have ended.
const CAPACITY_RETRY_S: u64 = 5;

/// In-memory quota state.
#[derive(Default)]
pub(crate) struct QuotaState {
    /// Per org: the start of its current one-second window and the creates in it.
    windows: Mutex<HashMap<String, (Instant, u32)>>,
    /// Per org: held from the quota check to the new sandbox's insert.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held while a create of an org with quotas is checked and recorded.
pub(crate) struct QuotaGuard {
    _held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

fn exceeded(message: String, retry_after_s: u64) -> ServiceError {
    ServiceError::QuotaExceeded {
        message,
        retry_after_s,
    }
}

impl ControlPlane {
    /// Checks that `org` may start `count` more sandboxes of `size` now; the returned guard is
    /// to be held until they are recorded. An org without quotas (or unknown) passes at once.
    pub(crate) async fn admit_sandboxes(
        &self,
        org: &str,
        size: &Resources,
        count: u32,
    ) -> Result<QuotaGuard, ServiceError> {
        let quotas = match self.store().get_org(org).await {
            Ok(o) => o.quotas,
            Err(StoreError::NotFound) => Quotas::default(),
            Err(e) => return Err(e.into()),
        };
        if quotas == Quotas::default() {
            return Ok(QuotaGuard { _held: None });
        }
        let lock = {
            let mut locks = self
                .inner
                .quotas
                .locks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            locks.entry(org.to_string()).or_default().clone()
        };
        let held = lock.lock_owned().await;
        if quotas.max_running.is_some()
            || quotas.max_vcpus.is_some()
            || quotas.max_memory_mib.is_some()
        {
            let used = self.store().org_usage(org).await?;
            if let Some(max) = quotas.max_running {
                if used.running + u64::from(count) > u64::from(max) {
                    return Err(exceeded(
                        format!(
                            "quota max_running of org {org} exceeded: {} of {max} sandboxes \
                             are running",
                            used.running
                        ),
                        CAPACITY_RETRY_S,
                    ));
                }
            }
            if let Some(max) = quotas.max_vcpus {
                if used.vcpus + u64::from(size.vcpus * count) > u64::from(max) {
                    return Err(exceeded(
                        format!(
                            "quota max_vcpus of org {org} exceeded: {} of {max} vCPUs in use, \
                             {} more asked",
                            used.vcpus,
                            size.vcpus * count
                        ),
                        CAPACITY_RETRY_S,
                    ));
                }
            }
            if let Some(max) = quotas.max_memory_mib {
                if used.memory_mib + size.memory_mib * u64::from(count) > max {
                    return Err(exceeded(
                        format!(
                            "quota max_memory_mib of org {org} exceeded: {} of {max} MiB in use, \
                             {} more asked",
                            used.memory_mib,
                            size.memory_mib * u64::from(count)
                        ),
                        CAPACITY_RETRY_S,
                    ));
                }
            }
        }
        if let Some(max) = quotas.max_creates_per_s {
            self.take_create_slots(org, max, count)?;
        }
        Ok(QuotaGuard { _held: Some(held) })
    }

    /// Counts `n` creates of `org` in its current second; refuses past `max`.
    fn take_create_slots(&self, org: &str, max: u32, n: u32) -> Result<(), ServiceError> {
        let now = Instant::now();
        let mut windows = self
            .inner
            .quotas
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner());
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
