//! A sandbox's resource usage (`GET /v1/sandboxes/{id}/metrics`), read from its node.

use chrono::{DateTime, Utc};
use cove_api_types::{
    CpuMetrics, DiskMetrics, MemoryMetrics, MetricsSample, SandboxMetrics, SandboxState,
};

use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

impl ControlPlane {
    /// Usage of a running or paused sandbox now and over the last minutes. Reading it is not
    /// activity: it does not keep an idle sandbox from being suspended.
    ///
    /// # Errors
    /// `sandbox_not_found`; `sandbox_not_running` in any state but running or paused (a
    /// suspended sandbox holds nothing on a node to measure); `unavailable` when its node
    /// has lost it; `internal` when the node cannot read its usage.
    pub async fn sandbox_metrics(&self, id: &str) -> Result<SandboxMetrics, ServiceError> {
        let s = self.get_sandbox(id).await?;
        if !matches!(s.state, SandboxState::Running | SandboxState::Paused) {
            return Err(ServiceError::SandboxNotRunning {
                id: s.id,
                state: s.state,
            });
        }
        let m = self
            .node()
            .sandbox_metrics(&s.id)
            .await
            .map_err(|e| from_node(e, &s.id))?;
        Ok(SandboxMetrics {
            sandbox_id: s.id,
            current: to_api(m.current),
            history: m.history.into_iter().map(to_api).collect(),
            interval_s: m.interval_s,
        })
    }
}

fn to_api(s: cove_node_api::MetricsSample) -> MetricsSample {
    let at = i64::try_from(s.at_ms)
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .unwrap_or_default();
    MetricsSample {
        at,
        cpu: CpuMetrics {
            usage_us: s.cpu_usage_us,
            rate: s.cpu_rate,
        },
        memory: MemoryMetrics {
            bytes: s.memory_bytes,
            peak_bytes: s.memory_peak_bytes,
            limit_bytes: s.memory_limit_bytes,
        },
        disk: DiskMetrics {
            used_bytes: s.disk_used_bytes,
            limit_bytes: s.disk_limit_bytes,
        },
        network: None,
    }
}
