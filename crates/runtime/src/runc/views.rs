//! Honest limits: what a sandbox sees of the machine matches what it was given.
//!
//! - **lxcfs** (Debian's `lxcfs`, a FUSE filesystem) serves `/proc/{cpuinfo,meminfo,stat,
//!   uptime,diskstats,swaps,loadavg}` and `/sys/devices/system/cpu/online` computed from the
//!   reading process's cgroups; each sandbox gets those files bind-mounted over its own, so
//!   `free`, `top` and `/proc/cpuinfo` show the sandbox's memory and CPUs, not the node's. One
//!   lxcfs serves every sandbox of the machine (like the system service it usually is): the
//!   driver starts it at the configured directory when nothing serves there, and checks before
//!   every start, restarting it when it died (sandboxes started while it was dead keep stale
//!   files until they restart; lxcfs cannot re-serve existing mounts).
//! - **cpuset**: `nproc` and `sched_getaffinity` count the CPUs a process may run on, which a
//!   CFS quota does not change, so a sandbox with `vcpus` < the node's CPUs is also pinned to
//!   `vcpus` of them (chosen from a hash of its id, so sandboxes spread over the node).
//!
//! Without lxcfs (not installed, or `--lxcfs off`) sandboxes see the node's figures, and the
//! node logs a warning at start.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tracing::{info, warn};

/// Files lxcfs virtualises, relative to its mount point and, with a leading `/`, inside the
/// sandbox (runc allows exactly these over `/proc`).
const LXCFS_FILES: &[&str] = &[
    "proc/cpuinfo",
    "proc/diskstats",
    "proc/meminfo",
    "proc/stat",
    "proc/swaps",
    "proc/uptime",
    "proc/loadavg",
    "sys/devices/system/cpu/online",
];
/// How long a freshly started lxcfs has to serve.
const LXCFS_START_TIMEOUT: Duration = Duration::from_secs(5);

/// What the host offers sandboxes beyond privileges: lxcfs views and its online CPUs.
#[derive(Debug, Clone)]
pub(crate) struct HostViews {
    /// lxcfs mount point (`None`: no lxcfs).
    lxcfs: Option<PathBuf>,
    /// The node's online CPUs, for cpusets.
    cpus: Vec<u32>,
}

impl HostViews {
    /// Probes the online CPUs and, with `lxcfs_dir`, makes sure lxcfs serves there.
    pub(crate) fn probe(lxcfs_dir: Option<&Path>) -> Self {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
        let mut cpus = parse_cpu_list(online.trim());
        if cpus.is_empty() {
            cpus =
                (0..std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).collect();
        }
        let views = HostViews {
            lxcfs: lxcfs_dir.map(Path::to_path_buf),
            cpus,
        };
        if let Some(dir) = &views.lxcfs {
            if let Err(e) = ensure_lxcfs(dir) {
                warn!(dir = %dir.display(), error = %e,
                    "lxcfs unavailable: sandboxes see the node's memory and CPUs");
            }
        }
        views
    }

    /// No lxcfs, and the given CPUs (for tests of configs).
    #[cfg(test)]
    pub(crate) fn without_lxcfs(cpus: Vec<u32>) -> Self {
        HostViews { lxcfs: None, cpus }
    }

    /// The lxcfs files to bind into a sandbox now, as `(host source, sandbox destination)`;
    /// restarts lxcfs first when it stopped serving. Empty without lxcfs.
    pub(crate) fn lxcfs_mounts(&self) -> Vec<(PathBuf, String)> {
        let Some(dir) = &self.lxcfs else {
            return Vec::new();
        };
        if !serving(dir) {
            if let Err(e) = ensure_lxcfs(dir) {
                warn!(dir = %dir.display(), error = %e, "lxcfs is not serving");
                return Vec::new();
            }
        }
        LXCFS_FILES
            .iter()
            .map(|f| (dir.join(f), format!("/{f}")))
            .filter(|(src, _)| src.exists())
            .collect()
    }

    /// The cpuset (`"0-1"`, `"3"`) for a sandbox with `vcpus`, or `None` when it may use every
    /// CPU of the node.
    pub(crate) fn cpuset(&self, id: &str, vcpus: u32) -> Option<String> {
        let n = self.cpus.len();
        let want = vcpus.max(1) as usize;
        if want >= n {
            return None;
        }
        let mut h = DefaultHasher::new();
        id.hash(&mut h);
        let start = (h.finish() % n as u64) as usize;
        let mut chosen: Vec<u32> = (0..want).map(|i| self.cpus[(start + i) % n]).collect();
        chosen.sort_unstable();
        Some(
            chosen
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        )
    }
}

/// Whether lxcfs serves at `dir`.
fn serving(dir: &Path) -> bool {
    std::fs::metadata(dir.join("proc/meminfo")).is_ok()
}

/// Starts lxcfs at `dir` unless it already serves there (a stale mount is lazily unmounted
/// first); waits until it serves.
fn ensure_lxcfs(dir: &Path) -> std::io::Result<()> {
    if serving(dir) {
        return Ok(());
    }
    // A dead lxcfs leaves a mount that answers ENOTCONN (even to `mkdir`): lazily unmount it
    // first (not mounted: no-op), then make sure the directory exists.
    let _ = Command::new("umount")
        .arg("-l")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    std::fs::create_dir_all(dir)?;
    let pidfile = dir.with_extension("pid");
    // lxcfs 5 stays in the foreground: it runs in a process group of its own and outlives this
    // process, so sandboxes keep their views across a node-agent restart. Its exit is noticed
    // by the next `serving` check; a thread only reaps it.
    let child = Command::new("lxcfs")
        .arg("--enable-cfs")
        .arg("-p")
        .arg(&pidfile)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    let began = Instant::now();
    while !serving(dir) {
        if began.elapsed() > LXCFS_START_TIMEOUT {
            return Err(std::io::Error::other(format!(
                "lxcfs (pid {pid}) did not serve within {LXCFS_START_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    info!(dir = %dir.display(), "lxcfs serving");
    Ok(())
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    cpus.extend(a..=b.min(a.saturating_add(4096)));
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert!(parse_cpu_list("").is_empty());
    }

    #[test]
    fn cpusets_take_vcpus_of_the_node_and_none_when_all() {
        let v = HostViews {
            lxcfs: None,
            cpus: vec![0, 1, 2, 3],
        };
        let one = v.cpuset("sb-a", 1).expect("pinned");
        assert_eq!(one.split(',').count(), 1);
        let two = v.cpuset("sb-a", 2).expect("pinned");
        assert_eq!(two.split(',').count(), 2);
        assert_eq!(v.cpuset("sb-a", 4), None);
        assert_eq!(v.cpuset("sb-a", 16), None);
        assert_eq!(v.cpuset("sb-a", 1), Some(one), "stable per id");
        assert!(v.lxcfs_mounts().is_empty());
    }

    /// A killed lxcfs leaves a mount answering ENOTCONN; the next check must replace it (CI
    /// once started every sandbox without views because `mkdir` on that mount failed first).
    #[test]
    fn a_dead_lxcfs_mount_is_replaced() {
        let lxcfs_here = Command::new("sh")
            .args(["-c", "command -v lxcfs"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !lxcfs_here || !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root and lxcfs (scripts/install-deps.sh)");
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("lxcfs");
        ensure_lxcfs(&dir).expect("first start");
        let pid: i32 = std::fs::read_to_string(dir.with_extension("pid"))
            .expect("pidfile")
            .trim()
            .parse()
            .expect("pid");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL)
            .expect("kill lxcfs");
        let began = Instant::now();
        while serving(&dir) && began.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!serving(&dir), "a killed lxcfs stops serving");
        let views = HostViews {
            lxcfs: Some(dir.clone()),
            cpus: vec![0],
        };
        let mounts = views.lxcfs_mounts();
        assert!(
            mounts
                .iter()
                .any(|(_, dst)| dst == "/sys/devices/system/cpu/online"),
            "views are served again: {mounts:?}"
        );
        let pid: i32 = std::fs::read_to_string(dir.with_extension("pid"))
            .expect("pidfile")
            .trim()
            .parse()
            .expect("pid");
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM);
        let began = Instant::now();
        while serving(&dir) && began.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&dir)
            .stderr(Stdio::null())
            .status();
    }
}
