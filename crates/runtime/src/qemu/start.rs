//! Starting a VM: preparing its files, booting or restoring QEMU, and waiting for the agent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cove_guest_protocol::mux::Control;
use serde_json::Value;

use super::vm::{self, Cgroups};
use super::{
    cmd_err, connector, disk, image, io_err, join_error, validate_id, QemuRuntime, BOOT_TIMEOUT,
    DISK, MEMORY_STATE, RESTORE_TIMEOUT,
};
use crate::{GuestConnector, RuntimeError, SandboxSpec, Started};

/// A clock-setting round trip slower than this is repeated (see the wake path of `start`).
const SET_CLOCK_SLOW: Duration = Duration::from_millis(500);

/// Files a start needs, prepared on first use.
#[derive(Clone)]
pub(super) struct Prepared {
    pub(super) boot: image::BootFiles,
    pub(super) agent_disk: PathBuf,
    /// The release's ext4 image.
    pub(super) base_image: PathBuf,
    /// Virtual size of the sandbox's disk, MiB.
    pub(super) disk_mib: u64,
    /// The sandbox's overlay disk (`upper/disk.qcow2`; may not exist yet).
    pub(super) disk: PathBuf,
}

/// How a VM comes up.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode<'a> {
    /// Boot the kernel.
    Cold,
    /// Restore this sandbox's own saved memory (wake).
    Wake(&'a Path),
    /// Restore a base snapshot of its release (a fresh sandbox skipping the boot).
    Clone(&'a Path),
}

impl Mode<'_> {
    fn incoming(self) -> Option<PathBuf> {
        match self {
            Mode::Cold => None,
            Mode::Wake(p) | Mode::Clone(p) => Some(p.to_path_buf()),
        }
    }
}

impl QemuRuntime {
    /// Starts the sandbox's VM: wake from its saved memory, clone its release's base
    /// snapshot, or boot, in that order of preference (each falling back to the next).
    pub(super) async fn start_vm(&self, spec: &SandboxSpec) -> Result<Started, RuntimeError> {
        validate_id(&spec.id)?;
        let t0 = Instant::now();
        let prep = self.prepare(spec).await?;
        let memory = spec.dir.join("upper").join(MEMORY_STATE);
        let fresh = !prep.disk.exists();
        if memory.exists() && !fresh {
            self.overlay(&prep, None).await?;
            match self.boot(spec, &prep, Mode::Wake(&memory)).await {
                Ok(s) => {
                    let _ = tokio::fs::remove_file(&memory).await;
                    tracing::info!(sandbox_id = %spec.id, ms = t0.elapsed().as_millis() as u64,
                        "VM restored from its memory state");
                    return Ok(s);
                }
                Err(e) => {
                    tracing::warn!(sandbox_id = %spec.id, error = %e,
                        "restoring the memory state failed; booting the saved disk instead");
                    self.cleanup(&spec.id).await;
                    let _ = tokio::fs::remove_file(&memory).await;
                }
            }
        } else if fresh && self.cfg.base_snapshots {
            match self.ensure_base(spec, &prep).await {
                Ok(b) => {
                    self.overlay(&prep, Some(&b.disk)).await?;
                    match self.boot(spec, &prep, Mode::Clone(&b.memory)).await {
                        Ok(s) => {
                            tracing::info!(sandbox_id = %spec.id,
                                ms = t0.elapsed().as_millis() as u64,
                                "VM restored from its release's base snapshot");
                            return Ok(s);
                        }
                        Err(e) => {
                            tracing::warn!(sandbox_id = %spec.id, error = %e,
                                "restoring the base snapshot failed; booting instead");
                            self.cleanup(&spec.id).await;
                            let _ = tokio::fs::remove_file(&prep.disk).await;
                        }
                    }
                }
                Err(e) => tracing::warn!(sandbox_id = %spec.id, error = %e,
                    "no base snapshot; booting"),
            }
        }
        self.overlay(&prep, None).await?;
        match self.boot(spec, &prep, Mode::Cold).await {
            Ok(s) => {
                tracing::info!(sandbox_id = %spec.id, ms = t0.elapsed().as_millis() as u64,
                    accel = ?self.accel, "VM booted");
                Ok(s)
            }
            Err(e) => {
                self.cleanup(&spec.id).await;
                Err(e)
            }
        }
    }

    /// Boot files, agent disk, release image and the sandbox's overlay.
    pub(super) async fn prepare(&self, spec: &SandboxSpec) -> Result<Prepared, RuntimeError> {
        let _guard = self.prepare.lock().await;
        let cache = self.cfg.cache_dir.clone();
        let agent = spec.guest_agent.clone();
        let rootfs = spec.rootfs.clone();
        let disk = spec.dir.join("upper").join(DISK);
        let disk_mib = spec.resources.disk_mib;
        let known = self
            .boot_files
            .lock()
            .clone()
            .filter(|b| b.kernel.exists() && b.initramfs.exists());
        let prep = tokio::task::spawn_blocking(move || {
            let boot = match known {
                Some(b) => b,
                None => image::ensure_boot_files(&cache)?,
            };
            let agent_disk = image::ensure_agent_disk(&cache, &agent)?;
            let (base_image, base_mib) = disk::ensure_release_image(&rootfs)?;
            let disk_mib = disk_mib
                .unwrap_or(base_mib + disk::DEFAULT_EXTRA_MIB)
                .max(base_mib);
            Ok(Prepared {
                boot,
                agent_disk,
                base_image,
                disk_mib,
                disk,
            })
        })
        .await
        .map_err(join_error)??;
        *self.boot_files.lock() = Some(prep.boot.clone());
        Ok(prep)
    }

    /// Starts QEMU and waits for the agent; on failure the caller cleans up.
    pub(super) async fn boot(
        &self,
        spec: &SandboxSpec,
        prep: &Prepared,
        mode: Mode<'_>,
    ) -> Result<Started, RuntimeError> {
        let incoming = mode.incoming();
        let incoming = incoming.as_deref();
        let paths = self.paths(&spec.id);
        let _ = std::fs::remove_dir_all(&paths.dir);
        std::fs::create_dir_all(&paths.dir)
            .map_err(io_err(format!("create {}", paths.dir.display())))?;
        let launch = vm::Launch {
            qemu: &self.cfg.qemu_binary,
            accel: self.accel,
            kernel: &prep.boot.kernel,
            initramfs: &prep.boot.initramfs,
            disk: &prep.disk,
            agent_disk: &prep.agent_disk,
            incoming,
        };
        let args = vm::args(spec, &launch, &paths);
        let cgroups = Cgroups::create(spec)?;
        let netns = spec
            .network
            .as_ref()
            .filter(|n| n.tap.is_some())
            .map(|n| n.netns_path.as_path());
        let mut child = vm::spawn(&self.cfg.qemu_binary, &args, &cgroups, &paths, netns)?;
        let pid = child.id().unwrap_or(0);
        std::fs::write(paths.pid(), pid.to_string()).map_err(io_err("write the pid file"))?;
        // Reap QEMU when it ends (a restarted node is not its parent; init reaps it then), and
        // tell the wait below.
        let (exited_tx, exited_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = exited_tx.send(status);
        });
        let id = spec.id.clone();
        let died = {
            let paths = paths.clone();
            async move {
                let status = exited_rx.await;
                let reason = vm::failure_reason(&paths);
                match status {
                    Ok(Ok(s)) => format!("{reason} ({s})"),
                    _ => reason,
                }
            }
        };
        let connector = self.connector_of(&id);
        let ready = async {
            if incoming.is_some() {
                self.finish_incoming(&id).await?;
            }
            let wait = if incoming.is_some() {
                RESTORE_TIMEOUT
            } else {
                BOOT_TIMEOUT
            };
            connector.session(wait).await.map_err(|e| {
                tracing::warn!(sandbox_id = %id, error = %e, "guest agent did not answer");
                RuntimeError::AgentTimeout {
                    id: id.clone(),
                    waited_ms: wait.as_millis() as u64,
                }
            })?;
            Ok::<(), RuntimeError>(())
        };
        tokio::select! {
            r = ready => r?,
            reason = died => return Err(cmd_err("start", &id, reason)),
        }
        // Fresh randomness for every VM; clock too after a restore.
        let mut seed = vec![0u8; 64];
        getrandom(&mut seed);
        if let Mode::Clone(_) = mode {
            let name = Control::SetHostname {
                name: spec.hostname.clone(),
            };
            connector
                .control(&name, connector::SESSION_TIMEOUT)
                .await
                .map_err(|e| cmd_err("start", &id, format!("setting the hostname: {e}")))?;
        }
        if incoming.is_some() {
            // A just-restored guest under TCG can take seconds to take the first message, and
            // the time it sets is then that much behind: set it again while the round trip is
            // slow (at most three times), so the guest's error stays under SET_CLOCK_SLOW.
            for _ in 0..3 {
                let sent = Instant::now();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let clock = Control::SetClock {
                    secs: now.as_secs() as i64,
                    nanos: now.subsec_nanos(),
                };
                connector
                    .control(&clock, connector::SESSION_TIMEOUT)
                    .await
                    .map_err(|e| cmd_err("wake", &id, format!("setting the guest clock: {e}")))?;
                if sent.elapsed() < SET_CLOCK_SLOW {
                    break;
                }
            }
        }
        connector
            .control(
                &Control::AddEntropy { bytes: seed },
                connector::SESSION_TIMEOUT,
            )
            .await
            .map_err(|e| cmd_err("start", &id, format!("seeding the guest RNG: {e}")))?;
        // The guest's side of the sandbox network (again after a restore: the address may be
        // another one now).
        if let Some(net) = spec.network.as_ref().filter(|n| n.tap.is_some()) {
            let set = Control::SetNetwork {
                address: net.address.octets(),
                gateway: net.gateway.octets(),
                resolv_conf: net.resolv_conf.clone(),
                ca_pem: net.extra_ca_pem.clone(),
            };
            connector
                .control(&set, connector::SESSION_TIMEOUT)
                .await
                .map_err(|e| cmd_err("start", &id, format!("configuring the network: {e}")))?;
        }
        Ok(Started {
            guest: connector as Arc<dyn GuestConnector>,
            init_pid: pid,
            memory_restored: matches!(mode, Mode::Wake(_)),
        })
    }

    /// Waits until an incoming migration finished loading, then continues the VM.
    pub(super) async fn finish_incoming(&self, id: &str) -> Result<(), RuntimeError> {
        let deadline = Instant::now() + RESTORE_TIMEOUT;
        let sock = self.paths(id).qmp();
        while !sock.exists() {
            if Instant::now() > deadline {
                return Err(cmd_err("wake", id, "QMP socket did not appear"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut q = self.qmp(id).await?;
        loop {
            let status = q.status().await.map_err(|e| cmd_err("wake", id, e))?;
            match status.as_str() {
                "inmigrate" => {}
                "paused" | "postmigrate" | "prelaunch" => break,
                "running" => return Ok(()),
                other => return Err(cmd_err("wake", id, format!("restore ended in {other}"))),
            }
            if Instant::now() > deadline {
                return Err(cmd_err("wake", id, "restoring the memory state timed out"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        q.execute("cont", Value::Null)
            .await
            .map_err(|e| cmd_err("wake", id, e))?;
        Ok(())
    }

    /// Makes the sandbox's overlay: a copy of `from` (a base snapshot's disk), or a new one on
    /// the release image; an existing one is pointed at the release image.
    pub(super) async fn overlay(
        &self,
        prep: &Prepared,
        from: Option<&Path>,
    ) -> Result<(), RuntimeError> {
        if let Some(src) = from {
            if let Some(dir) = prep.disk.parent() {
                tokio::fs::create_dir_all(dir)
                    .await
                    .map_err(io_err(format!("create {}", dir.display())))?;
            }
            tokio::fs::copy(src, &prep.disk)
                .await
                .map_err(io_err("copy the base snapshot's disk"))?;
        }
        let qemu_img = self.cfg.qemu_img.clone();
        let (base, disk, mib) = (prep.base_image.clone(), prep.disk.clone(), prep.disk_mib);
        tokio::task::spawn_blocking(move || disk::ensure_overlay(&qemu_img, &base, &disk, mib))
            .await
            .map_err(join_error)?
    }
}

/// Fills `buf` from the host's kernel RNG.
fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(buf);
    }
}
