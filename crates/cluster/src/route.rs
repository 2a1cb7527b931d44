//! The [`NodeApi`] of a [`Cluster`]: creates and wakes are placed by the scheduler (on the
//! volumes' node for a sandbox that mounts any), every other sandbox call goes to the node that
//! holds the sandbox, snapshot calls to any reachable node (the snapshot store is shared), and
//! node-wide calls to every node. Volume calls are not routed here (see `volumes.rs`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use cove_domain::EgressPolicy;
use cove_node_api::{
    AttachEvent, BuildEvent, BuiltRelease, ByteStream, CommandInfo, FileEvent, FileInfo,
    LaunchSecret, NetworkDenied, NodeCapabilities, NodeCapacity, NodeCommands, NodeError,
    NodeFiles, NodeLifecycle, NodeMetrics, NodeNetwork, NodeReleases, NodeSandboxState,
    PortRequest, PortResponse, PtySize, RecipeInfo, ReleaseRef, SandboxLaunch, SandboxMetrics,
    SandboxNetworkInfo, SandboxPath, SetXattrsRequest, SpawnRequest, SuspendInfo, WakeInfo,
    WatchRequest, WriteFileRequest, XattrsRequest,
};
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Cluster, NODE_LOST};

/// How often a call in flight looks whether its node was declared lost meanwhile.
const LOST_POLL: std::time::Duration = std::time::Duration::from_millis(100);

#[async_trait]
impl NodeReleases for Cluster {
    fn recipes(&self) -> Vec<RecipeInfo> {
        self.first_recipes()
    }

    /// Builds on every reachable node (each holds its own release cache); the first node's
    /// events are forwarded. Fails, removing the release everywhere, when any build fails.
    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltRelease, NodeError> {
        let nodes = self.reachable();
        if nodes.is_empty() {
            return Err(NodeError::NoNodeAvailable("no node is reachable".into()));
        }
        let builds = nodes.iter().enumerate().map(|(i, (_, api))| {
            let tx = events_of(i, &events);
            api.build_release(template, number, no_cache, tx, cancel.clone())
        });
        let results = futures::future::join_all(builds).await;
        let mut first = None;
        let mut failed = None;
        for (r, (name, _)) in results.into_iter().zip(&nodes) {
            match r {
                Ok(b) => {
                    first.get_or_insert(b);
                }
                Err(e) => {
                    warn!(node = %name, template, number, error = %e, "release build failed on a node");
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            for (_, api) in &nodes {
                let _ = api.remove_release(template, number).await;
            }
            return Err(e);
        }
        let built = first.ok_or_else(|| NodeError::Internal("no node built the release".into()))?;
        let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
        self.note_release(&names, template, number);
        self.record_reports(&names).await;
        Ok(built)
    }

    /// Built on one node: the first reachable one (the server's own first) that can build
    /// from a file; the others fetch the release from the shared snapshot store when a
    /// sandbox of it is placed on them (the builder keeps it there, see the node agent's
    /// `release_store`). A node that cannot build (`Unsupported`: a VM runtime) is skipped;
    /// when none can, that error is the answer.
    async fn build_file_release(
        &self,
        template: &str,
        number: u32,
        build: cove_node_api::FileBuild,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<cove_node_api::BuiltFileRelease, NodeError> {
        let nodes = self.reachable();
        let mut last = NodeError::NoNodeAvailable("no node is reachable".into());
        for (name, api) in &nodes {
            match api
                .build_file_release(
                    template,
                    number,
                    build.clone(),
                    events.clone(),
                    cancel.clone(),
                )
                .await
            {
                Ok(built) => {
                    info!(node = %name, template, number, "file release built");
                    self.note_release(&[name.as_str()], template, number);
                    self.record_reports(&[name.as_str()]).await;
                    return Ok(built);
                }
                Err(NodeError::Unsupported(m)) => {
                    last = NodeError::Unsupported(m);
                }
                // Another node may have an import directory.
                Err(NodeError::OciImportDisabled) => {
                    last = NodeError::OciImportDisabled;
                }
                Err(e) => {
                    warn!(node = %name, template, number, error = %e, "file build failed on a node");
                    let _ = api.remove_release(template, number).await;
                    return Err(e);
                }
            }
        }
        Err(last)
    }

    async fn cached_releases(&self) -> Result<Vec<ReleaseRef>, NodeError> {
        let mut all = Vec::new();
        for (_, api) in self.reachable() {
            if let Ok(r) = api.cached_releases().await {
                all.extend(r);
            }
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// The snapshot store is shared: any reachable node removes the copy.
    async fn remove_stored_release(&self, digest: &str) -> Result<(), NodeError> {
        self.snapshot_node()?.remove_stored_release(digest).await
    }

    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError> {
        let mut result = Ok(());
        for (_, api) in self.reachable() {
            if let Err(e) = api.remove_release(template, number).await {
                result = Err(e);
            }
        }
        result
    }
}

#[async_trait]
impl NodeLifecycle for Cluster {
    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError> {
        let id = launch.id.clone();
        let (node, api) = self.place_fresh(&launch).await?;
        info!(sandbox_id = %id, node = %node, "sandbox placed");
        self.save_placement(&id).await;
        let result = api.start_sandbox(launch).await;
        self.placed_result(&id, &node, &result);
        self.record_placed(&id, &node, result.is_ok()).await;
        result
    }

    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        match self.api_for(id).await {
            Ok(api) => api.adopt_sandbox(id).await,
            Err(NodeError::SandboxNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A sandbox on a lost node reads as gone (`None`), so reconciliation fails it with
    /// [`Cluster::failure_reason`] `node_lost`.
    async fn inspect_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        if self.on_lost_node(id).is_some() {
            return Ok(None);
        }
        match self.api_for(id).await {
            Ok(api) => api.inspect_sandbox(id).await,
            Err(NodeError::SandboxNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn failure_reason(&self, id: &str) -> Option<String> {
        if let Some(node) = self.on_lost_node(id) {
            return Some(format!(
                "{NODE_LOST}: node {node} stopped sending heartbeats"
            ));
        }
        match self.api_for(id).await {
            Ok(api) => api.failure_reason(id).await,
            Err(_) => None,
        }
    }

    /// A sandbox on a lost node is `SandboxNotFound`: reconciliation settles it, not a repair.
    /// A check in flight when its node is declared lost (its link cut: the call would wait
    /// for its whole deadline, holding the sandbox's lifecycle lock) gives up at once with
    /// `NodeUnreachable`, so reconciliation can fail the sandbox `node_lost` on time.
    async fn check_agent(
        &self,
        id: &str,
        timeout: std::time::Duration,
    ) -> Result<cove_node_api::AgentHealth, NodeError> {
        if self.on_lost_node(id).is_some() {
            return Err(NodeError::SandboxNotFound(id.to_string()));
        }
        let api = self.api_for(id).await?;
        let check = api.check_agent(id, timeout);
        tokio::pin!(check);
        loop {
            tokio::select! {
                result = &mut check => return result,
                () = tokio::time::sleep(LOST_POLL) => {
                    if let Some(node) = self.on_lost_node(id) {
                        return Err(NodeError::NodeUnreachable(format!("node {node} is lost")));
                    }
                }
            }
        }
    }

    /// Repaired on the node that holds its files.
    async fn repair_sandbox(
        &self,
        launch: SandboxLaunch,
    ) -> Result<cove_node_api::RepairInfo, NodeError> {
        self.api_for(&launch.id).await?.repair_sandbox(launch).await
    }

    async fn pause_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.api_for(id).await?.pause_sandbox(id).await
    }

    async fn resume_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.api_for(id).await?.resume_sandbox(id).await
    }

    async fn suspend_sandbox(
        &self,
        id: &str,
        cancel: CancellationToken,
    ) -> Result<SuspendInfo, NodeError> {
        self.api_for(id).await?.suspend_sandbox(id, cancel).await
    }

    /// Placed like a create: any node reaches the shared snapshot store (a sandbox that
    /// mounts volumes wakes only on their node).
    async fn wake_sandbox(
        &self,
        launch: SandboxLaunch,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        let id = launch.id.clone();
        let (node, api) = self.place_fresh(&launch).await?;
        info!(sandbox_id = %id, node = %node, "waking sandbox placed");
        self.save_placement(&id).await;
        let result = api.wake_sandbox(launch, cancel).await;
        self.placed_result(&id, &node, &result);
        self.record_placed(&id, &node, result.is_ok()).await;
        result
    }

    async fn release_sandbox(&self, id: &str) -> Result<(), NodeError> {
        match self.api_for(id).await {
            Ok(api) => api.release_sandbox(id).await?,
            Err(NodeError::SandboxNotFound(_)) => {}
            Err(e) => return Err(e),
        }
        self.unplace(id);
        self.drop_placement(id).await;
        Ok(())
    }

    /// On a lost node only the snapshot is deleted and the placement forgotten; the node
    /// removes the rest when it returns (reconciliation of what it reports).
    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError> {
        let lost = self.on_lost_node(id).is_some();
        match self.api_for(id).await {
            Ok(api) if !lost => api.destroy_sandbox(id).await?,
            _ => self.snapshot_node()?.delete_snapshot(id).await?,
        }
        self.unplace(id);
        self.drop_placement(id).await;
        Ok(())
    }

    /// Every sandbox of every reachable node (a node that does not answer is left out, so
    /// nothing of it is decided on).
    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError> {
        let mut all = Vec::new();
        for (name, api) in self.reachable() {
            match api.list_sandboxes().await {
                Ok(ids) => all.extend(ids),
                Err(e) => warn!(node = %name, error = %e, "cannot list sandboxes of a node"),
            }
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    async fn has_snapshot(&self, id: &str) -> Result<bool, NodeError> {
        self.snapshot_node()?.has_snapshot(id).await
    }

    async fn delete_snapshot(&self, id: &str) -> Result<(), NodeError> {
        self.snapshot_node()?.delete_snapshot(id).await
    }

    async fn list_snapshots(&self) -> Result<Vec<String>, NodeError> {
        self.snapshot_node()?.list_snapshots().await
    }

    async fn sweep_snapshots(&self) -> Result<u64, NodeError> {
        self.snapshot_node()?.sweep_snapshots().await
    }

    fn capabilities(&self) -> NodeCapabilities {
        self.first_capabilities()
    }
}

#[async_trait]
impl NodeCommands for Cluster {
    async fn spawn(&self, sandbox_id: &str, req: SpawnRequest) -> Result<CommandInfo, NodeError> {
        self.api_for(sandbox_id).await?.spawn(sandbox_id, req).await
    }

    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .command(sandbox_id, command_id)
            .await
    }

    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError> {
        self.api_for(sandbox_id).await?.commands(sandbox_id).await
    }

    async fn signal(
        &self,
        sandbox_id: &str,
        command_id: &str,
        signal: i32,
    ) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .signal(sandbox_id, command_id, signal)
            .await
    }

    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        grace_ms: u64,
    ) -> Result<CommandInfo, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .kill(sandbox_id, command_id, grace_ms)
            .await
    }

    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
        follow: bool,
    ) -> Result<BoxStream<'static, Result<AttachEvent, NodeError>>, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .attach(sandbox_id, command_id, offset, follow)
            .await
    }

    async fn stdin_write(
        &self,
        sandbox_id: &str,
        command_id: &str,
        data: Bytes,
    ) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .stdin_write(sandbox_id, command_id, data)
            .await
    }

    async fn stdin_close(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .stdin_close(sandbox_id, command_id)
            .await
    }

    async fn resize(
        &self,
        sandbox_id: &str,
        command_id: &str,
        size: PtySize,
    ) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .resize(sandbox_id, command_id, size)
            .await
    }

    async fn forget(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .forget(sandbox_id, command_id)
            .await
    }
}

#[async_trait]
impl NodeFiles for Cluster {
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .write_file(sandbox_id, req, body)
            .await
    }

    async fn read_file(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .read_file(sandbox_id, path, user, offset, length)
            .await
    }

    async fn stat(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .stat(sandbox_id, path, user)
            .await
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .list_dir(sandbox_id, path, user, depth)
            .await
    }

    async fn make_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .make_dir(sandbox_id, path, user)
            .await
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .remove(sandbox_id, path, user)
            .await
    }

    async fn rename(
        &self,
        sandbox_id: &str,
        from: SandboxPath,
        to: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .rename(sandbox_id, from, to, user)
            .await
    }

    async fn set_xattrs(&self, sandbox_id: &str, req: SetXattrsRequest) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .set_xattrs(sandbox_id, req)
            .await
    }

    async fn xattrs(
        &self,
        sandbox_id: &str,
        req: XattrsRequest,
    ) -> Result<Vec<BTreeMap<String, Vec<u8>>>, NodeError> {
        self.api_for(sandbox_id)
            .await?
            .xattrs(sandbox_id, req)
            .await
    }

    async fn watch(
        &self,
        sandbox_id: &str,
        req: WatchRequest,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, NodeError>>, NodeError> {
        self.api_for(sandbox_id).await?.watch(sandbox_id, req).await
    }
}

#[async_trait]
impl NodeMetrics for Cluster {
    /// The sum over every reachable node.
    async fn capacity(&self) -> Result<NodeCapacity, NodeError> {
        let mut sum = NodeCapacity {
            cpus: 0,
            memory_bytes: 0,
            memory_available_bytes: 0,
            sandboxes: 0,
            disk_available_bytes: None,
        };
        for (_, api) in self.reachable() {
            if let Ok(c) = api.capacity().await {
                sum.cpus += c.cpus;
                sum.memory_bytes += c.memory_bytes;
                sum.memory_available_bytes += c.memory_available_bytes;
                sum.sandboxes += c.sandboxes;
                if let Some(free) = c.disk_available_bytes {
                    let before = sum.disk_available_bytes.unwrap_or(0);
                    sum.disk_available_bytes = Some(before.saturating_add(free));
                }
            }
        }
        Ok(sum)
    }

    async fn sandbox_metrics(&self, id: &str) -> Result<SandboxMetrics, NodeError> {
        self.api_for(id).await?.sandbox_metrics(id).await
    }
}

#[async_trait]
impl NodeNetwork for Cluster {
    async fn sandbox_network(&self, id: &str) -> Result<SandboxNetworkInfo, NodeError> {
        self.api_for(id).await?.sandbox_network(id).await
    }

    async fn set_sandbox_network(&self, id: &str, policy: EgressPolicy) -> Result<(), NodeError> {
        self.api_for(id)
            .await?
            .set_sandbox_network(id, policy)
            .await
    }

    async fn rearm_secrets(
        &self,
        id: &str,
        secrets: BTreeMap<String, LaunchSecret>,
    ) -> Result<(), NodeError> {
        self.api_for(id).await?.rearm_secrets(id, secrets).await
    }

    async fn forward_http(
        &self,
        id: &str,
        request: PortRequest,
        body: ByteStream,
    ) -> Result<(PortResponse, ByteStream), NodeError> {
        self.api_for(id)
            .await?
            .forward_http(id, request, body)
            .await
    }

    /// Denials of every node that joined (a slow reader loses the oldest).
    fn network_denials(&self) -> BoxStream<'static, NetworkDenied> {
        let rx = self.denials.subscribe();
        Box::pin(
            tokio_stream::wrappers::BroadcastStream::new(rx)
                .filter_map(|d| futures::future::ready(d.ok())),
        )
    }
}

/// The build events sender for the `i`-th node of a build on several: the caller's for the
/// first, a drained one (events dropped) for the others.
fn events_of(
    i: usize,
    events: &tokio::sync::mpsc::Sender<BuildEvent>,
) -> tokio::sync::mpsc::Sender<BuildEvent> {
    if i == 0 {
        return events.clone();
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    tx
}

/// A volume call names only the volume's id, and a cluster does not keep where volumes are
/// (the store does): the control plane addresses each volume call to the volume's node
/// through [`Placement::volume_node`](crate::Placement::volume_node) instead, and a call made here answers `Unsupported`.
/// Attaching volumes to a running sandbox names the sandbox: it goes to the sandbox's node.
#[async_trait]
impl cove_node_api::NodeVolumes for Cluster {
    async fn attach_volumes(
        &self,
        sandbox_id: &str,
        volumes: Vec<cove_node_api::LaunchVolume>,
    ) -> Result<(), NodeError> {
        self.api_for(sandbox_id)
            .await?
            .attach_volumes(sandbox_id, volumes)
            .await
    }
}
