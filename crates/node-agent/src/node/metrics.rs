//! [`NodeMetrics`] for [`NodeAgent`]: the host's capacity, and each sandbox's usage read from
//! its cgroups (cgroup v1 controllers or the v2 unified hierarchy) and its runtime's disk
//! report, with a bounded history sampled in the background ([`NodeAgent::sample_metrics`]).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use cove_node_api::{
    MetricsSample, NodeCapacity, NodeError, NodeMetrics, SandboxMetrics, HISTORY_SAMPLES,
};
use tracing::debug;

use super::{runtime_err, NodeAgent};

/// Seconds between history samples.
pub(crate) const SAMPLE_INTERVAL_S: u32 = 5;

/// Limits at or above this are the kernel's "unlimited" (cgroup v1 writes `PAGE_COUNTER_MAX`
/// pages, about 2^63 bytes).
const UNLIMITED_FLOOR: u64 = 1 << 62;

/// Recent samples per sandbox, oldest first, at most [`HISTORY_SAMPLES`] each.
pub(crate) type History = HashMap<String, VecDeque<MetricsSample>>;

#[async_trait]
impl NodeMetrics for NodeAgent {
    async fn capacity(&self) -> Result<NodeCapacity, NodeError> {
        let meminfo = tokio::fs::read_to_string("/proc/meminfo")
            .await
            .map_err(|e| NodeError::Internal(format!("read /proc/meminfo: {e}")))?;
        let kib = |field: &str| {
            meminfo_kib(&meminfo, field)
                .unwrap_or(0)
                .saturating_mul(1024)
        };
        let sandboxes = self.guests.lock().len();
        Ok(NodeCapacity {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            memory_bytes: kib("MemTotal"),
            memory_available_bytes: kib("MemAvailable"),
            sandboxes: u32::try_from(sandboxes).unwrap_or(u32::MAX),
            disk_available_bytes: nix::sys::statvfs::statvfs(&self.cfg.data_dir)
                .ok()
                .map(|st| st.blocks_available().saturating_mul(st.fragment_size())),
        })
    }

    async fn sandbox_metrics(&self, id: &str) -> Result<SandboxMetrics, NodeError> {
        // Only sandboxes this node holds (running or paused) have cgroups to read.
        self.guest(id)?;
        let previous = self.last_sample(id);
        let current = self.read_sample(id, previous.as_ref()).await?;
        let history = self
            .history
            .lock()
            .get(id)
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default();
        Ok(SandboxMetrics {
            current,
            history,
            interval_s: SAMPLE_INTERVAL_S,
        })
    }
}

impl NodeAgent {
    /// Samples every sandbox the node holds every 5 s (`SAMPLE_INTERVAL_S`) into its
    /// history (at most [`HISTORY_SAMPLES`] each; sandboxes gone from the node are dropped)
    /// until `stop` completes. Spawn it once per node agent.
    pub async fn sample_metrics(self: Arc<Self>, stop: impl Future<Output = ()> + Send) {
        let mut tick = tokio::time::interval(Duration::from_secs(u64::from(SAMPLE_INTERVAL_S)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = tick.tick() => self.sample_all().await,
            }
        }
    }

    async fn sample_all(&self) {
        // Network counters are recorded on the same tick, for a restart to carry them on.
        self.save_network_counters();
        let ids: Vec<String> = self.guests.lock().keys().cloned().collect();
        self.history.lock().retain(|id, _| ids.contains(id));
        for id in ids {
            let previous = self.last_sample(&id);
            match self.read_sample(&id, previous.as_ref()).await {
                Ok(sample) => {
                    let mut history = self.history.lock();
                    let h = history.entry(id).or_default();
                    if h.len() == HISTORY_SAMPLES {
                        h.pop_front();
                    }
                    h.push_back(sample);
                }
                // A sandbox stopping between the listing and the read; the next round drops it.
                Err(e) => debug!(sandbox_id = %id, error = %e, "metrics sample skipped"),
            }
        }
    }

    fn last_sample(&self, id: &str) -> Option<MetricsSample> {
        self.history.lock().get(id).and_then(|h| h.back().copied())
    }

    /// Reads one sample of sandbox `id`; `previous` gives the CPU rate.
    async fn read_sample(
        &self,
        id: &str,
        previous: Option<&MetricsSample>,
    ) -> Result<MetricsSample, NodeError> {
        let cgroups = self.runtime.cgroup_paths(id).await.map_err(runtime_err)?;
        let disk = self
            .runtime
            .disk_usage(id, &self.sandbox_dir(id))
            .await
            .map_err(runtime_err)?;
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let usage = tokio::task::spawn_blocking(move || CgroupUsage::read(&cgroups))
            .await
            .map_err(|e| NodeError::Internal(format!("metrics task: {e}")))??;
        let cpu_rate = previous.and_then(|p| {
            let dt_us = at_ms.checked_sub(p.at_ms).filter(|d| *d > 0)? * 1000;
            Some(usage.cpu_usage_us.saturating_sub(p.cpu_usage_us) as f64 / dt_us as f64)
        });
        Ok(MetricsSample {
            at_ms,
            cpu_usage_us: usage.cpu_usage_us,
            cpu_rate,
            memory_bytes: usage.memory_bytes,
            memory_peak_bytes: usage.memory_peak_bytes,
            memory_limit_bytes: usage.memory_limit_bytes,
            disk_used_bytes: Some(disk.used_bytes),
            disk_limit_bytes: disk.limit_bytes,
        })
    }
}

/// What a sandbox's cgroups say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CgroupUsage {
    cpu_usage_us: u64,
    memory_bytes: u64,
    memory_peak_bytes: Option<u64>,
    memory_limit_bytes: Option<u64>,
}

impl CgroupUsage {
    /// Reads `(controller, dir)` pairs as the runtime reports them: v1 `cpuacct` and `memory`
    /// directories, or one v2 `unified` directory.
    fn read(cgroups: &[(String, PathBuf)]) -> Result<CgroupUsage, NodeError> {
        let dir_of = |name: &str| {
            cgroups
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, d)| d.as_path())
        };
        if let Some(dir) = dir_of("unified") {
            return Self::read_v2(dir);
        }
        let Some(mem) = dir_of("memory") else {
            return Err(NodeError::Runtime(
                "the sandbox has no memory cgroup to read".to_string(),
            ));
        };
        let cpu_usage_us = match dir_of("cpuacct") {
            Some(cpu) => read_u64(&cpu.join("cpuacct.usage"))? / 1000,
            // No cpuacct cgroup of its own (a VM's `cpu` cgroup): its processes' CPU times.
            None => procs_cpu_us(mem)?,
        };
        Ok(CgroupUsage {
            cpu_usage_us,
            memory_bytes: read_u64(&mem.join("memory.usage_in_bytes"))?,
            memory_peak_bytes: read_u64(&mem.join("memory.max_usage_in_bytes")).ok(),
            memory_limit_bytes: read_u64(&mem.join("memory.limit_in_bytes"))
                .ok()
                .filter(|l| *l < UNLIMITED_FLOOR),
        })
    }

    fn read_v2(dir: &Path) -> Result<CgroupUsage, NodeError> {
        let stat = read_text(&dir.join("cpu.stat"))?;
        let cpu_usage_us = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| NodeError::Runtime("cpu.stat has no usage_usec".to_string()))?;
        Ok(CgroupUsage {
            cpu_usage_us,
            memory_bytes: read_u64(&dir.join("memory.current"))?,
            // `memory.peak` exists from Linux 5.19 on.
            memory_peak_bytes: read_u64(&dir.join("memory.peak")).ok(),
            // `max` (unlimited) does not parse and is `None`.
            memory_limit_bytes: read_u64(&dir.join("memory.max")).ok(),
        })
    }
}

/// `/proc` reports process times in clock ticks of `USER_HZ`, which is 100 on Linux.
const USER_HZ: u64 = 100;

/// CPU time (user + system) of the processes in cgroup `dir`, microseconds.
fn procs_cpu_us(dir: &Path) -> Result<u64, NodeError> {
    let procs = read_text(&dir.join("cgroup.procs"))?;
    let mut ticks = 0u64;
    for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        // `pid (comm) state ...`: utime and stime are fields 14 and 15, i.e. the 12th and
        // 13th after the `)` that ends `comm` (which may itself hold spaces).
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // exited meanwhile
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace().skip(11);
        let utime: u64 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        ticks = ticks.saturating_add(utime).saturating_add(stime);
    }
    Ok(ticks.saturating_mul(1_000_000 / USER_HZ))
}

fn read_text(path: &Path) -> Result<String, NodeError> {
    std::fs::read_to_string(path)
        .map_err(|e| NodeError::Runtime(format!("read {}: {e}", path.display())))
}

fn read_u64(path: &Path) -> Result<u64, NodeError> {
    let text = read_text(path)?;
    text.trim()
        .parse()
        .map_err(|_| NodeError::Runtime(format!("{} is not a number", path.display())))
}

/// A `/proc/meminfo` field in KiB.
fn meminfo_kib(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_meminfo_fields() {
        let text = "MemTotal:       16384 kB\nMemFree:  1 kB\nMemAvailable:    8192 kB\n";
        assert_eq!(meminfo_kib(text, "MemTotal"), Some(16384));
        assert_eq!(meminfo_kib(text, "MemAvailable"), Some(8192));
        assert_eq!(meminfo_kib(text, "Mem"), None);
    }

    #[test]
    fn reads_v1_cgroups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cpu, mem) = (dir.path().join("cpu"), dir.path().join("mem"));
        std::fs::create_dir_all(&cpu).expect("mkdir");
        std::fs::create_dir_all(&mem).expect("mkdir");
        std::fs::write(cpu.join("cpuacct.usage"), "2500000\n").expect("write");
        std::fs::write(mem.join("memory.usage_in_bytes"), "1048576\n").expect("write");
        std::fs::write(mem.join("memory.max_usage_in_bytes"), "2097152\n").expect("write");
        std::fs::write(mem.join("memory.limit_in_bytes"), "9223372036854771712\n").expect("w");
        let got = CgroupUsage::read(&[
            ("cpuacct".to_string(), cpu),
            ("memory".to_string(), mem.clone()),
        ])
        .expect("read");
        assert_eq!(
            got,
            CgroupUsage {
                cpu_usage_us: 2500,
                memory_bytes: 1 << 20,
                memory_peak_bytes: Some(2 << 20),
                memory_limit_bytes: None,
            }
        );
        std::fs::write(mem.join("memory.limit_in_bytes"), "536870912\n").expect("write");
        let got = CgroupUsage::read(&[
            ("cpuacct".to_string(), dir.path().join("cpu")),
            ("memory".to_string(), mem),
        ])
        .expect("read");
        assert_eq!(got.memory_limit_bytes, Some(512 << 20));
    }

    #[test]
    fn reads_v2_cgroups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("cpu.stat"), "usage_usec 777\nuser_usec 700\n").expect("write");
        std::fs::write(d.join("memory.current"), "4096\n").expect("write");
        std::fs::write(d.join("memory.max"), "max\n").expect("write");
        let got = CgroupUsage::read(&[("unified".to_string(), d.to_path_buf())]).expect("read");
        assert_eq!(
            got,
            CgroupUsage {
                cpu_usage_us: 777,
                memory_bytes: 4096,
                memory_peak_bytes: None,
                memory_limit_bytes: None,
            }
        );
    }

    #[test]
    fn without_cpuacct_cpu_comes_from_the_processes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mem = dir.path().to_path_buf();
        std::fs::write(mem.join("memory.usage_in_bytes"), "1\n").expect("write");
        std::fs::write(
            mem.join("cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .expect("write");
        // Burn a little CPU so this process has some.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let got = CgroupUsage::read(&[("memory".to_string(), mem)]).expect("read");
        assert!(got.cpu_usage_us > 0, "{got:?}");
    }

    #[test]
    fn missing_controllers_are_a_runtime_error() {
        let err = CgroupUsage::read(&[("pids".to_string(), PathBuf::from("/nonexistent"))])
            .expect_err("no cpu or memory");
        assert!(matches!(err, NodeError::Runtime(_)), "{err:?}");
    }
}
