//! Sandbox lifecycle on the node: start, adopt, pause, resume, suspend to the snapshot store,
//! wake from it, release, destroy.

use async_trait::async_trait;
use cove_node_api::{AgentHealth, NodeCapabilities, RepairInfo, SuspendInfo, WakeInfo};

use super::*;
use cove_runtime::Adopted;

use crate::snapshot::{Manifest, ManifestArtifact, SnapshotError, SnapshotStore, MANIFEST_VERSION};

#[async_trait]
impl NodeLifecycle for NodeAgent {
    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError> {
        self.launch(&launch, None, false).await.map(drop)
    }

    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        let adopted = self
            .runtime
            .adopt(id, &self.sandbox_dir(id))
            .await
            .map_err(runtime_err)?;
        let Some(Adopted { state, guest }) = adopted else {
            return Ok(None);
        };
        if self.network_lost(id) {
            // Its processes stay in a namespace the gateway no longer serves.
            warn!(sandbox_id = %id, "not adopting a sandbox whose network is gone");
            return Ok(Some(NodeSandboxState::Stopped));
        }
        match state {
            RuntimeState::Running => {
                let client = GuestClient::new(guest);
                match client.connect(Duration::from_secs(5)).await {
                    Ok(()) => {
                        self.set_guest(id, Some(client));
                        Ok(Some(NodeSandboxState::Running))
                    }
                    Err(_) => Ok(Some(NodeSandboxState::Stopped)),
                }
            }
            RuntimeState::Paused => {
                // The client connects lazily once the sandbox is resumed.
                self.set_guest(id, Some(GuestClient::new(guest)));
                Ok(Some(NodeSandboxState::Paused))
            }
            RuntimeState::Created | RuntimeState::Stopped => Ok(Some(NodeSandboxState::Stopped)),
        }
    }

    async fn inspect_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        Ok(match self.runtime.state(id).await.map_err(runtime_err)? {
            None => None,
            Some(RuntimeState::Running) => Some(NodeSandboxState::Running),
            Some(RuntimeState::Paused) => Some(NodeSandboxState::Paused),
            Some(_) => Some(NodeSandboxState::Stopped),
        })
    }

    async fn failure_reason(&self, id: &str) -> Option<String> {
        self.runtime.failure(id, &self.sandbox_dir(id)).await
    }

    async fn check_agent(&self, id: &str, timeout: Duration) -> Result<AgentHealth, NodeError> {
        self.check_agent_now(id, timeout).await
    }

    async fn repair_sandbox(&self, launch: SandboxLaunch) -> Result<RepairInfo, NodeError> {
        self.repair_now(&launch).await
    }

    async fn pause_sandbox(&self, id: &str) -> Result<(), NodeError> {
        match self.runtime.state(id).await.map_err(runtime_err)? {
            None => Err(NodeError::SandboxNotFound(id.to_string())),
            Some(RuntimeState::Paused) => Ok(()),
            Some(RuntimeState::Running) => {
                self.runtime.pause(id).await.map_err(runtime_err)?;
                info!(sandbox_id = %id, "sandbox paused");
                Ok(())
            }
            Some(other) => Err(NodeError::Runtime(format!(
                "cannot pause a sandbox that is {other:?}"
            ))),
        }
    }

    async fn resume_sandbox(&self, id: &str) -> Result<(), NodeError> {
        match self.runtime.state(id).await.map_err(runtime_err)? {
            None => Err(NodeError::SandboxNotFound(id.to_string())),
            Some(RuntimeState::Running) => Ok(()),
            Some(RuntimeState::Paused) => {
                self.runtime.resume(id).await.map_err(runtime_err)?;
                info!(sandbox_id = %id, "sandbox resumed");
                Ok(())
            }
            Some(other) => Err(NodeError::Runtime(format!(
                "cannot resume a sandbox that is {other:?}"
            ))),
        }
    }

    async fn suspend_sandbox(
        &self,
        id: &str,
        cancel: CancellationToken,
    ) -> Result<SuspendInfo, NodeError> {
        let was_running = match self.runtime.state(id).await.map_err(runtime_err)? {
            None => return Err(NodeError::SandboxNotFound(id.to_string())),
            Some(RuntimeState::Running) => true,
            Some(RuntimeState::Paused) => false,
            Some(other) => {
                return Err(NodeError::Runtime(format!(
                    "cannot suspend a sandbox that is {other:?}"
                )))
            }
        };
        // Frozen processes cannot change the files while they are saved.
        if was_running {
            self.runtime.pause(id).await.map_err(runtime_err)?;
        }
        // A runtime that keeps memory by stopping the sandbox (gVisor) does it now; when it
        // cannot, the sandbox is as before (or stopped by a failed try) and its files are saved.
        let dir = self.sandbox_dir(id);
        let memory = self
            .runtime
            .checkpoint_memory(id, &dir)
            .await
            .map_err(runtime_err)?;
        let extra = if memory {
            self.runtime.memory_artifacts()
        } else {
            &[]
        };
        match self
            .save_snapshot_with(
                &self.cfg.snapshots,
                id,
                id,
                self.net_counters(id),
                extra,
                &cancel,
            )
            .await
        {
            Ok(file_bytes) => {
                self.release_sandbox(id).await?;
                info!(sandbox_id = %id, file_bytes, memory, "sandbox suspended");
                Ok(SuspendInfo { file_bytes })
            }
            Err(e) if memory => {
                warn!(sandbox_id = %id, error = %e,
                    "suspend failed after the memory checkpoint, carrying on from it");
                if let Err(undo) = self.runtime.undo_checkpoint(id, &dir).await {
                    warn!(sandbox_id = %id, error = %undo,
                        "cannot carry on after a failed suspend");
                }
                Err(snapshot_err(e))
            }
            Err(e) => {
                warn!(sandbox_id = %id, error = %e, "suspend failed, thawing the sandbox");
                if was_running {
                    if let Err(thaw) = self.runtime.resume(id).await {
                        warn!(sandbox_id = %id, error = %thaw, "cannot thaw after a failed suspend");
                    }
                }
                Err(snapshot_err(e))
            }
        }
    }

    async fn wake_sandbox(
        &self,
        launch: SandboxLaunch,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        let store = self.cfg.snapshots.clone();
        let woken = self
            .restore_and_launch(&store, &launch.id, &launch, &cancel)
            .await?;
        info!(sandbox_id = %launch.id, file_bytes = woken.file_bytes,
            memory_restored = woken.memory_restored, "sandbox woken");
        Ok(woken)
    }

    async fn release_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.set_guest(id, None);
        let dir = self.sandbox_dir(id);
        self.runtime.stop(id, &dir).await.map_err(runtime_err)?;
        Self::remove_tree(&dir).await?;
        // After the processes: nothing runs in the namespace any more.
        self.detach_network(id).await
    }

    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.release_sandbox(id).await?;
        self.cfg.snapshots.delete(id).await.map_err(snapshot_err)
    }

    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError> {
        let mut ids: std::collections::BTreeSet<String> = self
            .runtime
            .list()
            .await
            .map_err(runtime_err)?
            .into_iter()
            .collect();
        let dir = self.cfg.data_dir.join("sandboxes");
        let io = |e: std::io::Error| NodeError::Internal(format!("list {}: {e}", dir.display()));
        match tokio::fs::read_dir(&dir).await {
            Ok(mut entries) => {
                while let Some(entry) = entries.next_entry().await.map_err(io)? {
                    if let Some(name) = entry.file_name().to_str() {
                        ids.insert(name.to_string());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        // A file build's `RUN` sandboxes are the build's own, not the control plane's: listed,
        // a reconciliation would take one for an orphan and destroy it mid-step.
        ids.retain(|id| !id.starts_with(super::builds::BUILD_SANDBOX_PREFIX));
        Ok(ids.into_iter().collect())
    }

    async fn has_snapshot(&self, id: &str) -> Result<bool, NodeError> {
        self.cfg.snapshots.exists(id).await.map_err(snapshot_err)
    }

    async fn delete_snapshot(&self, id: &str) -> Result<(), NodeError> {
        self.cfg.snapshots.delete(id).await.map_err(snapshot_err)
    }

    async fn list_snapshots(&self) -> Result<Vec<String>, NodeError> {
        self.cfg.snapshots.list().await.map_err(snapshot_err)
    }

    async fn sweep_snapshots(&self) -> Result<u64, NodeError> {
        let checkpoints = self.cfg.snapshots.checkpoints();
        let (a, b) = futures::join!(
            self.cfg.snapshots.sweep_staging(),
            checkpoints.sweep_staging()
        );
        let imports = self.sweep_imports().await?;
        Ok(a.map_err(snapshot_err)? + b.map_err(snapshot_err)? + imports)
    }

    fn capabilities(&self) -> NodeCapabilities {
        let caps = self.runtime.capabilities();
        NodeCapabilities {
            runtime: self.runtime.kind().as_str().to_string(),
            boundary: self.runtime.kind().boundary().to_string(),
            pause: caps.pause,
            // gVisor keeps memory for sandboxes without a network: every sandbox of a node
            // without sandbox networks.
            suspend_memory: caps.suspend_memory
                || (caps.suspend_memory_without_network && !self.network_enabled()),
            snapshot_store: self.cfg.snapshots.kind().to_string(),
            network: self.network_enabled(),
            user_namespaces: caps.user_namespaces,
            volumes: caps.volumes,
            attach_volumes: caps.volumes && self.runtime.kind() == cove_runtime::RuntimeKind::Runc,
        }
    }
}

impl NodeAgent {
    /// Starts the sandbox of `launch` on its (possibly pre-filled) directory and connects to its
    /// guest agent; its network counters start from `counters` (carried over) when given. On
    /// failure the runtime's resources are released; a directory this call did not fill is
    /// removed by the runtime, a pre-filled one by the caller, unless `keep_files` (a repair:
    /// the directory holds the sandbox's own files and stays for another try). Returns whether
    /// the runtime restored process memory (a VM woken from its saved state).
    pub(super) async fn launch(
        &self,
        launch: &SandboxLaunch,
        counters: Option<cove_node_api::NetworkCounters>,
        keep_files: bool,
    ) -> Result<bool, NodeError> {
        let rootfs = self
            .release_dir(&launch.template, launch.release)
            .join("rootfs");
        if tokio::fs::metadata(&rootfs).await.is_err() {
            match &launch.release_digest {
                Some(digest) => {
                    self.fetch_release(&launch.template, launch.release, digest)
                        .await?
                }
                None => {
                    return Err(NodeError::ReleaseNotFound(format!(
                        "release {} of {} is not on this node",
                        launch.release, launch.template
                    )))
                }
            }
        }
        let dir = self.sandbox_dir(&launch.id);
        let volumes = self.volume_binds(&launch.volumes).await?;
        let network = self.attach_network(launch, counters).await?;
        let spec = SandboxSpec {
            id: launch.id.clone(),
            rootfs,
            dir: dir.clone(),
            guest_agent: self.cfg.guest_agent.clone(),
            guest_agent_args: self.cfg.command_output.agent_args(),
            hostname: launch.id.clone(),
            resources: launch.resources,
            network,
            volumes,
        };
        let started = match self.runtime.start(&spec).await {
            Ok(s) => s,
            Err(e) => {
                if !keep_files {
                    let _ = Self::remove_tree(&dir).await;
                }
                let _ = self.detach_network(&launch.id).await;
                return Err(runtime_err(e));
            }
        };
        let client = GuestClient::new(started.guest);
        if let Err(e) = client.connect(AGENT_CONNECT_TIMEOUT).await {
            warn!(sandbox_id = %launch.id, error = %e, "guest agent did not answer");
            let _ = self.runtime.stop(&launch.id, &dir).await;
            if !keep_files {
                let _ = Self::remove_tree(&dir).await;
            }
            let _ = self.detach_network(&launch.id).await;
            return Err(NodeError::AgentUnavailable(e.to_string()));
        }
        self.set_guest(&launch.id, Some(client));
        info!(sandbox_id = %launch.id, init_pid = started.init_pid,
            memory_restored = started.memory_restored, "sandbox running");
        Ok(started.memory_restored)
    }
}

impl NodeAgent {
    /// Replaces whatever the node has of sandbox `launch.id` with snapshot `key` of `store`
    /// and starts it. On failure or cancellation nothing of the sandbox is left on the node.
    pub(super) async fn restore_and_launch(
        &self,
        store: &SnapshotStore,
        key: &str,
        launch: &SandboxLaunch,
        cancel: &CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        // A rollback keeps counting from what the sandbox counted so far.
        let carried = self.net_counters(&launch.id);
        // Leftovers of an interrupted wake go first; the snapshot is the source of truth.
        self.release_sandbox(&launch.id).await?;
        let dir = self.sandbox_dir(&launch.id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", dir.display())))?;
        let (restored, counted) = match self.restore_snapshot(store, key, &launch.id, cancel).await
        {
            Ok(r) => r,
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                return Err(snapshot_err(e));
            }
        };
        if cancel.is_cancelled() {
            let _ = Self::remove_tree(&dir).await;
            return Err(NodeError::Cancelled);
        }
        let memory_restored = match self.launch(launch, carried.or(counted), false).await {
            Ok(m) => m,
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                return Err(e);
            }
        };
        // The snapshot may hold memory while the runtime still had to boot afresh (a failed
        // restore falls back to a cold boot): report what happened.
        Ok(WakeInfo {
            memory_restored,
            file_bytes: restored.file_bytes,
        })
    }

    /// Saves every artifact of the (frozen or checkpointed) sandbox `id` into `store` under
    /// `key` (the sandbox id for a suspend, a checkpoint id in the checkpoints' store): the
    /// runtime's own, then `extra` (the memory artifacts of a sandbox whose memory the runtime
    /// checkpointed), then the manifest (with `network_counters`, a suspend's); returns the
    /// file bytes saved. On failure nothing of the snapshot is kept.
    pub(super) async fn save_snapshot_with(
        &self,
        store: &SnapshotStore,
        key: &str,
        id: &str,
        network_counters: Option<cove_node_api::NetworkCounters>,
        extra: &[cove_runtime::ArtifactSpec],
        cancel: &CancellationToken,
    ) -> Result<u64, SnapshotError> {
        store.delete(key).await?;
        let dir = self.sandbox_dir(id);
        let mut manifest = Manifest {
            version: MANIFEST_VERSION,
            runtime: self.runtime.kind().as_str().to_string(),
            memory: false,
            artifacts: Vec::new(),
            network_counters,
        };
        let mut file_bytes = 0;
        let saved: Result<(), SnapshotError> = async {
            for artifact in self.runtime.snapshot_artifacts().iter().chain(extra) {
                let runtime = &self.runtime;
                let dir = &dir;
                let content_bytes = store
                    .save_artifact(key, artifact.name, cancel, |out| async move {
                        runtime
                            .save_artifact(id, dir, artifact.name, Box::new(out))
                            .await
                            .map_err(std::io::Error::other)
                    })
                    .await?;
                manifest.memory |= artifact.memory;
                if !artifact.memory {
                    file_bytes += content_bytes;
                }
                manifest.artifacts.push(ManifestArtifact {
                    name: artifact.name.to_string(),
                    content_bytes,
                });
            }
            store.commit(key, &manifest).await
        }
        .await;
        if let Err(e) = saved {
            if let Err(cleanup) = store.delete(key).await {
                warn!(sandbox_id = %id, error = %cleanup, "cannot remove a partial snapshot");
            }
            return Err(e);
        }
        Ok(file_bytes)
    }

    /// Loads every artifact of the snapshot `key` of `store` into the (empty) directory of
    /// sandbox `id`; also returns the network counters the snapshot carries.
    pub(super) async fn restore_snapshot(
        &self,
        store: &SnapshotStore,
        key: &str,
        id: &str,
        cancel: &CancellationToken,
    ) -> Result<(WakeInfo, Option<cove_node_api::NetworkCounters>), SnapshotError> {
        let manifest = store.manifest(key).await?;
        let kind = self.runtime.kind().as_str();
        if manifest.runtime != kind {
            return Err(SnapshotError::Corrupt {
                id: key.to_string(),
                reason: format!(
                    "taken by runtime {}, this node runs {kind}",
                    manifest.runtime
                ),
            });
        }
        let dir = self.sandbox_dir(id);
        let mut file_bytes = 0;
        for artifact in &manifest.artifacts {
            let runtime = &self.runtime;
            let dir = &dir;
            let name = artifact.name.as_str();
            let restored = store
                .restore_artifact(key, name, cancel, |input| async move {
                    runtime
                        .load_artifact(dir, name, Box::new(input))
                        .await
                        .map_err(|e| match e {
                            // Keep the kind: bad data is a damaged snapshot, not a node fault.
                            cove_runtime::RuntimeError::Io { context, source } => {
                                std::io::Error::new(source.kind(), format!("{context}: {source}"))
                            }
                            other => std::io::Error::other(other),
                        })
                })
                .await?;
            let memory = self
                .runtime
                .snapshot_artifacts()
                .iter()
                .chain(self.runtime.memory_artifacts())
                .any(|a| a.name == name && a.memory);
            if !memory {
                file_bytes += restored;
            }
        }
        Ok((
            WakeInfo {
                memory_restored: manifest.memory,
                file_bytes,
            },
            manifest.network_counters,
        ))
    }
}

pub(super) fn snapshot_err(e: SnapshotError) -> NodeError {
    match e {
        SnapshotError::Cancelled => NodeError::Cancelled,
        e @ SnapshotError::Corrupt { .. } => NodeError::SnapshotCorrupt(e.to_string()),
        // An artifact the runtime could not read back (bad tar framing, a refused entry, a
        // truncated stream).
        SnapshotError::Io(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            NodeError::SnapshotCorrupt(format!("snapshot files cannot be read back: {e}"))
        }
        SnapshotError::Io(e)
            if e.kind() == std::io::ErrorKind::StorageFull
                || e.raw_os_error() == Some(libc::ENOSPC) =>
        {
            warn!(error = %e, "the snapshot store's disk is full");
            NodeError::NoSpace("the node's disk is full".into())
        }
        other => NodeError::Internal(other.to_string()),
    }
}
