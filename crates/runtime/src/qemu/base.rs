//! Base snapshots: one booted, idle VM per release and VM shape, saved once and restored by
//! every new sandbox of that shape instead of a cold boot.
//!
//! A base lives with its release, in `<release>/vm-base/<key>/` (next to `rootfs/` and
//! `rootfs.ext4`, so it goes when the release goes), as `vm-memory.bin` (the migration stream)
//! and `disk.qcow2` (its overlay on the release image, already grown to the sandbox disk size).
//! The key covers everything else the saved guest depends on: the kernel, initramfs, agent disk,
//! vCPUs, memory, disk size, the agent's arguments and the accelerator; a base of another key
//! is removed when a new one is made (an agent or kernel update makes them stale). A new sandbox gets
//! a copy of the disk and restores the memory (the file is only read, so clones share it); the
//! runtime then sets its hostname, its clock and fresh entropy, so no two clones share random
//! state (the kernel's pool is reseeded with `RNDADDENTROPY`). The base VM itself runs under the
//! id `cove-base-<key>`, which [`super::QemuRuntime::list`] does not report.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use super::{Mode, Prepared, QemuRuntime, DISK, MEMORY_STATE};
use crate::{Runtime, RuntimeError, SandboxSpec};

/// Id prefix of base-snapshot VMs.
pub const VM_PREFIX: &str = "cove-base-";

/// A saved base snapshot.
#[derive(Debug, Clone)]
pub struct BaseSnapshot {
    /// The memory state.
    pub memory: PathBuf,
    /// The disk to copy.
    pub disk: PathBuf,
}

fn stamp(p: &Path) -> (u64, u128) {
    std::fs::metadata(p)
        .map(|m| {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (m.len(), t)
        })
        .unwrap_or_default()
}

fn key(spec: &SandboxSpec, prep: &Prepared, rt: &QemuRuntime) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    stamp(&prep.base_image).hash(&mut h);
    for p in [&prep.boot.kernel, &prep.boot.initramfs, &prep.agent_disk] {
        p.hash(&mut h);
        stamp(p).hash(&mut h);
    }
    (
        spec.resources.vcpus,
        spec.resources.memory_mib,
        prep.disk_mib,
    )
        .hash(&mut h);
    spec.guest_agent_args.hash(&mut h);
    format!("{:?}", rt.accel).hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Removes the bases in `parent` other than `keep` (clones already running have copied their
/// disk and read their memory state; a restore in flight holds the file open).
fn prune(parent: &Path, keep: &str) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name != keep && !name.starts_with('.') {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl QemuRuntime {
    /// The base snapshot for `spec`'s release and shape, made now (a cold boot, then a save)
    /// when there is none.
    pub(super) async fn ensure_base(
        &self,
        spec: &SandboxSpec,
        prep: &Prepared,
    ) -> Result<BaseSnapshot, RuntimeError> {
        let key = key(spec, prep, self);
        let parent = spec
            .rootfs
            .parent()
            .unwrap_or(Path::new("/"))
            .join("vm-base");
        let dir = parent.join(&key);
        let snap = BaseSnapshot {
            memory: dir.join(MEMORY_STATE),
            disk: dir.join(DISK),
        };
        let _guard = self.base_lock.lock().await;
        if snap.memory.exists() && snap.disk.exists() {
            return Ok(snap);
        }
        std::fs::create_dir_all(&parent).map_err(super::io_err("create the base directory"))?;
        let work = tempfile::Builder::new()
            .prefix(".making-")
            .tempdir_in(&parent)
            .map_err(super::io_err("create a temporary directory"))?;
        let id = format!("{VM_PREFIX}{key}");
        let bspec = SandboxSpec {
            id: id.clone(),
            dir: work.path().join("sandbox"),
            hostname: "cove-base".to_string(),
            // The base boots without a network (its NIC has no peer); each clone gets its own.
            network: None,
            volumes: Vec::new(),
            ..spec.clone()
        };
        let bprep = Prepared {
            disk: bspec.dir.join("upper").join(DISK),
            ..prep.clone()
        };
        let t0 = std::time::Instant::now();
        self.overlay(&bprep, None).await?;
        let made = async {
            self.boot(&bspec, &bprep, Mode::Cold).await?;
            self.pause(&id).await?;
            self.checkpoint(&id, &bspec.dir).await?;
            Ok::<(), RuntimeError>(())
        }
        .await;
        self.cleanup(&id).await;
        made?;
        prune(&parent, &key);
        std::fs::rename(bspec.dir.join("upper"), &dir)
            .map_err(super::io_err(format!("rename into {}", dir.display())))?;
        tracing::info!(
            key,
            ms = t0.elapsed().as_millis() as u64,
            "base snapshot made"
        );
        Ok(snap)
    }
}
