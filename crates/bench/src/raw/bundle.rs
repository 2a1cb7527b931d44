//! An OCI bundle for a raw baseline container: an overlay of the `tiny` rootfs (lower) and the
//! bundle's own `upper/` mounted on `rootfs/`, as Cove does for a sandbox, and a minimal
//! `config.json` with the same namespaces, cgroup limits (Cove's defaults: 1 vCPU, 512 MiB,
//! 1024 pids) and capabilities as a sandbox, but no seccomp filter, no guest agent and no extra
//! mounts.
//!
//! Layout: `<dir>/{upper,work,rootfs,config.json,runc.stderr}`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use serde_json::json;

/// Parent of every baseline container's cgroup (`cove-bench/<name>`, relative to the bench's
/// own cgroup).
pub const CGROUP_PARENT: &str = "cove-bench";

/// Memory limit of a baseline container, bytes (Cove's default sandbox size).
const MEMORY_BYTES: u64 = 512 * 1024 * 1024;
/// Process limit of a baseline container (Cove's default).
const PIDS_MAX: u64 = 1024;
/// CFS period and quota for one vCPU, microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// Docker's default capabilities, as a Cove sandbox has them.
const CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// A bundle directory with its overlay.
#[derive(Debug)]
pub struct Bundle {
    /// The bundle directory (`runc run --bundle`).
    pub dir: PathBuf,
    lower: PathBuf,
}

impl Bundle {
    /// Creates `dir` with a config running `args`, and mounts the overlay. `name` is also the
    /// cgroup (`cove-bench/<name>`), so two bundles never share one.
    pub fn create(dir: PathBuf, lower: &Path, name: &str, args: &[&str]) -> anyhow::Result<Bundle> {
        let bundle = Bundle {
            dir,
            lower: lower.to_path_buf(),
        };
        for d in [bundle.upper(), bundle.rootfs()] {
            std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
        }
        let config = config(&bundle.rootfs(), name, args);
        let path = bundle.dir.join("config.json");
        let text = serde_json::to_vec_pretty(&config).context("serialise config.json")?;
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        bundle.mount()?;
        Ok(bundle)
    }

    fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// The overlay mount point, the container's root.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// Where detached runs send runc's (and the container's) stderr.
    pub fn stderr_path(&self) -> PathBuf {
        self.dir.join("runc.stderr")
    }

    /// Mounts the overlay (with a fresh `work/`; `upper/` is kept).
    pub fn mount(&self) -> anyhow::Result<()> {
        let work = self.work();
        std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            self.lower.display(),
            self.upper().display(),
            work.display()
        );
        mount(
            Some("overlay"),
            &self.rootfs(),
            Some("overlay"),
            MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .with_context(|| format!("mount an overlay on {}", self.rootfs().display()))
    }

    /// Unmounts the overlay and removes `work/` (what Cove's stop does; `upper/` is kept).
    pub fn unmount(&self) -> anyhow::Result<()> {
        umount2(&self.rootfs(), MntFlags::empty())
            .with_context(|| format!("unmount {}", self.rootfs().display()))?;
        std::fs::remove_dir_all(self.work())
            .with_context(|| format!("remove {}", self.work().display()))
    }

    /// Unmounts and removes the whole bundle.
    pub fn remove(self) -> anyhow::Result<()> {
        self.unmount()?;
        std::fs::remove_dir_all(&self.dir).with_context(|| format!("remove {}", self.dir.display()))
    }
}

/// The minimal OCI config of a baseline container.
fn config(rootfs: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let m = |dest: &str, typ: &str, source: &str, options: &[&str]| json!({"destination": dest, "type": typ, "source": source, "options": options});
    let bytes = MEMORY_BYTES;
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {
                "bounding": CAPABILITIES,
                "effective": CAPABILITIES,
                "permitted": CAPABILITIES,
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": false,
        },
        "root": {"path": rootfs, "readonly": false},
        "hostname": "bench",
        "mounts": [
            m("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
            m("/dev", "tmpfs", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"]),
            m("/dev/pts", "devpts", "devpts",
              &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]),
            m("/dev/shm", "tmpfs", "shm", &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]),
            m("/dev/mqueue", "mqueue", "mqueue", &["nosuid", "noexec", "nodev"]),
            m("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", "ro"]),
            m("/sys/fs/cgroup", "cgroup", "cgroup", &["nosuid", "noexec", "nodev", "relatime", "ro"]),
        ],
        "linux": {
            "cgroupsPath": format!("{CGROUP_PARENT}/{name}"),
            "resources": {
                "devices": [{"allow": false, "access": "rwm"}],
                "memory": {"limit": bytes, "swap": bytes},
                "pids": {"limit": PIDS_MAX},
                "cpu": {"period": CPU_PERIOD_US, "quota": CPU_PERIOD_US},
            },
            "namespaces": [
                {"type": "pid"}, {"type": "mount"}, {"type": "uts"},
                {"type": "ipc"}, {"type": "network"}, {"type": "cgroup"},
            ],
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                "/proc/scsi",
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_runs_the_args_in_its_own_cgroup() {
        let c = config(Path::new("/b/rootfs"), "raw-7", &["sleep", "1d"]);
        assert_eq!(c["process"]["args"], json!(["sleep", "1d"]));
        assert_eq!(c["root"]["path"], "/b/rootfs");
        assert_eq!(c["linux"]["cgroupsPath"], "cove-bench/raw-7");
        assert_eq!(
            c["linux"]["resources"]["memory"]["limit"],
            512 * 1024 * 1024
        );
        assert_eq!(c["linux"]["namespaces"].as_array().map(Vec::len), Some(6));
    }
}
