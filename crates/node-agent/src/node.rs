//! [`NodeAgent`]: the node side of [`NodeApi`], over a [`Runtime`] and each sandbox's guest agent.
//!
//! On disk (under the data dir): `releases/<template>/<n>/rootfs` (read-only by convention) and
//! `sandboxes/<id>/` (owned by the runtime while the sandbox exists).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    AttachEvent, BuildEvent, BuiltRelease, ByteStream, CommandInfo, FileInfo, GuestPath,
    NodeApi, NodeError, NodeSandboxState, RecipeInfo, SandboxLaunch, SpawnRequest,
    WriteFileRequest,
};
use cove_runtime::{Runtime, RuntimeState, SandboxSpec};
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::guest::{self, GuestClient, GuestError};
use crate::template::{self, BuildOptions, Recipe};

/// How long a new sandbox's guest agent has to answer its first hello.
const AGENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Settings of a node agent.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Data dir (releases and sandboxes live below it).
    pub data_dir: PathBuf,
    /// Host path of the static guest agent binary.
    pub guest_agent: PathBuf,
    /// Build cache for release root filesystems (`None` = no cache).
    pub cache_dir: Option<PathBuf>,
    /// Debian mirror for the `base` template (`None` = the builder's default).
    pub mirror: Option<String>,
}

/// The node agent of this host.
pub struct NodeAgent {
    cfg: NodeConfig,
    runtime: Arc<dyn Runtime>,
    guests: Mutex<HashMap<String, GuestClient>>,
}

impl NodeAgent {
    /// A node agent over `runtime`.
    pub fn new(cfg: NodeConfig, runtime: Arc<dyn Runtime>) -> Self {
        NodeAgent { cfg, runtime, guests: Mutex::new(HashMap::new()) }
    }

    fn release_dir(&self, template: &str, number: u32) -> PathBuf {
        self.cfg.data_dir.join("releases").join(template).join(number.to_string())
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.cfg.data_dir.join("sandboxes").join(id)
    }

    fn guest(&self, id: &str) -> Result<GuestClient, NodeError> {
        let guests = self.guests.lock().unwrap_or_else(|p| p.into_inner());
        guests.get(id).cloned().ok_or_else(|| NodeError::SandboxNotFound(id.to_string()))
    }

    fn set_guest(&self, id: &str, client: Option<GuestClient>) {
        let mut guests = self.guests.lock().unwrap_or_else(|p| p.into_inner());
        match client {
            Some(c) => guests.insert(id.to_string(), c),
            None => guests.remove(id),
        };
    }

    async fn remove_tree(path: &Path) -> Result<(), NodeError> {
        match tokio::fs::remove_dir_all(path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(NodeError::Internal(format!("remove {}: {e}", path.display()))),
        }
    }
}

fn recipe_info(r: Recipe) -> RecipeInfo {
    let d = r.defaults();
    let description = match r {
        Recipe::Base => "Debian bookworm with bash, python3, git, curl, sudo; user `user`",
        Recipe::Tiny => "busybox only; seconds to build, for tests and quick checks",
    };
    RecipeInfo {
        name: r.name().to_string(),
        description: description.to_string(),
        user: d.user,
        workdir: d.workdir,
        env: d.env,
        recipe_hash: r.recipe_hash(),
    }
}

fn guest_err(e: GuestError) -> NodeError {
    match e {
        GuestError::Guest { code, message } => NodeError::Guest { code, message },
        GuestError::Unavailable(m) => NodeError::AgentUnavailable(m),
        GuestError::Protocol(m) => NodeError::AgentUnavailable(format!("protocol error: {m}")),
        GuestError::Timeout => NodeError::AgentUnavailable("no answer in time".into()),
    }
}

fn runtime_err(e: cove_runtime::RuntimeError) -> NodeError {
    NodeError::Runtime(e.to_string())
}

#[async_trait]
impl NodeApi for NodeAgent {
    fn recipes(&self) -> Vec<RecipeInfo> {
        [Recipe::Base, Recipe::Tiny].into_iter().map(recipe_info).collect()
    }

    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltRelease, NodeError> {
        let recipe = Recipe::for_template(template)
            .ok_or_else(|| NodeError::ReleaseNotFound(format!("no recipe for {template}")))?;
        let dir = self.release_dir(template, number);
        Self::remove_tree(&dir).await?;
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", dir.display())))?;
        let opts = BuildOptions {
            cache_dir: if no_cache { None } else { self.cfg.cache_dir.clone() },
            mirror: self.cfg.mirror.clone(),
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(256);
        let forward = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let ev = match ev {
                    template::BuildEvent::Log(l) => BuildEvent::Log(l),
                    template::BuildEvent::Progress { percent, phase } => {
                        BuildEvent::Progress { percent, phase }
                    }
                };
                if events.send(ev).await.is_err() {
                    break;
                }
            }
        });
        let result = template::build_rootfs(recipe, &dir.join("rootfs"), &opts, tx, cancel).await;
        let _ = forward.await;
        match result {
            Ok(built) => {
                info!(template, number, size = built.size_bytes, cached = built.from_cache,
                    "release built");
                Ok(BuiltRelease { size_bytes: built.size_bytes, from_cache: built.from_cache })
            }
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                Err(match e {
                    template::BuildError::Cancelled => NodeError::Cancelled,
                    other => NodeError::Build(other.to_string()),
                })
            }
        }
    }

    async fn has_release(&self, template: &str, number: u32) -> bool {
        tokio::fs::metadata(self.release_dir(template, number).join("rootfs")).await.is_ok()
    }

    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError> {
        Self::remove_tree(&self.release_dir(template, number)).await
    }

    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError> {
        let rootfs = self.release_dir(&launch.template, launch.release).join("rootfs");
        if tokio::fs::metadata(&rootfs).await.is_err() {
            return Err(NodeError::ReleaseNotFound(format!(
                "release {} of {} is not on this node",
                launch.release, launch.template
            )));
        }
        let dir = self.sandbox_dir(&launch.id);
        let spec = SandboxSpec {
            id: launch.id.clone(),
            rootfs,
            dir: dir.clone(),
            guest_agent: self.cfg.guest_agent.clone(),
            guest_agent_args: Vec::new(),
            hostname: launch.id.clone(),
            vcpus: launch.vcpus,
            memory_mib: launch.memory_mib,
            pids_max: launch.pids_max,
        };
        let started = match self.runtime.start(&spec).await {
            Ok(s) => s,
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                return Err(runtime_err(e));
            }
        };
        let client = GuestClient::new(started.agent_socket);
        if let Err(e) = client.connect(AGENT_CONNECT_TIMEOUT).await {
            warn!(sandbox_id = %launch.id, error = %e, "guest agent did not answer");
            let _ = self.runtime.stop(&launch.id, &dir).await;
            let _ = Self::remove_tree(&dir).await;
            return Err(guest_err(e));
        }
        self.set_guest(&launch.id, Some(client));
        info!(sandbox_id = %launch.id, init_pid = started.init_pid, "sandbox running");
        Ok(())
    }

    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        let state = self.runtime.state(id).await.map_err(runtime_err)?;
        let socket = self.sandbox_dir(id).join("run").join("agent.sock");
        match state {
            None => Ok(None),
            Some(RuntimeState::Running) => {
                let client = GuestClient::new(socket);
                match client.connect(Duration::from_secs(5)).await {
                    Ok(()) => {
                        self.set_guest(id, Some(client));
                        Ok(Some(NodeSandboxState::Running))
                    }
                    Err(_) => Ok(Some(NodeSandboxState::Stopped)),
                }
            }
            Some(RuntimeState::Paused) => {
                self.set_guest(id, Some(GuestClient::new(socket)));
                Ok(Some(NodeSandboxState::Paused))
            }
            Some(_) => Ok(Some(NodeSandboxState::Stopped)),
        }
    }

    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.set_guest(id, None);
        let dir = self.sandbox_dir(id);
        self.runtime.stop(id, &dir).await.map_err(runtime_err)?;
        Self::remove_tree(&dir).await
    }

    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError> {
        self.runtime.list().await.map_err(runtime_err)
    }

    async fn spawn(&self, sandbox_id: &str, req: SpawnRequest) -> Result<CommandInfo, NodeError> {
        let g = self.guest(sandbox_id)?;
        let id = req.command_id.clone();
        g.spawn(req).await.map_err(guest_err)?;
        g.get_command(&id).await.map_err(guest_err)
    }

    async fn command(&self, sandbox_id: &str, command_id: &str) -> Result<CommandInfo, NodeError> {
        self.guest(sandbox_id)?.get_command(command_id).await.map_err(guest_err)
    }

    async fn commands(&self, sandbox_id: &str) -> Result<Vec<CommandInfo>, NodeError> {
        self.guest(sandbox_id)?.list_commands().await.map_err(guest_err)
    }

    async fn signal(&self, sandbox_id: &str, command_id: &str, signal: i32) -> Result<(), NodeError> {
        self.guest(sandbox_id)?.signal(command_id, signal).await.map_err(guest_err)
    }

    async fn kill(
        &self,
        sandbox_id: &str,
        command_id: &str,
        grace_ms: u64,
    ) -> Result<CommandInfo, NodeError> {
        let g = self.guest(sandbox_id)?;
        g.kill(command_id, Duration::from_millis(grace_ms)).await.map_err(guest_err)
    }

    async fn attach(
        &self,
        sandbox_id: &str,
        command_id: &str,
        offset: u64,
    ) -> Result<BoxStream<'static, Result<AttachEvent, NodeError>>, NodeError> {
        let g = self.guest(sandbox_id)?;
        let events = g.attach(command_id, offset, true).await.map_err(guest_err)?;
        let mapped = events.filter_map(|ev| async move {
            match ev {
                Ok(guest::AttachEvent::Output { offset, stream, data }) => {
                    Some(Ok(AttachEvent::Output { offset, stream, data }))
                }
                Ok(guest::AttachEvent::Exited(info)) => Some(Ok(AttachEvent::Exited(info))),
                Ok(guest::AttachEvent::End) => None,
                Err(e) => Some(Err(guest_err(e))),
            }
        });
        Ok(mapped.boxed())
    }

    async fn stdin_write(
        &self,
        sandbox_id: &str,
        command_id: &str,
        data: Bytes,
    ) -> Result<(), NodeError> {
        self.guest(sandbox_id)?.stdin_write(command_id, data).await.map_err(guest_err)
    }

    async fn stdin_close(&self, sandbox_id: &str, command_id: &str) -> Result<(), NodeError> {
        self.guest(sandbox_id)?.stdin_close(command_id).await.map_err(guest_err)
    }

    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?.write_file(req, body).await.map_err(guest_err)
    }

    async fn read_file(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        let g = self.guest(sandbox_id)?;
        let (info, data) = g.read_file(path, user, offset, length).await.map_err(guest_err)?;
        Ok((info, data.map(|r| r.map_err(guest_err)).boxed()))
    }
}
