//! One QEMU process: its command line, its cgroup, spawning, finding and killing it.
//!
//! The VM's state directory (`<state-root>/<id>/`, see [`VmPaths`]) holds its sockets, pid and
//! logs. QEMU is started through `/bin/sh`, which first moves itself into the VM's cgroups and
//! then `exec`s QEMU, so QEMU never runs outside its limits. QEMU runs in a process group of
//! its own and outlives the node agent (a restarted node adopts it by its pid file, checked
//! against `/proc/<pid>/cmdline`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{RuntimeError, SandboxSpec};

/// Memory a VM's cgroup allows beyond the guest's RAM, in MiB: QEMU itself, the TCG translation
/// cache (`tb-size=64`) and the kernel image mapping (about 130 MiB measured under TCG; less
/// under KVM, which needs no translation cache).
pub const MEMORY_OVERHEAD_MIB: u64 = 256;
/// CPU quota beyond the vCPUs, in percent of one core (QEMU's I/O and main-loop threads).
pub const CPU_OVERHEAD_PERCENT: u64 = 50;
/// Tasks (threads) QEMU may have.
pub const PIDS_MAX: u64 = 512;

/// Paths of one VM's state directory.
#[derive(Debug, Clone)]
pub struct VmPaths {
    /// The directory.
    pub dir: PathBuf,
}

impl VmPaths {
    /// The paths of sandbox `id` under `root`.
    pub fn new(root: &Path, id: &str) -> Self {
        VmPaths { dir: root.join(id) }
    }
    /// QMP socket.
    pub fn qmp(&self) -> PathBuf {
        self.dir.join("qmp.sock")
    }
    /// virtio-serial chardev socket (the mux channel).
    pub fn agent(&self) -> PathBuf {
        self.dir.join("agent.sock")
    }
    /// QEMU's pid.
    pub fn pid(&self) -> PathBuf {
        self.dir.join("qemu.pid")
    }
    /// The guest's serial console.
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    /// QEMU's own stdout/stderr.
    pub fn log(&self) -> PathBuf {
        self.dir.join("qemu.log")
    }
}

/// Which accelerator QEMU uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// Software emulation (slow: guest code runs 4–15× slower).
    Tcg,
}

/// Everything the command line needs besides the spec.
pub struct Launch<'a> {
    /// QEMU binary.
    pub qemu: &'a Path,
    /// Accelerator.
    pub accel: Accel,
    /// Kernel and initramfs.
    pub kernel: &'a Path,
    /// Initramfs.
    pub initramfs: &'a Path,
    /// The sandbox's overlay disk.
    pub disk: &'a Path,
    /// The agent disk.
    pub agent_disk: &'a Path,
    /// A saved memory state to restore from (`-incoming`).
    pub incoming: Option<&'a Path>,
}

/// The MAC address of every VM's NIC (each is alone on its namespace's bridge).
pub const GUEST_MAC: &str = "52:54:00:c0:0e:01";

/// The `-name` of a sandbox's QEMU, by which its process is recognised.
pub fn vm_name(id: &str) -> String {
    format!("cove-{id}")
}

/// The host TSC frequency in kHz, for `tsc_early_khz` (TCG boots hang ~6 % of the time without).
pub fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()?;
    Some((mhz * 1000.0) as u64)
}

/// Shell-quotes a path for QEMU's `exec:` migration URIs.
pub fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// QEMU's arguments for `spec`.
pub fn args(spec: &SandboxSpec, l: &Launch<'_>, paths: &VmPaths) -> Vec<String> {
    let mut cmdline = vec![
        "console=ttyS0",
        "reboot=t",
        "panic=-1",
        "quiet",
        "cryptomgr.notests",
        "8250.nr_uarts=1",
        "i8042.noaux",
        "i8042.nokbd",
        "i8042.nopnp",
        "no_timer_check",
        "random.trust_cpu=on",
    ]
    .into_iter()
    .map(str::to_string)
    .collect::<Vec<_>>();
    if l.accel == Accel::Tcg {
        cmdline.push("mitigations=off".into());
        if let Some(khz) = host_tsc_khz() {
            cmdline.push(format!("tsc_early_khz={khz}"));
        }
    }
    cmdline.push(format!("cove.hostname={}", spec.hostname));
    for a in &spec.guest_agent_args {
        cmdline.push(format!("cove.arg={a}"));
    }
    let accel = match l.accel {
        Accel::Kvm => "kvm".to_string(),
        Accel::Tcg => "tcg,thread=multi,tb-size=64".to_string(),
    };
    let p = |p: PathBuf| p.display().to_string();
    let mut a: Vec<String> = vec![
        "-name".into(),
        vm_name(&spec.id),
        "-M".into(),
        "microvm".into(),
        "-accel".into(),
        accel,
        "-smp".into(),
        spec.resources.vcpus.max(1).to_string(),
        "-m".into(),
        spec.resources.memory_mib.max(64).to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-chardev".into(),
        format!("file,id=console,path={},append=on", p(paths.console())),
        "-serial".into(),
        "chardev:console".into(),
        "-kernel".into(),
        l.kernel.display().to_string(),
        "-initrd".into(),
        l.initramfs.display().to_string(),
        "-append".into(),
        cmdline.join(" "),
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", p(paths.qmp())),
        "-device".into(),
        "virtio-serial-device".into(),
        "-chardev".into(),
        format!(
            "socket,id=agent,path={},server=on,wait=off",
            p(paths.agent())
        ),
        "-device".into(),
        "virtserialport,chardev=agent,name=cove-agent".into(),
        "-drive".into(),
        format!(
            "id=root,file={},format=qcow2,if=none,discard=unmap",
            l.disk.display()
        ),
        "-device".into(),
        "virtio-blk-device,drive=root,serial=cove-root".into(),
        "-drive".into(),
        format!(
            "id=agent,file={},format=raw,if=none,readonly=on",
            l.agent_disk.display()
        ),
        "-device".into(),
        "virtio-blk-device,drive=agent,serial=cove-agent".into(),
    ];
    // Every VM has the same NIC, so a base snapshot (booted without a network) restores into
    // a sandbox with one. Its peer is the tap in the sandbox's namespace, without the virtio
    // header offloads (`vnet_hdr=off`): the device state then matches a NIC without a peer.
    match spec.network.as_ref().and_then(|n| n.tap.as_deref()) {
        Some(tap) => a.extend([
            "-netdev".into(),
            format!("tap,id=net0,ifname={tap},script=no,downscript=no,vnet_hdr=off"),
            "-device".into(),
            format!("virtio-net-device,netdev=net0,mac={GUEST_MAC}"),
        ]),
        None => a.extend([
            "-device".into(),
            format!("virtio-net-device,mac={GUEST_MAC}"),
        ]),
    }
    if l.accel == Accel::Kvm {
        a.extend(["-cpu".into(), "host".into()]);
    }
    if let Some(state) = l.incoming {
        a.extend(["-incoming".into(), format!("exec:cat {}", sh_quote(state))]);
    }
    a
}

/// The VM's cgroup directories (cgroup v1: memory, cpu, pids), made under this process's own.
#[derive(Debug, Clone, Default)]
pub struct Cgroups {
    /// The directories made.
    pub dirs: Vec<(String, PathBuf)>,
}

/// This process's cgroup v1 path of `controller`, from `/proc/self/cgroup`.
fn own_cgroup(controller: &str) -> Option<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrls
            .split(',')
            .any(|c| c == controller)
            .then(|| (ctrls.to_string(), path.to_string()))
    })
}

impl Cgroups {
    /// Makes the VM's cgroups with the sandbox's limits plus the overhead. On a host without
    /// cgroup v1 controllers it makes none (logged): the VM still runs, without host limits.
    pub fn create(spec: &SandboxSpec) -> Result<Cgroups, RuntimeError> {
        let name = vm_name(&spec.id);
        let mut cg = Cgroups::default();
        let limits: [(&str, Vec<(&str, String)>); 3] = [
            (
                "memory",
                vec![(
                    "memory.limit_in_bytes",
                    ((spec.resources.memory_mib + MEMORY_OVERHEAD_MIB) << 20).to_string(),
                )],
            ),
            (
                "cpu",
                vec![
                    ("cpu.cfs_period_us", "100000".to_string()),
                    (
                        "cpu.cfs_quota_us",
                        (u64::from(spec.resources.vcpus.max(1)) * 100_000
                            + CPU_OVERHEAD_PERCENT * 1000)
                            .to_string(),
                    ),
                ],
            ),
            ("pids", vec![("pids.max", PIDS_MAX.to_string())]),
        ];
        for (controller, files) in limits {
            let Some((mount, own)) = own_cgroup(controller) else {
                tracing::warn!(
                    controller,
                    "no cgroup v1 controller; the VM runs without this limit"
                );
                continue;
            };
            let base = Path::new("/sys/fs/cgroup").join(&mount);
            let dir = base.join(own.trim_start_matches('/')).join(&name);
            if let Err(source) = std::fs::create_dir_all(&dir) {
                cg.remove();
                return Err(RuntimeError::Io {
                    context: format!("create cgroup {}", dir.display()),
                    source,
                });
            }
            cg.dirs.push((controller.to_string(), dir.clone()));
            for (file, value) in files {
                if let Err(source) = std::fs::write(dir.join(file), &value) {
                    cg.remove();
                    return Err(RuntimeError::Io {
                        context: format!("set {file} of {}", dir.display()),
                        source,
                    });
                }
            }
        }
        Ok(cg)
    }

    /// The VM's cgroups as found on disk (after a restart), by the same rule as `create`.
    pub fn find(id: &str) -> Cgroups {
        let name = vm_name(id);
        let dirs = ["memory", "cpu", "pids"]
            .into_iter()
            .filter_map(|c| {
                let (mount, own) = own_cgroup(c)?;
                let dir = Path::new("/sys/fs/cgroup")
                    .join(mount)
                    .join(own.trim_start_matches('/'))
                    .join(&name);
                dir.exists().then(|| (c.to_string(), dir))
            })
            .collect();
        Cgroups { dirs }
    }

    /// The `cgroup.procs` files a starting process writes itself into.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(_, d)| d.join("cgroup.procs"))
            .collect()
    }

    /// Removes the directories (they must be empty of processes).
    pub fn remove(&self) {
        for (_, d) in &self.dirs {
            for _ in 0..50 {
                match std::fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

/// Spawns QEMU with `args` inside `cgroups`; returns the child (its pid is QEMU's).
pub fn spawn(
    qemu: &Path,
    args: &[String],
    cgroups: &Cgroups,
    paths: &VmPaths,
    netns: Option<&Path>,
) -> Result<tokio::process::Child, RuntimeError> {
    let log = std::fs::File::create(paths.log()).map_err(|source| RuntimeError::Io {
        context: format!("create {}", paths.log().display()),
        source,
    })?;
    let log2 = log.try_clone().map_err(|source| RuntimeError::Io {
        context: "dup the QEMU log".into(),
        source,
    })?;
    let procs: Vec<String> = cgroups
        .procs_files()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(r#"for f in $COVE_CGROUP_PROCS; do echo $$ > "$f" || exit 97; done; unset COVE_CGROUP_PROCS; exec "$@""#)
        .arg("cove-qemu");
    // In the sandbox's network namespace (where its tap is), through util-linux's `nsenter`,
    // which execs QEMU in place (the pid stays QEMU's).
    if let Some(ns) = netns {
        cmd.arg("nsenter").arg(format!("--net={}", ns.display()));
    }
    cmd.arg(qemu)
        .args(args)
        .env("COVE_CGROUP_PROCS", procs.join(" "))
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .kill_on_drop(false);
    cmd.spawn()
        .map_err(|e| RuntimeError::Unavailable(format!("cannot run {}: {e}", qemu.display())))
}

/// Whether `pid` is the live QEMU of sandbox `id`.
pub fn is_vm_process(pid: u32, id: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let name = vm_name(id);
    cmdline.split(|b| *b == 0).any(|arg| arg == name.as_bytes())
}

/// The pid of sandbox `id`'s live QEMU, from its pid file.
pub fn live_pid(paths: &VmPaths, id: &str) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(paths.pid())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    is_vm_process(pid, id).then_some(pid)
}

/// SIGKILLs sandbox `id`'s QEMU and waits (at most 10 s) until it is gone.
pub fn kill(paths: &VmPaths, id: &str) -> Result<(), RuntimeError> {
    let Some(pid) = live_pid(paths, id) else {
        return Ok(());
    };
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_vm_process(pid, id) {
        if Instant::now() > deadline {
            return Err(RuntimeError::Command {
                op: "stop",
                id: id.to_string(),
                detail: format!("QEMU (pid {pid}) did not die"),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The last `n` bytes of a file as text (for errors and failure reasons).
pub fn tail(path: &Path, n: usize) -> String {
    let data = std::fs::read(path).unwrap_or_default();
    let start = data.len().saturating_sub(n);
    String::from_utf8_lossy(&data[start..]).trim().to_string()
}

/// Why a VM that is gone stopped, from its console (a kernel panic line) and QEMU's log. The
/// console is written by the guest, so the reason is cut to 200 printable characters.
pub fn failure_reason(paths: &VmPaths) -> String {
    let reason = raw_failure_reason(paths);
    reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect()
}

/// How [`failure_reason`] begins when the console shows a kernel panic.
pub const KERNEL_PANIC: &str = "guest kernel panic";

fn raw_failure_reason(paths: &VmPaths) -> String {
    let console = tail(&paths.console(), 64 * 1024);
    if let Some(line) = console.lines().find(|l| l.contains("Kernel panic")) {
        let line = line.split("] ").last().unwrap_or(line).trim();
        return format!("{KERNEL_PANIC}: {line}");
    }
    if let Some(line) = console.lines().rev().find(|l| l.contains("cove-init:")) {
        return format!("guest boot failed: {}", line.trim());
    }
    let log = tail(&paths.log(), 2048);
    if log.is_empty() {
        "the VM stopped".to_string()
    } else {
        format!("QEMU exited: {}", log.lines().last().unwrap_or(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SandboxSpec {
        SandboxSpec {
            id: "sb-1".into(),
            rootfs: "/r/rootfs".into(),
            dir: "/d/sb-1".into(),
            guest_agent: "/a".into(),
            guest_agent_args: vec!["--output-cap-bytes=100".into()],
            hostname: "sb-1".into(),
            resources: cove_domain::Resources {
                vcpus: 2,
                memory_mib: 512,
                pids_max: 64,
                disk_mib: Some(2048),
            },
            network: None,
            volumes: Vec::new(),
        }
    }

    #[test]
    fn command_line_maps_resources_and_restores() {
        let paths = VmPaths::new(Path::new("/s"), "sb-1");
        let state = PathBuf::from("/d/it's/vm-memory.bin");
        let l = Launch {
            qemu: Path::new("qemu-system-x86_64"),
            accel: Accel::Tcg,
            kernel: Path::new("/k/vmlinux"),
            initramfs: Path::new("/k/initramfs.cpio"),
            disk: Path::new("/d/sb-1/upper/disk.qcow2"),
            agent_disk: Path::new("/c/agent.ext4"),
            incoming: Some(&state),
        };
        let a = args(&spec(), &l, &paths);
        let after = |flag: &str| {
            a.iter()
                .position(|x| x == flag)
                .and_then(|i| a.get(i + 1))
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(after("-name"), "cove-sb-1");
        assert_eq!(after("-smp"), "2");
        assert_eq!(after("-m"), "512");
        assert!(after("-accel").starts_with("tcg"));
        let cmdline = after("-append");
        assert!(cmdline.contains("panic=-1"), "{cmdline}");
        assert!(cmdline.contains("cove.hostname=sb-1"), "{cmdline}");
        assert!(
            cmdline.contains("cove.arg=--output-cap-bytes=100"),
            "{cmdline}"
        );
        assert_eq!(after("-incoming"), r"exec:cat '/d/it'\''s/vm-memory.bin'");
        assert!(a.iter().any(|x| x.contains("serial=cove-root")));
        assert!(a.iter().any(|x| x.contains("readonly=on")));
        let l = Launch {
            incoming: None,
            accel: Accel::Kvm,
            ..l
        };
        let a = args(&spec(), &l, &paths);
        assert!(!a.iter().any(|x| x == "-incoming"));
        assert!(a.iter().any(|x| x == "host"), "KVM uses -cpu host");
    }
}
