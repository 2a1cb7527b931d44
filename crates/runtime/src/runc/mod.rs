//! runc (OCI container) driver.
//!
//! A sandbox is an OCI container whose init process is the guest agent. Its root filesystem is an
//! overlay of the release's read-only rootfs (lower) and the sandbox's own `upper/`, mounted by
//! this driver on `<dir>/rootfs`; the container is created and started with the `runc` CLI.
//!
//! Layout of a sandbox directory (`SandboxSpec::dir`), see `layout.rs`:
//!
//! | path | what |
//! |---|---|
//! | `upper/`, `work/` | overlay upper and work dirs; `upper/` holds the sandbox's files and survives `stop` |
//! | `rootfs/` | overlay mount point, the container's root |
//! | `run/` | bind-mounted at [`cove_guest_protocol::GUEST_RUN_DIR`]; the agent's socket is `run/agent.sock` |
//! | `bundle/config.json` | OCI config (`config.rs`) |
//! | `agent.log` | stdout/stderr of the guest agent (and of `runc run`) |
//! | `boot_id` | this start's boot id, bound read-only over the sandbox's `/proc/sys/kernel/random/boot_id` (`boot_id.rs`) |
//! | `disk.img`, `disk/` | with `disk_mib`: the sandbox's own ext4 image and its mount point, holding `upper/`, `work/` and the run dir (`disk/run`, then used instead of `run/`); `upper` is then a symlink to `disk/upper` (`disk.rs`) |
//!
//! Files by verb: `start.rs` (create + start + wait for the agent, undo on failure), `stop.rs`
//! (kill, delete, unmount; idempotent); by concern: `cli.rs` (invoking runc), `config.rs` (OCI
//! config), `seccomp.rs` (syscall deny-list), `mounts.rs` (overlay), `cgroups.rs` (cgroup
//! paths), `command_cgroups.rs` (the cgroups delegated to the agent for its commands), `layout.rs` (the sandbox directory), `views.rs` (lxcfs and cpusets: honest limits), `snapshot/` (the `fs.tar` artifact: the upper dir packed and unpacked), `gvisor_memory.rs` (gVisor: a suspend that keeps memory, for sandboxes without a network).
//!
//! Host requirements and quirks: root; cgroup v1 or v2 (runc decides; paths are read back from
//! `/proc/<pid>/cgroup`). Without `CAP_SYS_RESOURCE` (as on this project's CI machines) the
//! agent's `oomScoreAdj: -1000` and a raised `RLIMIT_NOFILE` hard limit are left out, because
//! runc would fail on them. Stopped inits are reaped by the host's init (runc's `create` exits),
//! so a stopped sandbox's init may linger as a zombie briefly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::{
    Adopted, ArtifactReader, ArtifactSpec, ArtifactWriter, Capabilities, Runtime, RuntimeError,
    RuntimeKind, RuntimeState, SandboxSpec, Started,
};

mod attach_volumes;
mod boot_id;
mod cgroups;
mod cli;
mod command_cgroups;
mod config;
mod disk;
mod freezer;
mod gvisor_memory;
mod identity;
mod idmap;
mod kill;
mod layout;
mod mounts;
mod seal;
mod seccomp;
mod shift;
pub mod snapshot;
mod start;
mod stop;
mod userns;
mod views;
pub mod volume_disks;
mod volumes;

use cli::Runc;
pub use userns::{
    UserNamespaces, DEFAULT_BASE as DEFAULT_USERNS_BASE, DEFAULT_CLAIMS_DIR as USERNS_CLAIMS_DIR,
    RANGE_SIZE as USERNS_RANGE_SIZE,
};

/// Configuration of the runc driver.
#[derive(Debug, Clone)]
pub struct RuncConfig {
    /// The runc binary (default `runc`, looked up in `PATH`).
    pub runc_binary: PathBuf,
    /// runc's state directory, passed as `runc --root` (e.g. `<data-dir>/runc`). Created if
    /// missing.
    pub state_root: PathBuf,
    /// Where lxcfs serves (or is started) for honest `/proc` views (`views.rs`); `None`: off.
    pub lxcfs_dir: Option<PathBuf>,
    /// A user namespace per sandbox, its root an unprivileged host id range (`userns.rs`);
    /// `None`: sandboxes share the host's ids (their root is the host's root, confined by
    /// capabilities, seccomp and namespaces only).
    pub user_namespaces: Option<UserNamespaces>,
}

impl RuncConfig {
    /// `runc` from `PATH` with the given state root.
    pub fn new(state_root: impl Into<PathBuf>) -> Self {
        RuncConfig {
            runc_binary: PathBuf::from("runc"),
            state_root: state_root.into(),
            lxcfs_dir: None,
            user_namespaces: None,
        }
    }
}

/// Configuration of the runc driver running gVisor's `runsc` instead of runc (the `gvisor`
/// runtime): the same bundle, overlay, disk, limits and agent; no user namespaces and no lxcfs
/// views (gVisor's kernel keeps its own ids and `/proc`).
#[derive(Debug, Clone)]
pub struct GvisorConfig {
    /// The runsc binary (default `runsc`, looked up in `PATH`).
    pub runsc_binary: PathBuf,
    /// runsc's state directory (`runsc --root`). Created if missing.
    pub state_root: PathBuf,
    /// `runsc --platform` (`None`: [`gvisor_default_platform`]).
    pub platform: Option<String>,
}

impl GvisorConfig {
    /// `runsc` from `PATH` with the given state root and the default platform.
    pub fn new(state_root: impl Into<PathBuf>) -> Self {
        GvisorConfig {
            runsc_binary: PathBuf::from("runsc"),
            state_root: state_root.into(),
            platform: None,
        }
    }
}

/// The platform gVisor uses by default with `runsc`: `systrap` when this runsc has it (gVisor
/// releases from 2023 on), else `ptrace` (every system call stops the process for a tracer:
/// slow, but needs nothing of the host). `kvm` is never picked by itself.
pub fn gvisor_default_platform(runsc: &Path) -> String {
    let out = std::process::Command::new(runsc)
        .arg("flags")
        .stdin(std::process::Stdio::null())
        .output();
    let has_systrap = out.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("systrap")
            || String::from_utf8_lossy(&o.stderr).contains("systrap")
    });
    if has_systrap { "systrap" } else { "ptrace" }.to_string()
}

/// The runc driver. Cheap to share: it holds paths and the freezer of each container it
/// started or adopted.
#[derive(Debug, Clone)]
pub struct RuncRuntime {
    runc: Runc,
    /// The freezer and init of each container this runtime started or adopted, by sandbox id
    /// (`freezer.rs`).
    freezers: std::sync::Arc<parking_lot::Mutex<HashMap<String, freezer::Tracked>>>,
    /// What this process may grant a sandbox (probed once).
    host: config::HostPrivileges,
    /// lxcfs and the node's CPUs, for honest limits.
    views: std::sync::Arc<views::HostViews>,
    /// User namespaces, when on.
    userns: Option<std::sync::Arc<UserNamespaces>>,
    /// The spec each sandbox this process started was started with, by sandbox id: a gVisor
    /// checkpoint that stopped the sandbox and cannot carry it on from its memory starts it
    /// again from its files with it (`gvisor_memory.rs`). Not kept for adopted sandboxes.
    specs: std::sync::Arc<parking_lot::Mutex<HashMap<String, SandboxSpec>>>,
    /// `runsc delete` of a container a checkpoint with memory stopped, by sandbox id: it runs
    /// while the node saves the checkpoint's artifacts (it waits for the exited sandbox process
    /// to be reaped, over a second on some hosts), and the restore in place waits for it.
    deleting: Deleting,
}

/// See [`RuncRuntime`]'s `deleting`.
type Deleting = std::sync::Arc<
    parking_lot::Mutex<HashMap<String, tokio::task::JoinHandle<Result<(), RuntimeError>>>>,
>;

impl RuncRuntime {
    /// Checks that `runc --version` runs and creates the state root; with user namespaces,
    /// checks that the kernel can idmap a release for an overlay (`userns::probe`).
    ///
    /// Returns [`RuntimeError::Unavailable`] when runc cannot be run, or user namespaces are
    /// asked for and cannot be had (the message names `--user-namespaces off`).
    pub fn new(config: RuncConfig) -> Result<Self, RuntimeError> {
        let runc = Runc::new(config.runc_binary, config.state_root);
        runc.check_version()?;
        std::fs::create_dir_all(runc.root()).map_err(|source| RuntimeError::Io {
            context: format!("create runc state root {}", runc.root().display()),
            source,
        })?;
        let host = config::HostPrivileges::probe();
        if !host.sys_resource {
            tracing::warn!(
                nofile_hard = host.nofile_hard,
                "no CAP_SYS_RESOURCE: guest agents keep oom_score_adj 0 instead of -1000, \
                 and RLIMIT_NOFILE is capped at this process's hard limit"
            );
        }
        if let Some(userns) = &config.user_namespaces {
            userns.check()?;
            let probe_dir = runc.root().parent().unwrap_or(runc.root());
            userns::probe(userns, probe_dir)?;
        }
        let views = std::sync::Arc::new(views::HostViews::probe(config.lxcfs_dir.as_deref()));
        Ok(RuncRuntime {
            runc,
            freezers: Default::default(),
            host,
            views,
            userns: config.user_namespaces.map(std::sync::Arc::new),
            specs: Default::default(),
            deleting: Default::default(),
        })
    }

    /// The driver running gVisor's `runsc` (the `gvisor` runtime). Returns
    /// [`RuntimeError::Unavailable`] when runsc cannot be run or the platform is unknown.
    pub fn gvisor(config: GvisorConfig) -> Result<Self, RuntimeError> {
        let platform = config
            .platform
            .unwrap_or_else(|| gvisor_default_platform(&config.runsc_binary));
        if !["systrap", "ptrace", "kvm"].contains(&platform.as_str()) {
            return Err(RuntimeError::Unavailable(format!(
                "unknown gVisor platform {platform:?} (systrap, ptrace or kvm)"
            )));
        }
        let runc = Runc::runsc(config.runsc_binary, config.state_root, platform);
        runc.check_version()?;
        std::fs::create_dir_all(runc.root()).map_err(|source| RuntimeError::Io {
            context: format!("create runsc state root {}", runc.root().display()),
            source,
        })?;
        Ok(RuncRuntime {
            runc,
            freezers: Default::default(),
            host: config::HostPrivileges::probe(),
            views: std::sync::Arc::new(views::HostViews::probe(None)),
            userns: None,
            specs: Default::default(),
            deleting: Default::default(),
        })
    }

    /// Waits for the `runsc delete` a checkpoint of `id` started, if any (a failed one is logged:
    /// the restore in place deletes the container again).
    async fn finish_delete(&self, id: &str) {
        let task = self.deleting.lock().remove(id);
        if let Some(task) = task {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(sandbox_id = %id, %error, "cannot delete a checkpointed container")
                }
                Err(error) => {
                    tracing::warn!(sandbox_id = %id, %error, "the delete of a checkpointed container failed")
                }
            }
        }
    }

    /// Starts a stopped sandbox (a checkpoint stopped it and it cannot carry on from its
    /// memory) again from its files, in its directory, with the spec it was started with.
    async fn restart(&self, spec: &SandboxSpec) -> Result<(), RuntimeError> {
        let layout = layout::Layout::new(&spec.dir);
        gvisor_memory::clear_for_cold_start(&layout).await?;
        self.stop(&spec.id, &spec.dir).await?;
        self.start(spec).await?;
        tracing::info!(sandbox_id = %spec.id, "sandbox started again from its files");
        Ok(())
    }

    /// The gVisor platform, when this driver runs runsc.
    pub fn gvisor_platform(&self) -> Option<&str> {
        self.runc.platform()
    }

    fn lock_freezers(&self) -> parking_lot::MutexGuard<'_, HashMap<String, freezer::Tracked>> {
        self.freezers.lock()
    }

    /// Remembers the freezer of container `id`, whose init is `pid` (a container whose cgroup
    /// cannot be read is paused through runc's state later instead).
    fn learn_freezer(&self, id: &str, pid: u32) {
        match freezer::Tracked::of_pid(pid) {
            Ok(f) => {
                self.lock_freezers().insert(id.to_string(), f);
            }
            Err(e) => {
                tracing::warn!(sandbox_id = %id, error = %e, "cannot find the freezer cgroup")
            }
        }
    }

    /// The freezer of container `id`: cached, else found from runc's state (`NotFound` when
    /// runc has no such container or it does not run).
    async fn freezer(&self, id: &str) -> Result<freezer::Freezer, RuntimeError> {
        if let Some(t) = self.lock_freezers().get(id) {
            return Ok(t.freezer.clone());
        }
        let state = self
            .runc
            .state(id)
            .await?
            .filter(|s| s.pid != 0)
            .ok_or_else(|| RuntimeError::NotFound { id: id.to_string() })?;
        let t = freezer::Tracked::of_pid(state.pid)?;
        let f = t.freezer.clone();
        self.lock_freezers().insert(id.to_string(), t);
        Ok(f)
    }

    /// runc's state directory (`runc --root`).
    pub fn state_root(&self) -> &Path {
        self.runc.root()
    }

    /// Host path of the guest agent's socket of the sandbox whose directory is `dir` (for
    /// tools and tests that speak the guest protocol directly; the node agent uses the
    /// connector from [`Runtime::start`]).
    pub fn agent_socket(dir: &Path) -> PathBuf {
        layout::Layout::new(dir).agent_socket()
    }
}

#[async_trait]
impl Runtime for RuncRuntime {
    fn kind(&self) -> RuntimeKind {
        if self.runc.is_runsc() {
            RuntimeKind::Gvisor
        } else {
            RuntimeKind::Runc
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pause: true,
            suspend_memory: false,
            suspend_memory_without_network: self.runc.is_runsc(),
            network: true,
            network_tap: false,
            user_namespaces: self.userns.is_some(),
            volumes: true,
        }
    }

    async fn start(&self, spec: &SandboxSpec) -> Result<Started, RuntimeError> {
        let layout = layout::Layout::new(&spec.dir);
        let mut restoring = self.runc.is_runsc() && gvisor_memory::pending(&layout);
        if restoring && !gvisor_memory::owned_by(&layout, &spec.id) {
            tracing::info!(sandbox_id = %spec.id,
                "the memory image is another sandbox's (a fork): starting from the files");
            gvisor_memory::discard(&layout).await;
            restoring = false;
        }
        // A failed restore falls back to a cold start inside `start` (`start.rs`).
        let started = start::start(
            &self.runc,
            spec,
            self.host,
            &self.views,
            self.userns.as_deref(),
        )
        .await?;
        if restoring {
            gvisor_memory::discard(&layout).await;
        }
        self.learn_freezer(&spec.id, started.init_pid);
        self.specs.lock().insert(spec.id.clone(), spec.clone());
        Ok(started)
    }

    async fn adopt(&self, id: &str, dir: &Path) -> Result<Option<Adopted>, RuntimeError> {
        let Some(state) = self.runc.state(id).await? else {
            return Ok(None);
        };
        if state.pid != 0 {
            self.learn_freezer(id, state.pid);
        }
        Ok(Some(Adopted {
            state: state.status,
            guest: std::sync::Arc::new(crate::UnixSocketConnector::new(Self::agent_socket(dir))),
        }))
    }

    async fn state(&self, id: &str) -> Result<Option<RuntimeState>, RuntimeError> {
        // A container this runtime started runs while its init does: its state is the
        // freezer's, read without starting runc. Anything else (a stopped init, an unknown
        // container) is runc's to say.
        let tracked = self.lock_freezers().get(id).cloned();
        if let Some(t) = tracked {
            if self.runc.exists(id) {
                match t.live_state() {
                    Some(true) => return Ok(Some(RuntimeState::Paused)),
                    Some(false) => return Ok(Some(RuntimeState::Running)),
                    None => {}
                }
            }
        }
        Ok(self.runc.state(id).await?.map(|s| s.status))
    }

    async fn attach_volumes(
        &self,
        id: &str,
        dir: &Path,
        volumes: &[crate::VolumeBind],
    ) -> Result<(), RuntimeError> {
        if self.runc.is_runsc() {
            // gVisor's Sentry serves the sandbox's mounts through its gofer: nothing mounted
            // on the host reaches a running sandbox.
            return Err(RuntimeError::Unavailable(
                "gVisor cannot attach volumes to a running sandbox".into(),
            ));
        }
        let pid = self
            .runc
            .state(id)
            .await?
            .filter(|s| s.pid != 0 && s.status == RuntimeState::Running)
            .ok_or_else(|| RuntimeError::NotFound { id: id.to_string() })?
            .pid;
        let range = userns::Record::read(dir).range;
        let volumes = volumes.to_vec();
        tokio::task::spawn_blocking(move || attach_volumes::attach(pid, &volumes, range))
            .await
            .map_err(|e| RuntimeError::Io {
                context: "attach volumes".into(),
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(|source| RuntimeError::Io {
                context: format!("attach volumes to sandbox {id}"),
                source,
            })
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        let freezer = self.freezer(id).await?;
        freezer.freeze(id).await
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        let freezer = self.freezer(id).await?;
        freezer.thaw(id).await
    }

    fn snapshot_artifacts(&self) -> &'static [ArtifactSpec] {
        snapshot::ARTIFACTS
    }

    fn memory_artifacts(&self) -> &'static [ArtifactSpec] {
        if self.runc.is_runsc() {
            gvisor_memory::ARTIFACTS
        } else {
            &[]
        }
    }

    async fn checkpoint_memory(&self, id: &str, dir: &Path) -> Result<bool, RuntimeError> {
        if !self.runc.is_runsc() {
            return Ok(false);
        }
        layout::validate_id(id)?;
        let freezer = self.freezer(id).await?;
        gvisor_memory::checkpoint(&self.runc, id, &layout::Layout::new(dir), &freezer).await
    }

    async fn checkpoint_memory_live(&self, id: &str, dir: &Path) -> Result<bool, RuntimeError> {
        if !self.runc.is_runsc() {
            return Ok(false);
        }
        layout::validate_id(id)?;
        let layout = layout::Layout::new(dir);
        if gvisor_memory::has_network(&layout) {
            return Ok(false);
        }
        // Without its spec (an adopted sandbox) a sandbox that a failed checkpoint stopped
        // could not be started again: such a sandbox keeps files-only checkpoints.
        let Some(spec) = self.specs.lock().get(id).cloned() else {
            return Ok(false);
        };
        let freezer = self.freezer(id).await?;
        if gvisor_memory::checkpoint(&self.runc, id, &layout, &freezer).await? {
            // The stopped container goes while the artifacts are saved (it touches neither the
            // files nor the run dir); `undo_checkpoint` waits for it.
            let runc = self.runc.clone();
            let stopped = id.to_string();
            let task = tokio::spawn(async move { runc.delete_force(&stopped).await });
            self.deleting.lock().insert(id.to_string(), task);
            return Ok(true);
        }
        let live = matches!(
            self.runc.state(id).await?.map(|s| s.status),
            Some(RuntimeState::Running | RuntimeState::Paused)
        );
        if !live {
            // The failed checkpoint stopped the sandbox: it starts again on its files, paused
            // for the files-only checkpoint.
            self.restart(&spec).await?;
            self.pause(id).await?;
        }
        Ok(false)
    }

    async fn undo_checkpoint(&self, id: &str, dir: &Path) -> Result<(), RuntimeError> {
        layout::validate_id(id)?;
        let layout = layout::Layout::new(dir);
        if !self.runc.is_runsc() || !gvisor_memory::pending(&layout) {
            return Err(RuntimeError::Unavailable(format!(
                "sandbox {id} has no memory checkpoint to carry on from"
            )));
        }
        self.finish_delete(id).await;
        match gvisor_memory::restore_in_place(&self.runc, id, &layout).await {
            Ok(pid) => {
                self.lock_freezers().remove(id);
                self.learn_freezer(id, pid);
                Ok(())
            }
            Err(error) => {
                let spec = self.specs.lock().get(id).cloned();
                let Some(spec) = spec else { return Err(error) };
                tracing::warn!(sandbox_id = %id, %error,
                    "cannot carry on from the memory checkpoint: starting from the files");
                self.restart(&spec).await
            }
        }
    }

    async fn save_artifact(
        &self,
        id: &str,
        dir: &Path,
        name: &str,
        out: ArtifactWriter,
    ) -> Result<u64, RuntimeError> {
        layout::validate_id(id)?;
        if self.memory_artifacts().iter().any(|a| a.name == name) {
            return gvisor_memory::save(id, dir, name, out).await;
        }
        snapshot::save(dir, name, out).await
    }

    async fn load_artifact(
        &self,
        dir: &Path,
        name: &str,
        input: ArtifactReader,
    ) -> Result<u64, RuntimeError> {
        if self.memory_artifacts().iter().any(|a| a.name == name) {
            return gvisor_memory::load(dir, name, input).await;
        }
        snapshot::load(dir, name, input).await
    }

    async fn check_artifact(&self, name: &str, input: ArtifactReader) -> Result<u64, RuntimeError> {
        if gvisor_memory::ARTIFACTS.iter().any(|a| a.name == name) {
            return Err(gvisor_memory::refuse_import(name));
        }
        snapshot::check_artifact(name, input).await
    }

    async fn stop(&self, id: &str, dir: &Path) -> Result<(), RuntimeError> {
        self.finish_delete(id).await;
        let tracked = self.lock_freezers().get(id).cloned();
        stop::stop(
            &self.runc,
            id,
            dir,
            tracked.as_ref(),
            self.userns.as_deref(),
        )
        .await?;
        self.lock_freezers().remove(id);
        self.specs.lock().remove(id);
        Ok(())
    }

    async fn list(&self) -> Result<Vec<String>, RuntimeError> {
        self.runc.list().await
    }

    async fn cgroup_paths(&self, id: &str) -> Result<Vec<(String, PathBuf)>, RuntimeError> {
        let state = self
            .runc
            .state(id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound { id: id.to_string() })?;
        if state.pid == 0 {
            return Err(RuntimeError::Command {
                op: "cgroup_paths",
                id: id.to_string(),
                detail: "sandbox has no running init process".to_string(),
            });
        }
        tokio::task::spawn_blocking(move || cgroups::paths_of_pid(state.pid))
            .await
            .map_err(join_error)?
    }
    async fn disk_usage(&self, _id: &str, dir: &Path) -> Result<crate::DiskUsage, RuntimeError> {
        let layout = layout::Layout::new(dir);
        tokio::task::spawn_blocking(move || disk::usage(&layout))
            .await
            .map_err(join_error)?
    }
}

/// A panicked or cancelled `spawn_blocking` task as an I/O error.
fn join_error(e: tokio::task::JoinError) -> RuntimeError {
    RuntimeError::Io {
        context: "blocking task failed".to_string(),
        source: std::io::Error::other(e),
    }
}
