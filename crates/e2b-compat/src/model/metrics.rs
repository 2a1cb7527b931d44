//! Sandbox metrics.

use std::collections::BTreeMap;

use serde::Serialize;

/// `SandboxMetric`: one reading of a sandbox's usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetric {
    /// When it was read, RFC 3339.
    pub timestamp: String,
    /// The same instant, Unix seconds.
    pub timestamp_unix: i64,
    /// vCPUs of the sandbox.
    pub cpu_count: u32,
    /// CPU busy since the previous reading, percent of `cpuCount` CPUs (two decimals).
    pub cpu_used_pct: f64,
    /// Memory charged to the sandbox (page cache included), bytes.
    pub mem_used: u64,
    /// Its memory limit, bytes.
    pub mem_total: u64,
    /// Page cache, bytes: always 0 (not split out of `memUsed`).
    pub mem_cache: u64,
    /// Disk used by its writable layer or own disk, bytes.
    pub disk_used: u64,
    /// Its disk's size, bytes (0 without one of its own).
    pub disk_total: u64,
}

/// The answer of `GET /sandboxes/metrics`: the current reading per E2B sandbox id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxesMetrics {
    /// Readings by E2B sandbox id.
    pub sandboxes: BTreeMap<String, SandboxMetric>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::assert_wire;

    #[test]
    fn a_metric_keeps_its_number_types() {
        let m = SandboxMetric {
            timestamp: "t".into(),
            timestamp_unix: 1_700_000_000,
            cpu_count: 2,
            cpu_used_pct: 0.0,
            mem_used: 1,
            mem_total: 2,
            mem_cache: 0,
            disk_used: 3,
            disk_total: 4,
        };
        let json = serde_json::to_string(&m).expect("json");
        // A float stays a float (`0.0`, not `0`).
        assert!(json.contains(r#""cpuUsedPct":0.0"#), "{json}");
        assert_wire(
            &SandboxesMetrics {
                sandboxes: BTreeMap::from([("abc".into(), m)]),
            },
            r#"{"sandboxes":{"abc":{"timestamp":"t","timestampUnix":1700000000,"cpuCount":2,
                "cpuUsedPct":0.0,"memUsed":1,"memTotal":2,"memCache":0,"diskUsed":3,
                "diskTotal":4}}}"#,
        );
    }
}
