//! `NodeLifecycle` and `NodeReleases` of the fake node: sandboxes change node state in memory,
//! suspends move a sandbox's files into the snapshot store, wakes bring them back.

use std::collections::BTreeMap;

use async_trait::async_trait;
use cove_node_api::{
    AgentHealth, BuildEvent, BuiltRelease, NodeCapabilities, NodeError, NodeLifecycle,
    NodeReleases, NodeSandboxState, RecipeInfo, RepairInfo, SandboxLaunch, SuspendInfo, WakeInfo,
};
use tokio_util::sync::CancellationToken;

use crate::files::Tree;
use crate::{Call, FakeNode, FakeSandbox, Snapshot};

/// A freshly started sandbox: running, the seeded directories, no commands.
pub(crate) fn new_sandbox(launch: SandboxLaunch, workdir: &str) -> FakeSandbox {
    FakeSandbox {
        state: NodeSandboxState::Running,
        launch,
        files: Tree::seeded(workdir),
        commands: BTreeMap::new(),
        order: Vec::new(),
        agent_hung: false,
    }
}

impl FakeNode {
    pub(crate) fn workdir_of(&self, template: &str) -> String {
        self.recipe_list()
            .into_iter()
            .find(|r| r.name == template)
            .map_or_else(|| "/".to_string(), |r| r.workdir)
    }
}

#[async_trait]
impl NodeLifecycle for FakeNode {
    async fn start_sandbox(&self, launch: SandboxLaunch) -> Result<(), NodeError> {
        let id = launch.id.clone();
        let workdir = self.workdir_of(&launch.template);
        self.run(Call::Start, &id, None, move |st| {
            let key = (launch.template.clone(), launch.release);
            // A launch with a digest may fetch the release from the (shared) snapshot store,
            // which the fake takes to hold every release built from a file.
            if !st.releases.contains(&key) && launch.release_digest.is_some() {
                st.releases.insert(key.clone());
            }
            if !st.releases.contains(&key) {
                return Err(NodeError::ReleaseNotFound(format!(
                    "release {} of {} is not on this node",
                    launch.release, launch.template
                )));
            }
            if st.sandboxes.contains_key(&launch.id) {
                return Err(NodeError::Runtime(format!(
                    "sandbox {} already exists",
                    launch.id
                )));
            }
            st.sandboxes
                .insert(launch.id.clone(), new_sandbox(launch, &workdir));
            Ok(())
        })
        .await
    }

    async fn adopt_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        self.run(Call::Adopt, id, None, |st| {
            Ok(st.sandboxes.get(id).map(|s| s.state))
        })
        .await
    }

    async fn inspect_sandbox(&self, id: &str) -> Result<Option<NodeSandboxState>, NodeError> {
        self.run(Call::Inspect, id, None, |st| {
            Ok(st.sandboxes.get(id).map(|s| s.state))
        })
        .await
    }

    /// `Stopped` (its init died) is dead; a hung agent ([`FakeNode::hang_agent`]) is
    /// unresponsive.
    async fn check_agent(
        &self,
        id: &str,
        _timeout: std::time::Duration,
    ) -> Result<AgentHealth, NodeError> {
        self.run(Call::CheckAgent, id, None, |st| {
            let sb = st.sandbox(id)?;
            Ok(match (sb.state, sb.agent_hung) {
                (NodeSandboxState::Stopped, _) => AgentHealth::Dead {
                    reason: "the guest agent (the sandbox's init) exited".into(),
                },
                (_, true) => AgentHealth::Unresponsive {
                    reason: "the guest agent did not answer a ping in time".into(),
                },
                _ => AgentHealth::Ok,
            })
        })
        .await
    }

    /// Restarts the sandbox on its files: running, agent answering, no commands.
    async fn repair_sandbox(&self, launch: SandboxLaunch) -> Result<RepairInfo, NodeError> {
        let id = launch.id.clone();
        self.run(Call::Repair, &id, None, move |st| {
            let sb = st.sandbox(&launch.id)?;
            sb.state = NodeSandboxState::Running;
            sb.agent_hung = false;
            sb.commands.clear();
            sb.order.clear();
            sb.launch = launch;
            Ok(RepairInfo {
                processes_restarted: true,
            })
        })
        .await
    }

    async fn pause_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.run(Call::Pause, id, None, |st| {
            let sb = st.sandbox(id)?;
            match sb.state {
                NodeSandboxState::Running | NodeSandboxState::Paused => {
                    sb.state = NodeSandboxState::Paused;
                    Ok(())
                }
                NodeSandboxState::Stopped => Err(NodeError::Runtime(format!(
                    "cannot pause sandbox {id}: it is stopped"
                ))),
            }
        })
        .await
    }

    async fn resume_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.run(Call::Resume, id, None, |st| {
            let sb = st.sandbox(id)?;
            match sb.state {
                NodeSandboxState::Running | NodeSandboxState::Paused => {
                    sb.state = NodeSandboxState::Running;
                    Ok(())
                }
                NodeSandboxState::Stopped => Err(NodeError::Runtime(format!(
                    "cannot resume sandbox {id}: it is stopped"
                ))),
            }
        })
        .await
    }

    async fn suspend_sandbox(
        &self,
        id: &str,
        cancel: CancellationToken,
    ) -> Result<SuspendInfo, NodeError> {
        self.run(Call::Suspend, id, Some(&cancel), |st| {
            let sb = st.sandbox(id)?;
            if sb.state == NodeSandboxState::Stopped {
                return Err(NodeError::Runtime(format!(
                    "cannot suspend sandbox {id}: it is stopped"
                )));
            }
            let files = sb.files.clone();
            let file_bytes = files.file_bytes();
            st.sandboxes.remove(id);
            st.snapshots.insert(id.to_string(), Snapshot { files });
            Ok(SuspendInfo { file_bytes })
        })
        .await
    }

    async fn wake_sandbox(
        &self,
        launch: SandboxLaunch,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        let id = launch.id.clone();
        let workdir = self.workdir_of(&launch.template);
        let memory_restored = self.capabilities_now().suspend_memory;
        self.run(Call::Wake, &launch.id.clone(), Some(&cancel), move |st| {
            let Some(snapshot) = st.snapshots.get(&launch.id) else {
                return Err(NodeError::Runtime(format!(
                    "no snapshot of sandbox {}",
                    launch.id
                )));
            };
            let files = snapshot.files.clone();
            let file_bytes = files.file_bytes();
            let mut sb = new_sandbox(launch, &workdir);
            sb.files = files;
            st.sandboxes.insert(id.clone(), sb);
            Ok(WakeInfo {
                memory_restored,
                file_bytes,
            })
        })
        .await
    }

    async fn release_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.run(Call::Release, id, None, |st| {
            st.sandboxes.remove(id);
            Ok(())
        })
        .await
    }

    async fn destroy_sandbox(&self, id: &str) -> Result<(), NodeError> {
        self.run(Call::Destroy, id, None, |st| {
            st.sandboxes.remove(id);
            st.snapshots.remove(id);
            Ok(())
        })
        .await
    }

    async fn list_sandboxes(&self) -> Result<Vec<String>, NodeError> {
        self.run(Call::ListSandboxes, "", None, |st| {
            Ok(st.sandboxes.keys().cloned().collect())
        })
        .await
    }

    async fn has_snapshot(&self, id: &str) -> Result<bool, NodeError> {
        self.run(Call::HasSnapshot, id, None, |st| {
            Ok(st.snapshots.contains_key(id))
        })
        .await
    }

    async fn delete_snapshot(&self, id: &str) -> Result<(), NodeError> {
        self.run(Call::DeleteSnapshot, id, None, |st| {
            st.snapshots.remove(id);
            Ok(())
        })
        .await
    }

    async fn list_snapshots(&self) -> Result<Vec<String>, NodeError> {
        self.run(Call::ListSnapshots, "", None, |st| {
            Ok(st.snapshots.keys().cloned().collect())
        })
        .await
    }

    async fn sweep_snapshots(&self) -> Result<u64, NodeError> {
        self.run(Call::SweepSnapshots, "", None, |st| {
            Ok(std::mem::take(&mut st.partial_uploads))
        })
        .await
    }

    fn capabilities(&self) -> NodeCapabilities {
        self.capabilities_now()
    }
}

#[async_trait]
impl NodeReleases for FakeNode {
    fn recipes(&self) -> Vec<RecipeInfo> {
        self.recipe_list()
    }

    async fn cached_releases(&self) -> Result<Vec<cove_node_api::ReleaseRef>, NodeError> {
        Ok(self
            .lock()
            .releases
            .iter()
            .map(|(template, number)| cove_node_api::ReleaseRef {
                template: template.clone(),
                number: *number,
            })
            .collect())
    }

    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltRelease, NodeError> {
        if !self.recipe_list().iter().any(|r| r.name == template) {
            self.run(Call::BuildRelease, template, Some(&cancel), |_| Ok(()))
                .await?;
            return Err(NodeError::ReleaseNotFound(format!(
                "no recipe for {template}"
            )));
        }
        let built = self
            .run(Call::BuildRelease, template, Some(&cancel), |st| {
                let from_cache = !no_cache && st.releases.iter().any(|(t, _)| t == template);
                st.releases.insert((template.to_string(), number));
                Ok(BuiltRelease {
                    size_bytes: 1 << 20,
                    from_cache,
                    digest: fake_digest(template),
                })
            })
            .await?;
        let _ = events
            .send(BuildEvent::Log(format!("built {template} {number}")))
            .await;
        let _ = events
            .send(BuildEvent::Progress {
                percent: 100,
                phase: "done".into(),
            })
            .await;
        Ok(built)
    }

    async fn build_file_release(
        &self,
        template: &str,
        number: u32,
        build: cove_node_api::FileBuild,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<cove_node_api::BuiltFileRelease, NodeError> {
        // The fake applies the metadata steps and counts the others; it runs nothing. Like a
        // node started without `--oci-import-dir`, it imports no image archive. Stages come
        // first, each from its own parent, as on a real node.
        let mut steps_run = 0;
        let mut stages: Vec<cove_node_api::ReleaseDefaults> = Vec::new();
        for stage in &build.stages {
            let parent = fake_parent(&stage.parent, &stages)?;
            let d = fake_steps(parent, &stage.steps, &mut steps_run)?;
            stages.push(d);
        }
        let parent = fake_parent(&build.parent, &stages)?;
        let defaults = fake_steps(parent, &build.steps, &mut steps_run)?;
        let built = self
            .run(Call::BuildRelease, template, Some(&cancel), |st| {
                st.releases.insert((template.to_string(), number));
                Ok(cove_node_api::BuiltFileRelease {
                    size_bytes: 1 << 20,
                    digest: fake_digest(template),
                    defaults,
                    steps_cached: 0,
                    steps_run,
                })
            })
            .await?;
        let _ = events
            .send(BuildEvent::Log(format!(
                "built {template} {number} from a file"
            )))
            .await;
        Ok(built)
    }

    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError> {
        self.run(Call::RemoveRelease, template, None, |st| {
            st.releases.remove(&(template.to_string(), number));
            Ok(())
        })
        .await
    }

    /// The fake node has no snapshot store for releases: the call is only recorded.
    async fn remove_stored_release(&self, digest: &str) -> Result<(), NodeError> {
        self.run(Call::RemoveStoredRelease, digest, None, |_| Ok(()))
            .await
    }
}

/// The digest the fake node gives every build of `template`: fixed per template, so rebuilds
/// of the same inputs match as on a real node (`sha256:` + 64 hex digits).
pub fn fake_digest(template: &str) -> String {
    // FNV-1a: any stable spread will do; this is a stand-in, not a content hash.
    let h = template.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("sha256:{h:016x}{:016x}{:016x}{:016x}", h ^ 1, h ^ 2, h ^ 3)
}

/// The defaults a fake build starts from.
fn fake_parent(
    parent: &cove_node_api::BuildParent,
    stages: &[cove_node_api::ReleaseDefaults],
) -> Result<cove_node_api::ReleaseDefaults, NodeError> {
    match parent {
        cove_node_api::BuildParent::Release { defaults, .. } => Ok((**defaults).clone()),
        cove_node_api::BuildParent::OciArchive { .. } => Err(NodeError::OciImportDisabled),
        cove_node_api::BuildParent::Stage { index } => stages
            .get(*index as usize)
            .cloned()
            .ok_or_else(|| NodeError::InvalidArgument {
                field: "file".into(),
                message: format!("stage {index} is not an earlier stage"),
            }),
    }
}

/// The defaults after a fake build's `steps` (metadata applied, the others counted in `run`).
fn fake_steps(
    mut defaults: cove_node_api::ReleaseDefaults,
    steps: &[cove_node_api::FileStep],
    steps_run: &mut u32,
) -> Result<cove_node_api::ReleaseDefaults, NodeError> {
    defaults
        .env
        .entry("PATH".into())
        .or_insert_with(|| cove_node_api::DEFAULT_PATH.into());
    let mut args = BTreeMap::new();
    for s in steps {
        let step =
            s.step
                .expanded(&defaults.env, &args)
                .map_err(|e| NodeError::InvalidArgument {
                    field: "file".into(),
                    message: format!("line {}: {e}", s.line),
                })?;
        match &step {
            cove_node_api::BuildStep::Env { vars } => defaults.env.extend(vars.iter().cloned()),
            cove_node_api::BuildStep::User { user } => defaults.user = user.clone(),
            cove_node_api::BuildStep::Workdir { path } => defaults.workdir = path.clone(),
            cove_node_api::BuildStep::Start { command } => defaults.start = Some(command.clone()),
            cove_node_api::BuildStep::Ready(r) => defaults.ready = Some(r.clone()),
            cove_node_api::BuildStep::Arg { name, value } => {
                args.insert(name.clone(), value.clone());
            }
            cove_node_api::BuildStep::Label { labels } => {
                defaults.labels.extend(labels.iter().cloned())
            }
            cove_node_api::BuildStep::Expose { ports } => defaults.ports.extend(
                ports
                    .iter()
                    .filter_map(|p| cove_node_api::exposed_port(p).ok().flatten()),
            ),
            _ => *steps_run += 1,
        }
    }
    Ok(defaults)
}
