//! Command line of `cove-bench` and the sizes of a run (full or `--quick`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// One MiB in bytes.
pub const MIB: u64 = 1024 * 1024;

/// `cove-bench [--quick] [--json PATH]`: measures Cove beside the raw runtime on this machine.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "cove-bench",
    version,
    about = "Measures Cove's latencies, throughput and density beside raw runc, in one run"
)]
pub struct Args {
    /// Tiny sizes (few iterations, 10 MiB transfers, 10 sandboxes, 5 clients for 3 s): a smoke
    /// run, not a measurement.
    #[arg(long)]
    pub quick: bool,

    /// Where the JSON results go.
    #[arg(long, value_name = "PATH", default_value = "bench-results.json")]
    pub json: PathBuf,

    /// The static guest agent; default:
    /// `$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/cove-guest-agent` (build it with
    /// `scripts/build-guest-agent.sh --release`).
    #[arg(long, value_name = "PATH", env = "COVE_GUEST_AGENT")]
    pub guest_agent: Option<PathBuf>,

    /// Release build cache shared with the tests, so templates are copied instead of built.
    #[arg(long, value_name = "DIR", default_value = "/var/cache/cove/templates")]
    pub cache_dir: PathBuf,

    /// The runc binary, for Cove and for the baselines.
    #[arg(long, value_name = "PATH", default_value = "runc")]
    pub runc: PathBuf,

    /// A PostgreSQL database for the store measurement (`postgres://...`); the bench works
    /// in a schema of its own there and drops it. Without it that metric is unavailable.
    #[arg(long, value_name = "URL", env = "COVE_BENCH_POSTGRES_URL")]
    pub postgres_url: Option<String>,

    /// Print the server's log (`RUST_LOG`, default `info`) on stderr.
    #[arg(long)]
    pub verbose: bool,

    /// The runtime measured: `runc` (every group below), `qemu` (the VM runtime's boot,
    /// base-snapshot create, exec, pause, suspend and wake beside raw `qemu-system-x86_64`) or
    /// `gvisor` (create, exec, suspend, wake, fork and a system-call loop beside raw `runsc`
    /// and runc); `--only` does not apply to the last two.
    #[arg(long, value_name = "RUNTIME", default_value = "runc", value_parser = ["runc", "qemu", "gvisor"])]
    pub runtime: String,

    /// Measure only these groups (comma-separated): cold_start, exec, stream, files,
    /// lifecycle, checkpoints, density, concurrency, tiers, store, pools, network, userns,
    /// replicas, scheduler.
    /// Default: all.
    #[arg(long, value_name = "GROUPS", value_delimiter = ',', value_parser = GROUPS)]
    pub only: Vec<String>,

    /// Most idle sandboxes the density run creates (default 1000, with `--quick` 10); it also
    /// stops early when `MemAvailable` falls under 2 GiB.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub density_max: Option<u32>,

    /// The concurrency tiers of the `tiers` group (comma-separated numbers of creates at once;
    /// default 1,10,20,50, with `--quick` 1,5).
    #[arg(long, value_name = "N,...", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=200))]
    pub tiers: Vec<u32>,
}

/// The measurement groups `--only` selects from, in the order a run measures them.
pub const GROUPS: [&str; 15] = [
    "cold_start",
    "exec",
    "stream",
    "files",
    "lifecycle",
    "checkpoints",
    "density",
    "concurrency",
    "tiers",
    "store",
    "pools",
    "network",
    "userns",
    "replicas",
    "scheduler",
];

impl Args {
    /// The guest agent to use: `--guest-agent`/`COVE_GUEST_AGENT`, else the release build
    /// under `CARGO_TARGET_DIR` (or the workspace's `target/`).
    pub fn guest_agent_path(&self) -> PathBuf {
        if let Some(path) = &self.guest_agent {
            return path.clone();
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../..")
                    .join("target")
            });
        target.join("x86_64-unknown-linux-gnu/release/cove-guest-agent")
    }

    /// Whether group `name` (one of [`GROUPS`]) is measured in this run.
    pub fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == name)
    }

    /// The sizes of this run.
    pub fn scale(&self) -> Scale {
        let mut scale = if self.quick {
            Scale::QUICK
        } else {
            Scale::FULL
        };
        if let Some(n) = self.density_max {
            scale.density_max = n as usize;
        }
        scale
    }

    /// The concurrency tiers of this run: `--tiers`, else the scale's, ascending, each once.
    pub fn tiers(&self) -> Vec<usize> {
        let mut tiers: Vec<usize> = if self.tiers.is_empty() {
            self.scale().tiers.to_vec()
        } else {
            self.tiers.iter().map(|&n| n as usize).collect()
        };
        tiers.sort_unstable();
        tiers.dedup();
        tiers
    }
}

/// How much of everything a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Timed create → first command runs (each on a new sandbox), and raw `runc run`s.
    pub cold_start_runs: usize,
    /// Timed exec round trips (and raw `runc exec`s, host fork/execs).
    pub exec_runs: usize,
    /// Bytes written to stdout per streaming run.
    pub stream_bytes: u64,
    /// Timed streaming runs.
    pub stream_runs: usize,
    /// Bytes per file upload/download.
    pub file_bytes: u64,
    /// Timed uploads and downloads.
    pub file_runs: usize,
    /// Timed pause+resume and suspend+wake round trips.
    pub lifecycle_runs: usize,
    /// Most idle sandboxes the density run creates.
    pub density_max: usize,
    /// Most raw `sleep` containers the density baseline starts (memory per container is
    /// linear; fewer keep the run short).
    pub density_baseline_max: usize,
    /// Density stops when `MemAvailable` falls under this many bytes.
    pub density_min_available: u64,
    /// Concurrent clients creating and deleting sandboxes.
    pub concurrency_clients: usize,
    /// How long they keep starting new cycles.
    pub concurrency_duration: Duration,
    /// Timed creates' store calls per store backend.
    pub store_runs: usize,
    /// Creates per side of the two-replica throughput (SQLite server, two replicas).
    pub replica_creates: usize,
    /// Timed creates served one at a time by a warm pool.
    pub pool_runs: usize,
    /// Concurrent creates of the burst, and the size of the pool that serves them.
    pub pool_burst: usize,
    /// The concurrency tiers (creates at once) unless `--tiers` names others.
    pub tiers: &'static [usize],
    /// Timed creates per tier at least (a tier of N runs bursts of N until it has them).
    pub tier_samples: usize,
    /// Bursts per tier at least.
    pub tier_rounds: usize,
    /// Cold starts per server in the networking on/off comparison.
    pub network_cold_starts: usize,
    /// Connection setups per path in the gateway measurement.
    pub gateway_rounds: usize,
    /// Bytes per download in the gateway measurement.
    pub gateway_bytes: u64,
    /// Create → delete cycles of the network leak check.
    pub network_leak_cycles: usize,
    /// Timed runs of each qemu measurement (VMs under TCG take seconds each).
    pub qemu_runs: usize,
    /// Timed runs of each gvisor measurement (exec: four times as many).
    pub gvisor_runs: usize,
    /// Timed scheduler decisions over 1,000 simulated nodes.
    pub scheduler_runs: usize,
}

impl Scale {
    /// The real measurement (under 10 minutes on 2 cores).
    pub const FULL: Scale = Scale {
        cold_start_runs: 20,
        exec_runs: 100,
        stream_bytes: 200 * MIB,
        stream_runs: 5,
        file_bytes: 100 * MIB,
        file_runs: 5,
        lifecycle_runs: 10,
        density_max: 1000,
        density_baseline_max: 100,
        density_min_available: 2048 * MIB,
        concurrency_clients: 50,
        concurrency_duration: Duration::from_secs(30),
        store_runs: 300,
        replica_creates: 24,
        pool_runs: 50,
        pool_burst: 50,
        tiers: &[1, 10, 20, 50],
        tier_samples: 30,
        tier_rounds: 3,
        network_cold_starts: 20,
        gateway_rounds: 500,
        gateway_bytes: 100 * MIB,
        network_leak_cycles: 1000,
        qemu_runs: 5,
        gvisor_runs: 10,
        scheduler_runs: 5000,
    };

    /// A smoke run: every metric, tiny.
    pub const QUICK: Scale = Scale {
        cold_start_runs: 3,
        exec_runs: 5,
        stream_bytes: 10 * MIB,
        stream_runs: 2,
        file_bytes: 10 * MIB,
        file_runs: 2,
        lifecycle_runs: 2,
        density_max: 10,
        density_baseline_max: 10,
        density_min_available: 2048 * MIB,
        concurrency_clients: 5,
        concurrency_duration: Duration::from_secs(3),
        store_runs: 20,
        replica_creates: 8,
        pool_runs: 3,
        pool_burst: 5,
        tiers: &[1, 5],
        tier_samples: 4,
        tier_rounds: 1,
        network_cold_starts: 3,
        gateway_rounds: 20,
        gateway_bytes: 4 * MIB,
        network_leak_cycles: 12,
        qemu_runs: 2,
        gvisor_runs: 3,
        scheduler_runs: 200,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_come_from_the_flag_or_the_scale() {
        let args = Args::parse_from(["cove-bench"]);
        assert_eq!(args.tiers(), vec![1, 10, 20, 50]);
        let args = Args::parse_from(["cove-bench", "--quick"]);
        assert_eq!(args.tiers(), vec![1, 5]);
        let args = Args::parse_from(["cove-bench", "--quick", "--tiers", "20,2,20"]);
        assert_eq!(args.tiers(), vec![2, 20]);
        assert!(Args::try_parse_from(["cove-bench", "--tiers", "0"]).is_err());
        assert!(Args::try_parse_from(["cove-bench", "--only", "tiers"]).is_ok());
    }
}
