//! `NodeMetrics` of the fake node: a fixed host (4 CPUs, 8 GiB, 6 GiB available) and, per
//! sandbox, usage derived from its launch resources and the logical clock, so tests can
//! assert exact values.

use async_trait::async_trait;
use cove_node_api::{
    MetricsSample, NodeCapacity, NodeError, NodeMetrics, NodeSandboxState, SandboxMetrics,
};

use crate::{Call, FakeNode};

/// CPUs of the fake host.
pub const FAKE_CPUS: u32 = 4;
/// Memory of the fake host, bytes.
pub const FAKE_MEMORY_BYTES: u64 = 8 << 30;
/// Available memory of the fake host, bytes.
pub const FAKE_MEMORY_AVAILABLE_BYTES: u64 = 6 << 30;
/// Memory every fake sandbox uses, bytes.
pub const FAKE_SANDBOX_MEMORY_BYTES: u64 = 64 << 20;

#[async_trait]
impl NodeMetrics for FakeNode {
    async fn capacity(&self) -> Result<NodeCapacity, NodeError> {
        self.run(Call::Capacity, "", None, |st| {
            let held = st
                .sandboxes
                .values()
                .filter(|s| s.state != NodeSandboxState::Stopped)
                .count();
            Ok(NodeCapacity {
                cpus: FAKE_CPUS,
                memory_bytes: FAKE_MEMORY_BYTES,
                memory_available_bytes: FAKE_MEMORY_AVAILABLE_BYTES,
                sandboxes: u32::try_from(held).unwrap_or(u32::MAX),
                disk_available_bytes: st.disk_available_bytes,
            })
        })
        .await
    }

    /// One history sample 5 s before `current`; CPU use is 1000 µs per started command,
    /// memory [`FAKE_SANDBOX_MEMORY_BYTES`] against the launch's `memory_mib`, disk 0 bytes
    /// used of `disk_mib` (or no limit).
    async fn sandbox_metrics(&self, id: &str) -> Result<SandboxMetrics, NodeError> {
        self.run(Call::SandboxMetrics, id, None, |st| {
            let at_ms = st.tick() + 5000;
            let sb = st.sandbox(id)?;
            let r = sb.launch.resources;
            let cpu_usage_us = 1000 * sb.order.len() as u64;
            let sample = |at_ms: u64, cpu_rate: Option<f64>| MetricsSample {
                at_ms,
                cpu_usage_us,
                cpu_rate,
                memory_bytes: FAKE_SANDBOX_MEMORY_BYTES,
                memory_peak_bytes: Some(FAKE_SANDBOX_MEMORY_BYTES),
                memory_limit_bytes: Some(r.memory_mib << 20),
                disk_used_bytes: Some(0),
                disk_limit_bytes: r.disk_mib.map(|m| m << 20),
            };
            Ok(SandboxMetrics {
                current: sample(at_ms, Some(0.0)),
                history: vec![sample(at_ms - 5000, None)],
                interval_s: 5,
            })
        })
        .await
    }
}
