//! What the host tells about memory and processes: `/proc/meminfo`, `/proc/<pid>/status`,
//! `smaps_rollup`, and the cgroup a process is in.

use std::path::PathBuf;

use anyhow::{bail, Context};

/// A `kB` field of a `/proc` file such as `MemAvailable:   123 kB`, in bytes.
fn kb_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

fn meminfo(field: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("read /proc/meminfo")?;
    match kb_field(&text, field) {
        Some(v) => Ok(v),
        None => bail!("/proc/meminfo has no {field}"),
    }
}

/// `MemAvailable`, bytes.
pub fn mem_available() -> anyhow::Result<u64> {
    meminfo("MemAvailable")
}

/// `MemTotal`, bytes.
pub fn mem_total() -> anyhow::Result<u64> {
    meminfo("MemTotal")
}

/// Resident memory of one process, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// `VmRSS`: every resident page it maps, shared ones included.
    pub rss: u64,
    /// `Pss`: resident pages with each shared page divided among its sharers (0 when the
    /// kernel has no `smaps_rollup`).
    pub pss: u64,
}

impl std::ops::AddAssign for ProcessMemory {
    fn add_assign(&mut self, other: ProcessMemory) {
        self.rss += other.rss;
        self.pss += other.pss;
    }
}

/// Memory of process `pid`; `None` when it is gone (or a zombie without memory).
pub fn process_memory(pid: u32) -> Option<ProcessMemory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = kb_field(&status, "VmRSS")?;
    let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| kb_field(&s, "Pss"))
        .unwrap_or(0);
    Some(ProcessMemory { rss, pss })
}

/// `VmRSS` of this process, bytes (the in-process server included).
pub fn self_rss() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    kb_field(&status, "VmRSS").context("/proc/self/status has no VmRSS")
}

/// Every process in the memory cgroup of `pid` (cgroup v1 `memory` controller, or the v2
/// unified hierarchy); just `pid` when the cgroup cannot be read.
pub fn cgroup_pids(pid: u32) -> Vec<u32> {
    let procs = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|text| memory_cgroup_dir(&text))
        .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok());
    match procs {
        Some(list) => {
            let pids: Vec<u32> = list.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.is_empty() {
                vec![pid]
            } else {
                pids
            }
        }
        None => vec![pid],
    }
}

/// The host directory of the memory cgroup named in a `/proc/<pid>/cgroup` text.
fn memory_cgroup_dir(text: &str) -> Option<PathBuf> {
    let v1 = text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
    });
    if v1.is_some() {
        return v1;
    }
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/')))
}

/// Kernel release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// CPUs this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// First line of `<binary> --version` (empty when it prints nothing).
pub fn version_line(binary: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let out = std::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("run {binary} --version"))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kb_fields_are_bytes() {
        let text = "MemTotal:       24576000 kB\nMemAvailable:    1000 kB\n";
        assert_eq!(kb_field(text, "MemAvailable"), Some(1_024_000));
        assert_eq!(kb_field(text, "MemTotal"), Some(24_576_000 * 1024));
        assert_eq!(kb_field(text, "Mem"), None);
    }

    #[test]
    fn memory_cgroup_of_v1_and_v2() {
        let v1 = "9:name=systemd:/\n4:memory:/process_api/abc/cove/sb1\n0::/\n";
        assert_eq!(
            memory_cgroup_dir(v1),
            Some(PathBuf::from(
                "/sys/fs/cgroup/memory/process_api/abc/cove/sb1"
            ))
        );
        let v2 = "0::/cove/sb1\n";
        assert_eq!(
            memory_cgroup_dir(v2),
            Some(PathBuf::from("/sys/fs/cgroup/cove/sb1"))
        );
    }

    #[test]
    fn this_process_is_in_its_own_cgroup_list() {
        let me = std::process::id();
        assert!(cgroup_pids(me).contains(&me));
        let mem = process_memory(me).expect("own memory");
        assert!(mem.rss > 0);
        assert!(mem_available().expect("meminfo") > 0);
    }
}
