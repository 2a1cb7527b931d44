//! `GET /v1/sandboxes/{id}/metrics`: a sandbox's resource usage now and over the last minutes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Answer of `GET /v1/sandboxes/{id}/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxMetrics {
    /// The sandbox.
    pub sandbox_id: String,
    /// Read at the time of the request.
    pub current: MetricsSample,
    /// Earlier samples, oldest first, one every `interval_s` seconds while the sandbox ran on
    /// its node (the last 10 minutes at most; empty right after a start or wake).
    pub history: Vec<MetricsSample>,
    /// Seconds between history samples.
    pub interval_s: u32,
}

/// One reading of a sandbox's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MetricsSample {
    /// When it was read.
    pub at: DateTime<Utc>,
    /// CPU use.
    pub cpu: CpuMetrics,
    /// Memory use.
    pub memory: MemoryMetrics,
    /// Disk use.
    pub disk: DiskMetrics,
    /// Network traffic. Always `null` in this version: per-sandbox traffic is not measured yet.
    pub network: Option<NetworkMetrics>,
}

/// CPU use of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CpuMetrics {
    /// CPU time used by all its processes since it started, microseconds.
    pub usage_us: u64,
    /// CPUs busy on average since the previous sample (1.0 = one CPU fully busy); `null` when
    /// there is no previous sample.
    pub rate: Option<f64>,
}

/// Memory use of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryMetrics {
    /// Memory charged to it now (page cache included), bytes.
    pub bytes: u64,
    /// Highest charge since it started, bytes (`null`: the host cannot tell).
    pub peak_bytes: Option<u64>,
    /// Its limit, bytes (`null`: unlimited).
    pub limit_bytes: Option<u64>,
}

/// Disk use of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DiskMetrics {
    /// Bytes its writable layer (or own disk) uses (`null`: the runtime cannot tell).
    pub used_bytes: Option<u64>,
    /// Size of its own disk, bytes (`null`: it has none and writes to the node's disk).
    pub limit_bytes: Option<u64>,
}

/// Network traffic of a sandbox (not measured yet; see [`MetricsSample::network`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkMetrics {
    /// Bytes received since it started.
    pub rx_bytes: u64,
    /// Bytes sent since it started.
    pub tx_bytes: u64,
}
