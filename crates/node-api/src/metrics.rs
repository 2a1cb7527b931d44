//! What a node can tell about its capacity and about each sandbox's resource usage.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::NodeError;

/// What the node offers and holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// CPUs the node can run sandboxes on.
    pub cpus: u32,
    /// Memory of the host, bytes.
    pub memory_bytes: u64,
    /// Memory available for new work now (the kernel's `MemAvailable`), bytes.
    pub memory_available_bytes: u64,
    /// Sandboxes the node holds now (running or paused).
    pub sandboxes: u32,
    /// Bytes free for new sandboxes on the node's data dir (`None`: unknown). A create is
    /// refused with `no_space` when it is nearly zero.
    #[serde(default)]
    pub disk_available_bytes: Option<u64>,
}

/// One reading of a sandbox's resource usage. Fields the runtime cannot read are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricsSample {
    /// When it was read, Unix milliseconds.
    pub at_ms: u64,
    /// CPU time used by all the sandbox's processes since it started, microseconds.
    pub cpu_usage_us: u64,
    /// CPUs busy on average since the previous sample (1.0 = one CPU fully busy); `None` for
    /// the first sample.
    pub cpu_rate: Option<f64>,
    /// Memory charged to the sandbox now, bytes.
    pub memory_bytes: u64,
    /// Highest memory charged since it started, bytes.
    pub memory_peak_bytes: Option<u64>,
    /// Its memory limit, bytes (`None`: unlimited).
    pub memory_limit_bytes: Option<u64>,
    /// Bytes used by the sandbox's writable layer or own disk.
    pub disk_used_bytes: Option<u64>,
    /// Size of its own disk, bytes (`None`: no own disk, it shares the node's).
    pub disk_limit_bytes: Option<u64>,
}

/// A sandbox's usage now and over the last minutes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxMetrics {
    /// Read at the time of the call.
    pub current: MetricsSample,
    /// Earlier samples, oldest first, one every `interval_s` while the sandbox ran on this
    /// node (bounded: at most [`HISTORY_SAMPLES`]).
    pub history: Vec<MetricsSample>,
    /// Seconds between history samples.
    pub interval_s: u32,
}

/// Most history samples a node keeps per sandbox (10 minutes at one sample every 5 s).
pub const HISTORY_SAMPLES: usize = 120;

/// Capacity and usage reports of the node.
#[async_trait]
pub trait NodeMetrics: Send + Sync + 'static {
    /// What the node offers and holds now.
    ///
    /// # Errors
    /// `Internal` when the host's figures cannot be read.
    async fn capacity(&self) -> Result<NodeCapacity, NodeError>;

    /// Usage of a running or paused sandbox now, plus its recent history.
    ///
    /// # Errors
    /// `SandboxNotFound` when the node does not hold it (never started here, suspended,
    /// removed); `Runtime` when its cgroups cannot be read.
    async fn sandbox_metrics(&self, id: &str) -> Result<SandboxMetrics, NodeError>;
}
