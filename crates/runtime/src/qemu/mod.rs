//! QEMU microvm driver: a sandbox is a VM with its own kernel.
//!
//! - Boot: Debian's cloud kernel as a PVH ELF and a busybox initramfs ([`image`]) that mounts
//!   the sandbox's disk and `switch_root`s to the guest agent as PID 1. The agent binary comes
//!   on a small read-only disk of its own; the release's root filesystem is an ext4 image and each
//!   sandbox has a qcow2 overlay on it in `upper/disk.qcow2` ([`disk`]).
//! - Channel: one virtio-serial port; the host side is a unix socket carrying a
//!   [`cove_guest_protocol::mux`] session, so every guest-protocol connection is one mux stream
//!   ([`connector::MuxConnector`]).
//! - Network: every VM has a virtio-net NIC; with a sandbox network its peer is the tap the node
//!   made in the sandbox's namespace (QEMU runs in that namespace through `nsenter`), and after
//!   every boot, clone or wake the agent is told the address, gateway, resolver and CA
//!   (`Control::SetNetwork`).
//! - Limits: vCPUs → `-smp`, memory → `-m`, disk → the overlay's virtual size; the QEMU process
//!   runs in cgroups of its own with the sandbox's memory plus [`vm::MEMORY_OVERHEAD_MIB`], its
//!   vCPUs plus [`vm::CPU_OVERHEAD_PERCENT`] % of a core, and [`vm::PIDS_MAX`] tasks
//!   (`pids_max` applies to processes inside the guest only through the guest's own kernel, which
//!   this driver does not limit).
//! - Pause/resume: QMP `stop`/`cont`. Checkpoint (suspend): QMP `stop` + `migrate` to
//!   `upper/vm-memory.bin` with the bandwidth cap raised; the next start of a sandbox whose
//!   `upper/` holds that file restores it with `-incoming`, sets the guest clock from the host,
//!   adds fresh entropy, and deletes the file. A restore that fails falls back to a cold boot on
//!   the same disk (like a power cut: ext4 replays its journal) and says `memory_restored: false`.
//! - Base snapshots ([`base`]): a fresh sandbox restores its release's booted, idle snapshot
//!   instead of booting (falling back to a boot when that fails), then gets its own hostname,
//!   clock and entropy.
//! - Failure: a guest kernel panic reboots (`panic=-1`), and `-no-reboot` ends QEMU; the state
//!   becomes `Stopped` and [`Runtime::failure`] reads the panic line from the console log. A
//!   running VM whose transport does not answer a mux ping within 10 s (checked on every
//!   `state`, so by the node's periodic reconciliation) is reported `Stopped` too, with that
//!   reason.
//!
//! State of each VM: `<state-root>/<id>/` ([`vm::VmPaths`]): `qmp.sock`, `agent.sock`,
//! `qemu.pid`, `console.log`, `qemu.log`.
//!
//! Host requirements: `qemu-system-x86_64`, `qemu-img`, `mkfs.ext4`, `apt-get` + `dpkg-deb` +
//! `lz4` (first use), `/bin/busybox` (static). Runs as root (cgroups).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::{
    Adopted, ArtifactReader, ArtifactSpec, ArtifactWriter, Capabilities, GuestConnector, Runtime,
    RuntimeError, RuntimeKind, RuntimeState, SandboxSpec, Started,
};

pub mod base;
pub mod connector;
pub mod disk;
pub mod image;
pub mod qmp;
mod start;
pub mod vm;

use connector::MuxConnector;
use qmp::Qmp;
use start::{Mode, Prepared};
pub use vm::Accel;
use vm::{Cgroups, VmPaths};

/// How long a cold boot may take until the agent answers (TCG on a busy host is slow).
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long restoring a memory state may take.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the guest's transport may take to answer a heartbeat ping.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long saving a memory state may take.
const SAVE_TIMEOUT: Duration = Duration::from_secs(300);
/// Name of the saved memory state inside `upper/`.
pub const MEMORY_STATE: &str = "vm-memory.bin";
/// The one artifact of a qemu snapshot: `upper/` (disk overlay + memory state) packed.
pub const VM_ARTIFACT: &str = "vm.tar";
/// The artifacts of a qemu snapshot.
const ARTIFACTS: &[ArtifactSpec] = &[ArtifactSpec {
    name: VM_ARTIFACT,
    memory: true,
}];
/// Name of the overlay disk inside `upper/`.
pub const DISK: &str = "disk.qcow2";

/// Configuration of the QEMU driver.
#[derive(Debug, Clone)]
pub struct QemuConfig {
    /// `qemu-system-x86_64` (looked up in `PATH` by default).
    pub qemu_binary: PathBuf,
    /// `qemu-img`.
    pub qemu_img: PathBuf,
    /// Where VM state directories go (e.g. `<data-dir>/qemu`).
    pub state_root: PathBuf,
    /// Where the guest kernel, initramfs and agent disks are cached (e.g. `<data-dir>/vm-cache`).
    pub cache_dir: PathBuf,
    /// Accelerator; `None` = KVM when [`kvm_usable`], else TCG.
    pub accel: Option<Accel>,
    /// Keep a booted, idle snapshot per release and VM shape, and create sandboxes by restoring
    /// it instead of booting (see [`base`]).
    pub base_snapshots: bool,
}

impl QemuConfig {
    /// Defaults with the given state and cache directories.
    pub fn new(state_root: impl Into<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        QemuConfig {
            qemu_binary: PathBuf::from("qemu-system-x86_64"),
            qemu_img: PathBuf::from("qemu-img"),
            state_root: state_root.into(),
            cache_dir: cache_dir.into(),
            accel: None,
            base_snapshots: true,
        }
    }
}

/// Whether hardware KVM is usable: `/dev/kvm` opens and it is not the `kvm_pvm` software
/// hypervisor (stock guest kernels hang under it; measured on this project's machines).
pub fn kvm_usable() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
        && !Path::new("/sys/module/kvm_pvm").exists()
}

/// Whether QEMU can be run here (`qemu-system-x86_64 --version` succeeds).
pub fn qemu_available(binary: &Path) -> bool {
    std::process::Command::new(binary)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The QEMU driver. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct QemuRuntime {
    cfg: QemuConfig,
    accel: Accel,
    /// Serialises first-use preparation (kernel download, image builds).
    prepare: tokio::sync::Mutex<()>,
    /// The boot files once prepared (looking them up asks apt, which is slow).
    boot_files: Mutex<Option<image::BootFiles>>,
    /// Serialises making base snapshots.
    base_lock: tokio::sync::Mutex<()>,
    connectors: Mutex<HashMap<String, Arc<MuxConnector>>>,
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let context = context.into();
    move |source| RuntimeError::Io { context, source }
}

fn cmd_err(op: &'static str, id: &str, detail: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Command {
        op,
        id: id.to_string(),
        detail: detail.to_string(),
    }
}

fn join_error(e: tokio::task::JoinError) -> RuntimeError {
    RuntimeError::Io {
        context: "blocking task failed".to_string(),
        source: std::io::Error::other(e),
    }
}

fn validate_id(id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(cmd_err("start", id, "invalid sandbox id"))
    }
}

impl QemuRuntime {
    /// Checks that QEMU runs and creates the state root.
    ///
    /// Returns [`RuntimeError::Unavailable`] when QEMU cannot be run.
    pub fn new(cfg: QemuConfig) -> Result<Self, RuntimeError> {
        if !qemu_available(&cfg.qemu_binary) {
            return Err(RuntimeError::Unavailable(format!(
                "{} cannot be run (install qemu-system-x86)",
                cfg.qemu_binary.display()
            )));
        }
        std::fs::create_dir_all(&cfg.state_root)
            .map_err(io_err(format!("create {}", cfg.state_root.display())))?;
        let accel = cfg
            .accel
            .unwrap_or(if kvm_usable() { Accel::Kvm } else { Accel::Tcg });
        tracing::info!(?accel, "qemu runtime ready");
        Ok(QemuRuntime {
            cfg,
            accel,
            prepare: tokio::sync::Mutex::new(()),
            base_lock: tokio::sync::Mutex::new(()),
            boot_files: Mutex::new(None),
            connectors: Mutex::new(HashMap::new()),
        })
    }

    /// The accelerator in use.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    fn paths(&self, id: &str) -> VmPaths {
        VmPaths::new(&self.cfg.state_root, id)
    }

    fn connector_of(&self, id: &str) -> Arc<MuxConnector> {
        let mut map = self.connectors.lock();
        map.entry(id.to_string())
            .or_insert_with(|| Arc::new(MuxConnector::new(self.paths(id).agent())))
            .clone()
    }

    /// Saves the VM's memory and device state into `dir/upper/` (QMP stop + migrate to a
    /// file), leaving the VM paused. On error nothing partial remains in `upper/`.
    pub async fn checkpoint(&self, id: &str, dir: &Path) -> Result<bool, RuntimeError> {
        let upper = dir.join("upper");
        let tmp = upper.join(format!(".{MEMORY_STATE}.tmp"));
        let done = upper.join(MEMORY_STATE);
        let mut q = self.qmp(id).await?;
        let err = |e: qmp::QmpError| cmd_err("suspend", id, e);
        q.execute(
            "migrate-set-parameters",
            json!({ "max-bandwidth": 100u64 << 30 }),
        )
        .await
        .map_err(err)?;
        q.execute("stop", Value::Null).await.map_err(err)?;
        let uri = format!("exec:cat > {}", vm::sh_quote(&tmp));
        q.execute("migrate", json!({ "uri": uri }))
            .await
            .map_err(err)?;
        let deadline = Instant::now() + SAVE_TIMEOUT;
        loop {
            let v = q.execute("query-migrate", Value::Null).await.map_err(err)?;
            match v.get("status").and_then(Value::as_str).unwrap_or("") {
                "completed" => break,
                "failed" | "cancelled" => {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    let why = v.get("error-desc").and_then(Value::as_str).unwrap_or("");
                    return Err(cmd_err(
                        "suspend",
                        id,
                        format!("saving memory failed: {why}"),
                    ));
                }
                _ => {}
            }
            if Instant::now() > deadline {
                let _ = q.execute("migrate_cancel", Value::Null).await;
                let _ = tokio::fs::remove_file(&tmp).await;
                return Err(cmd_err("suspend", id, "saving memory timed out"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::fs::rename(&tmp, &done)
            .await
            .map_err(io_err("rename the memory state"))?;
        tokio::fs::write(
            self.paths(id).dir.join("checkpoint"),
            done.display().to_string(),
        )
        .await
        .map_err(io_err("record the checkpoint"))?;
        Ok(true)
    }

    async fn drop_connector(&self, id: &str) {
        let c = self.connectors.lock().remove(id);
        if let Some(c) = c {
            c.shutdown().await;
        }
    }

    async fn qmp(&self, id: &str) -> Result<Qmp, RuntimeError> {
        Qmp::connect(&self.paths(id).qmp())
            .await
            .map_err(|e| cmd_err("qmp", id, e))
    }

    async fn cleanup(&self, id: &str) {
        self.drop_connector(id).await;
        let paths = self.paths(id);
        let id = id.to_string();
        let _ = tokio::task::spawn_blocking(move || {
            let _ = vm::kill(&paths, &id);
            Cgroups::find(&id).remove();
            let _ = std::fs::remove_dir_all(&paths.dir);
        })
        .await;
    }
}

#[async_trait]
impl Runtime for QemuRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Qemu
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pause: true,
            suspend_memory: true,
            suspend_memory_without_network: true,
            network: true,
            network_tap: true,
            user_namespaces: false,
            volumes: false,
        }
    }

    async fn start(&self, spec: &SandboxSpec) -> Result<Started, RuntimeError> {
        if spec.network.as_ref().is_some_and(|n| n.tap.is_none()) {
            return Err(RuntimeError::Unavailable(
                "a VM joins its sandbox network through a tap device, and none was given".into(),
            ));
        }
        if !spec.volumes.is_empty() {
            return Err(RuntimeError::Unavailable(
                "volumes are not supported on the qemu runtime".into(),
            ));
        }
        self.start_vm(spec).await
    }

    async fn state(&self, id: &str) -> Result<Option<RuntimeState>, RuntimeError> {
        let paths = self.paths(id);
        if !paths.dir.exists() {
            return Ok(None);
        }
        if vm::live_pid(&paths, id).is_none() {
            return Ok(Some(RuntimeState::Stopped));
        }
        let status = self
            .qmp(id)
            .await?
            .status()
            .await
            .map_err(|e| cmd_err("state", id, e))?;
        if status == "running" {
            // Heartbeat: a guest whose kernel hung still looks `running` to QMP.
            let c = self.connector_of(id);
            let alive = async {
                c.session(HEARTBEAT_TIMEOUT)
                    .await?
                    .ping(HEARTBEAT_TIMEOUT)
                    .await
            };
            if let Err(e) = alive.await {
                tracing::warn!(sandbox_id = %id, error = %e, "guest heartbeat lost");
                // A panicking kernel stops answering before QEMU exits (slowly under TCG): its
                // console then says why better than the missing heartbeat does.
                let console = vm::failure_reason(&paths);
                let reason = if console.starts_with(vm::KERNEL_PANIC) {
                    console
                } else {
                    format!(
                        "the guest stopped answering (no heartbeat within {} s)",
                        HEARTBEAT_TIMEOUT.as_secs()
                    )
                };
                let _ = tokio::fs::write(paths.dir.join("failure"), reason).await;
                return Ok(Some(RuntimeState::Stopped));
            }
        }
        Ok(Some(match status.as_str() {
            "running" => RuntimeState::Running,
            "paused" | "suspended" | "inmigrate" | "postmigrate" | "finish-migrate"
            | "prelaunch" | "save-vm" | "restore-vm" => RuntimeState::Paused,
            _ => RuntimeState::Stopped,
        }))
    }

    async fn adopt(&self, id: &str, dir: &Path) -> Result<Option<Adopted>, RuntimeError> {
        let Some(state) = self.state(id).await? else {
            return Ok(None);
        };
        let _ = dir;
        Ok(Some(Adopted {
            state,
            guest: self.connector_of(id) as Arc<dyn GuestConnector>,
        }))
    }

    fn snapshot_artifacts(&self) -> &'static [ArtifactSpec] {
        ARTIFACTS
    }

    async fn save_artifact(
        &self,
        id: &str,
        dir: &Path,
        name: &str,
        out: ArtifactWriter,
    ) -> Result<u64, RuntimeError> {
        if name != VM_ARTIFACT {
            return Err(RuntimeError::Unavailable(format!(
                "qemu snapshots have no artifact {name:?}"
            )));
        }
        // Memory and device state go into `upper/` beside the disk overlay; the artifact is
        // that directory packed (the VM stays paused).
        self.checkpoint(id, dir).await?;
        let upper = dir.join("upper");
        tokio::task::spawn_blocking(move || crate::runc::snapshot::pack(&upper, out))
            .await
            .map_err(|e| io_err("pack the VM state")(std::io::Error::other(e)))?
            .map_err(io_err("pack the VM state"))
    }

    async fn check_artifact(&self, name: &str, input: ArtifactReader) -> Result<u64, RuntimeError> {
        if name != VM_ARTIFACT {
            return Err(RuntimeError::Unavailable(format!(
                "qemu snapshots have no artifact {name:?}"
            )));
        }
        // The VM's state is its upper dir packed like runc's: the same rules apply.
        tokio::task::spawn_blocking(move || crate::runc::snapshot::check(input))
            .await
            .map_err(|e| io_err("check the VM state")(std::io::Error::other(e)))?
            .map_err(io_err("check the VM state"))
    }

    async fn load_artifact(
        &self,
        dir: &Path,
        name: &str,
        input: ArtifactReader,
    ) -> Result<u64, RuntimeError> {
        if name != VM_ARTIFACT {
            return Err(RuntimeError::Unavailable(format!(
                "qemu snapshots have no artifact {name:?}"
            )));
        }
        let upper = dir.join("upper");
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&upper)?;
            crate::runc::snapshot::unpack(input, &upper)
        })
        .await
        .map_err(|e| io_err("unpack the VM state")(std::io::Error::other(e)))?
        .map_err(io_err("unpack the VM state"))
    }

    async fn failure(&self, id: &str, _dir: &Path) -> Option<String> {
        let paths = self.paths(id);
        if let Ok(reason) = tokio::fs::read_to_string(paths.dir.join("failure")).await {
            return Some(reason);
        }
        if !paths.dir.exists() || vm::live_pid(&paths, id).is_some() {
            return None;
        }
        Some(vm::failure_reason(&paths))
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        self.qmp(id)
            .await?
            .execute("stop", Value::Null)
            .await
            .map_err(|e| cmd_err("pause", id, e))?;
        Ok(())
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        // A checkpoint the caller did not use (its save failed) must not be restored later.
        let record = self.paths(id).dir.join("checkpoint");
        if let Ok(path) = tokio::fs::read_to_string(&record).await {
            let _ = tokio::fs::remove_file(path.trim()).await;
            let _ = tokio::fs::remove_file(&record).await;
        }
        self.qmp(id)
            .await?
            .execute("cont", Value::Null)
            .await
            .map_err(|e| cmd_err("resume", id, e))?;
        Ok(())
    }

    async fn stop(&self, id: &str, _dir: &Path) -> Result<(), RuntimeError> {
        self.drop_connector(id).await;
        let paths = self.paths(id);
        // `quit` first: QEMU flushes the qcow2 metadata it caches (a SIGKILL could leave the
        // overlay inconsistent); SIGKILL is the fallback.
        if vm::live_pid(&paths, id).is_some() {
            let quit = async {
                let mut q = Qmp::connect(&paths.qmp()).await.ok()?;
                q.execute("quit", Value::Null).await.ok()
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), quit).await;
            let deadline = Instant::now() + Duration::from_secs(2);
            while vm::live_pid(&paths, id).is_some() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let id = id.to_string();
        tokio::task::spawn_blocking(move || {
            vm::kill(&paths, &id)?;
            Cgroups::find(&id).remove();
            match std::fs::remove_dir_all(&paths.dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_err(format!("remove {}", paths.dir.display()))(e)),
            }
        })
        .await
        .map_err(join_error)?
    }

    async fn list(&self) -> Result<Vec<String>, RuntimeError> {
        let mut ids = Vec::new();
        let mut rd = match tokio::fs::read_dir(&self.cfg.state_root).await {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
            Err(e) => return Err(io_err("list VM states")(e)),
        };
        while let Some(e) = rd.next_entry().await.map_err(io_err("list VM states"))? {
            // Base-snapshot VMs are the runtime's own, not sandboxes.
            if let Some(name) = e.file_name().to_str() {
                if name.starts_with(base::VM_PREFIX) {
                    continue;
                }
                ids.push(name.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }

    async fn cgroup_paths(&self, id: &str) -> Result<Vec<(String, PathBuf)>, RuntimeError> {
        if vm::live_pid(&self.paths(id), id).is_none() {
            return Err(RuntimeError::NotFound { id: id.to_string() });
        }
        Ok(Cgroups::find(id).dirs)
    }
    async fn disk_usage(&self, _id: &str, dir: &Path) -> Result<crate::DiskUsage, RuntimeError> {
        let overlay = dir.join("upper").join(DISK);
        tokio::task::spawn_blocking(move || disk::overlay_usage(&overlay))
            .await
            .map_err(join_error)?
    }
}
