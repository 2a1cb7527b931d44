//! `cove metrics`: a sandbox's CPU, memory and disk use now (and, with --json, its history).

use clap::Args;
use cove_api_types::{MetricsSample, SandboxMetrics};
use cove_client::Client;

/// Options of `cove metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Sandbox id.
    pub id: String,
    /// Print the whole answer (current sample and history) as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cove metrics`.
pub async fn run(client: &Client, args: MetricsArgs) -> anyhow::Result<()> {
    let m = client.sandbox_metrics(&args.id).await?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        crate::out!("{}", describe(&m));
    }
    Ok(())
}

/// Bytes as MiB with one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// `used of limit`, or `used (no limit)`.
fn of(used: String, limit: Option<u64>) -> String {
    match limit {
        Some(l) => format!("{used} of {}", mib(l)),
        None => format!("{used} (no limit)"),
    }
}

/// The text form: the current sample, one `field: value` line each.
fn describe(m: &SandboxMetrics) -> String {
    let MetricsSample {
        at,
        cpu,
        memory,
        disk,
        network,
    } = &m.current;
    let mut out = String::new();
    let mut field = |name: &str, value: &str| out.push_str(&format!("{name:<9} {value}\n"));
    field("sandbox:", &m.sandbox_id);
    field(
        "at:",
        &at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    let rate = cpu
        .rate
        .map_or_else(String::new, |r| format!(", {r:.2} CPUs busy"));
    field(
        "cpu:",
        &format!("{:.3} s used{rate}", cpu.usage_us as f64 / 1e6),
    );
    let peak = memory
        .peak_bytes
        .map_or_else(String::new, |p| format!(", peak {}", mib(p)));
    field(
        "memory:",
        &format!("{}{peak}", of(mib(memory.bytes), memory.limit_bytes)),
    );
    let used = disk.used_bytes.map_or_else(|| "unknown".to_string(), mib);
    field("disk:", &of(used, disk.limit_bytes));
    match network {
        Some(n) => field(
            "network:",
            &format!("{} in, {} out", mib(n.rx_bytes), mib(n.tx_bytes)),
        ),
        None => field("network:", "not measured"),
    }
    field(
        "history:",
        &format!(
            "{} samples, every {} s (--json shows them)",
            m.history.len(),
            m.interval_s
        ),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_current_use() {
        let m: SandboxMetrics = serde_json::from_value(serde_json::json!({
            "sandbox_id": "sb-1", "interval_s": 5, "history": [],
            "current": {
                "at": "2025-01-01T00:00:00Z",
                "cpu": {"usage_us": 1500000, "rate": 0.25},
                "memory": {"bytes": 1048576, "peak_bytes": 2097152, "limit_bytes": 536870912},
                "disk": {"used_bytes": 3145728, "limit_bytes": null},
                "network": null
            }
        }))
        .expect("metrics");
        let text = describe(&m);
        assert!(
            text.contains("cpu:      1.500 s used, 0.25 CPUs busy\n"),
            "{text}"
        );
        assert!(
            text.contains("memory:   1.0 MiB of 512.0 MiB, peak 2.0 MiB\n"),
            "{text}"
        );
        assert!(text.contains("disk:     3.0 MiB (no limit)\n"), "{text}");
        assert!(text.contains("network:  not measured\n"), "{text}");
    }
}
