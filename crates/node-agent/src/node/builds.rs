//! Release builds from a template file: each step after `FROM` in order, `RUN` in a sandbox of
//! the node's runtime, every file-changing step's tree cached (see `template::steps`).
//!
//! A `RUN` sandbox starts on its parent step's tree with the build's egress policy (the
//! node's gateway enforces it as for any sandbox; on a node without sandbox networks steps
//! have loopback only), runs `/bin/sh -c CMD` (or the exec form's argv) as the step's user in
//! its working directory, and its changed files (the runtime's files artifact, a tar with
//! whiteouts) become the step's layer. Only runtimes whose files artifact is such a tar (runc)
//! can build.
//!
//! The policy is not part of a step's cache key: it decides what a step may reach, not what it
//! writes. A step that fails under a policy leaves no cache entry, and one that succeeded
//! wrote the same tree whatever else the policy would have allowed (downloads are not pinned
//! by the key either, as in Docker: `--no-cache` fetches afresh).
//!
//! A release built here is kept in the snapshot store when it is shared (`release_store`), so
//! other nodes fetch it instead of building it.

use std::collections::BTreeMap;

use cove_domain::{EgressPolicy, Resources};
use cove_node_api::{
    BuildParent, BuildStep, BuiltFileRelease, FileBuild, FileStep, Program, ReleaseDefaults,
    StepProgram,
};
use cove_runtime::RuntimeKind;
use tokio::sync::mpsc;

use super::*;
use crate::template::{LayerCache, StepTree, TemplateDefaults};

/// Output lines of one `RUN` passed to the build log before the rest is cut.
const MAX_STEP_LOG_LINES: usize = 5000;
/// Longest log line, in bytes.
const MAX_LINE_BYTES: usize = 2048;
/// Version of the step key scheme (bumped when a step's meaning changes).
/// v2: a step's words are expanded on the node (the key holds the expanded step).
const STEP_KEY_VERSION: &str = "cove file build v2";
/// Most bytes of a build's environment and arguments together (names and values).
const MAX_ENV_BYTES: usize = 1024 * 1024;
/// Most ports a build records from `EXPOSE`.
const MAX_PORTS: usize = 1024;
/// Id prefix of the sandboxes `RUN` steps run in (never a sandbox id of the control plane's,
/// which start `sb-`); `list_sandboxes` leaves them out.
pub(super) const BUILD_SANDBOX_PREFIX: &str = "build-";

/// `invalid_argument` when the build's environment and arguments outgrow [`MAX_ENV_BYTES`].
fn check_env_bytes(st: &State, line: u32) -> Result<(), NodeError> {
    let bytes: usize = st
        .defaults
        .env
        .iter()
        .chain(st.args.iter())
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum();
    if bytes > MAX_ENV_BYTES {
        return Err(NodeError::InvalidArgument {
            field: "file".into(),
            message: format!("line {line}: the build's environment is over {MAX_ENV_BYTES} bytes"),
        });
    }
    Ok(())
}

/// The build state between steps.
struct State {
    defaults: ReleaseDefaults,
    /// The user of `RUN` steps: root until a `USER` instruction.
    build_user: String,
    args: BTreeMap<String, String>,
    key: String,
    tree: PathBuf,
    /// Egress policy of `RUN` sandboxes.
    network: EgressPolicy,
}

fn build_err(e: template::BuildError) -> NodeError {
    match e {
        template::BuildError::Cancelled => NodeError::Cancelled,
        e @ template::BuildError::InvalidLayer { .. } => NodeError::InvalidArgument {
            field: "file".into(),
            message: format!("FROM oci-archive: {e}"),
        },
        other => NodeError::Build(other.to_string()),
    }
}

impl NodeAgent {
    /// See [`cove_node_api::NodeReleases::build_file_release`].
    pub(super) async fn file_build(
        &self,
        template: &str,
        number: u32,
        build: FileBuild,
        events: mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltFileRelease, NodeError> {
        if self.runtime.kind() != RuntimeKind::Runc {
            return Err(NodeError::Unsupported(format!(
                "builds from a file need the runc runtime; this node runs {}",
                self.runtime.kind().as_str()
            )));
        }
        let began = std::time::SystemTime::now();
        let building = self.layer_builds.read().await;
        let result = self
            .file_build_held(template, number, build, events, cancel)
            .await;
        drop(building);
        self.trim_layers(began).await;
        result
    }

    /// Trims the step cache to its bound in the background when no build runs (else the next
    /// build's end does), keeping what was used since `began`. Builds that start meanwhile
    /// wait for it (the walk reads every entry's tree once).
    async fn trim_layers(&self, began: std::time::SystemTime) {
        let Ok(alone) = self.layer_builds.clone().try_write_owned() else {
            return;
        };
        let dir = self.cfg.data_dir.join("layers");
        let max = self.cfg.layer_cache_bytes;
        tokio::spawn(async move {
            let trimmed =
                tokio::task::spawn_blocking(move || template::trim_layers(&dir, max, began)).await;
            drop(alone);
            match trimmed {
                Ok(Ok(t)) if t.removed > 0 => info!(
                    removed = t.removed,
                    bytes_before = t.bytes_before,
                    bytes_after = t.bytes_after,
                    "step cache trimmed"
                ),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!(error = %e, "cannot trim the step cache"),
                Err(e) => warn!(error = %e, "cannot trim the step cache"),
            }
        });
    }

    /// The tree, step key and defaults a build (or stage) starts from: a release of this node
    /// (fetched from the snapshot store when shared), an imported OCI archive, or an earlier
    /// stage of the same build.
    async fn parent_of(
        &self,
        parent: &BuildParent,
        stages: &[Built],
        no_cache: bool,
        events: &mpsc::Sender<BuildEvent>,
        cancel: &CancellationToken,
    ) -> Result<Built, NodeError> {
        Ok(match parent {
            BuildParent::Stage { index } => {
                stages
                    .get(*index as usize)
                    .cloned()
                    .ok_or_else(|| NodeError::InvalidArgument {
                        field: "file".into(),
                        message: format!("stage {index} is not an earlier stage"),
                    })?
            }
            BuildParent::Release {
                template,
                number,
                digest,
                defaults,
            } => {
                let tree = self.release_dir(template, *number).join("rootfs");
                // A parent built from a file on another node comes from the snapshot store.
                if !tree.is_dir() && digest.starts_with("sha256:") && self.cfg.share_releases {
                    self.fetch_release(template, *number, digest).await?;
                }
                if !tree.is_dir() {
                    return Err(NodeError::ReleaseNotFound(format!(
                        "release {number} of {template} is not on this node"
                    )));
                }
                Built {
                    tree,
                    key: format!("{STEP_KEY_VERSION}\n{digest}"),
                    defaults: (**defaults).clone(),
                }
            }
            BuildParent::OciArchive { path } => {
                // Only a plain name in the operator's import directory, opened confined: a
                // template file never names a host path.
                let Some(import_dir) = &self.cfg.oci_import_dir else {
                    return Err(NodeError::OciImportDisabled);
                };
                let archive =
                    template::open_archive(import_dir, path, self.cfg.oci_import_max_bytes)
                        .map_err(|e| NodeError::InvalidArgument {
                            field: "file".into(),
                            message: format!("FROM {e}"),
                        })?;
                let layers = LayerCache::new(self.cfg.data_dir.join("layers"));
                let _ = events
                    .send(BuildEvent::Progress {
                        percent: 2,
                        phase: format!("importing oci-archive:{path}"),
                    })
                    .await;
                let (tree, d, key) = layers
                    .import_oci(archive, no_cache, cancel.clone())
                    .await
                    .map_err(|e| match e {
                        template::BuildError::Io { .. } => NodeError::Build(format!(
                            "cannot read the image archive oci-archive:{path}"
                        )),
                        other => build_err(other),
                    })?;
                let defaults = ReleaseDefaults {
                    user: d.user,
                    workdir: d.workdir,
                    env: d.env,
                    start: None,
                    ready: None,
                    labels: Default::default(),
                    ports: Vec::new(),
                };
                Built {
                    tree,
                    key: format!("{STEP_KEY_VERSION}\n{key}"),
                    defaults,
                }
            }
        })
    }

    async fn file_build_held(
        &self,
        template: &str,
        number: u32,
        build: FileBuild,
        events: mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltFileRelease, NodeError> {
        let dir = self.release_dir(template, number);
        Self::remove_tree(&dir).await?;
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", dir.display())))?;
        let work = self
            .cfg
            .data_dir
            .join("builds")
            .join(format!("{template}-{number}-{:08x}", rand::random::<u32>()));
        let result = self
            .run_file_build(&work, &dir, build, events, cancel)
            .await;
        let _ = Self::remove_tree(&work).await;
        if result.is_err() {
            let _ = Self::remove_tree(&dir).await;
        }
        result
    }

    async fn run_file_build(
        &self,
        work: &Path,
        release: &Path,
        build: FileBuild,
        events: mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltFileRelease, NodeError> {
        let (tx, forward) = forward_events(events.clone());
        let context = work.join("context");
        template::unpack_context(build.context.clone(), context.clone(), cancel.clone())
            .await
            .map_err(build_err)?;
        let _ = events
            .send(BuildEvent::Log(self.build_network_line(&build.network)))
            .await;
        let total = build.stages.iter().map(|s| s.steps.len()).sum::<usize>() + build.steps.len();
        let mut run = StepRun {
            context,
            work: work.to_path_buf(),
            layers: LayerCache::new(self.cfg.data_dir.join("layers")),
            stages: Vec::new(),
            no_cache: build.no_cache,
            network: build.network.clone(),
            events: events.clone(),
            tx: tx.clone(),
            cancel: cancel.clone(),
            done: 0,
            total: total.max(1),
            cached: 0,
            ran: 0,
        };
        for stage in &build.stages {
            let _ = events
                .send(BuildEvent::Log(format!("stage {}", stage.name)))
                .await;
            let parent = self
                .parent_of(&stage.parent, &run.stages, build.no_cache, &events, &cancel)
                .await?;
            let built = self.run_steps(&mut run, parent, &stage.steps).await?;
            run.stages.push(built.into());
        }
        let parent = self
            .parent_of(&build.parent, &run.stages, build.no_cache, &events, &cancel)
            .await?;
        let st = self.run_steps(&mut run, parent, &build.steps).await?;
        let (cached, ran) = (run.cached, run.ran);
        drop(run);
        let _ = events
            .send(BuildEvent::Progress {
                percent: 92,
                phase: "publishing the release".into(),
            })
            .await;
        let mut extra = Vec::new();
        if let Some(start) = &st.defaults.start {
            extra.push(format!("start={start}"));
        }
        if let Some(ready) = &st.defaults.ready {
            extra.push(format!("ready={} {}", ready.timeout_s, ready.command));
        }
        let td = TemplateDefaults {
            user: st.defaults.user.clone(),
            workdir: st.defaults.workdir.clone(),
            env: st.defaults.env.clone(),
        };
        let published = template::publish_release(
            &st.tree,
            &release.join("rootfs"),
            td.clone(),
            extra.clone(),
            tx.clone(),
            cancel.clone(),
        )
        .await
        .map_err(build_err);
        drop(tx);
        let _ = forward.await;
        let (size_bytes, digest) = published?;
        if self.cfg.share_releases {
            let _ = events
                .send(BuildEvent::Progress {
                    percent: 96,
                    phase: "storing the release for other nodes".into(),
                })
                .await;
            self.store_release(&release.join("rootfs"), &digest, td, extra, &cancel)
                .await?;
        }
        let _ = events
            .send(BuildEvent::Progress {
                percent: 100,
                phase: format!("done: {ran} steps run, {cached} cached"),
            })
            .await;
        info!(
            size_bytes,
            steps_run = ran,
            steps_cached = cached,
            "file release built"
        );
        Ok(BuiltFileRelease {
            size_bytes,
            digest,
            defaults: st.defaults,
            steps_cached: cached,
            steps_run: ran,
        })
    }

    /// Runs `steps` on `parent` (one stage, or the release's own steps) and returns the state
    /// they end in.
    async fn run_steps(
        &self,
        run: &mut StepRun,
        parent: Built,
        steps: &[FileStep],
    ) -> Result<State, NodeError> {
        let mut defaults = parent.defaults;
        defaults
            .env
            .entry("PATH".into())
            .or_insert_with(|| cove_node_api::DEFAULT_PATH.into());
        let mut st = State {
            defaults,
            build_user: "root".into(),
            args: BTreeMap::new(),
            key: parent.key,
            tree: parent.tree,
            network: run.network.clone(),
        };
        for step in steps {
            let i = run.done;
            run.done += 1;
            if run.cancel.is_cancelled() {
                return Err(NodeError::Cancelled);
            }
            let percent = 5 + (85 * i / run.total) as u8;
            let _ = run
                .events
                .send(BuildEvent::Progress {
                    percent,
                    phase: format!("step {}/{}: {}", i + 1, run.total, step.text),
                })
                .await;
            let expanded = step
                .step
                .expanded(&st.defaults.env, &st.args)
                .map_err(|e| NodeError::InvalidArgument {
                    field: "file".into(),
                    message: format!("line {}: {e}", step.line),
                })?;
            let canonical = serde_json::to_string(&(&expanded, &st.build_user, &st.args))
                .map_err(|e| NodeError::Internal(format!("step key: {e}")))?;
            let change = match &expanded {
                BuildStep::Env { vars } => {
                    st.defaults.env.extend(vars.iter().cloned());
                    check_env_bytes(&st, step.line)?;
                    None
                }
                BuildStep::Arg { name, value } => {
                    st.args.insert(name.clone(), value.clone());
                    check_env_bytes(&st, step.line)?;
                    None
                }
                BuildStep::Label { labels } => {
                    st.defaults.labels.extend(labels.iter().cloned());
                    None
                }
                BuildStep::Expose { ports } => {
                    for p in ports {
                        let port = cove_node_api::exposed_port(p).map_err(|e| {
                            NodeError::InvalidArgument {
                                field: "file".into(),
                                message: format!("line {}: {e}", step.line),
                            }
                        })?;
                        if let Some(port) = port.filter(|n| !st.defaults.ports.contains(n)) {
                            if st.defaults.ports.len() >= MAX_PORTS {
                                return Err(NodeError::InvalidArgument {
                                    field: "file".into(),
                                    message: format!(
                                        "line {}: more than {MAX_PORTS} ports exposed",
                                        step.line
                                    ),
                                });
                            }
                            st.defaults.ports.push(port);
                        }
                    }
                    None
                }
                BuildStep::User { user } => {
                    st.defaults.user = user.clone();
                    st.build_user = user.clone();
                    None
                }
                BuildStep::Start { command } => {
                    st.defaults.start = Some(command.clone());
                    None
                }
                BuildStep::Ready(check) => {
                    st.defaults.ready = Some(check.clone());
                    None
                }
                BuildStep::Workdir { path } => {
                    st.defaults.workdir = absolute(&st.defaults.workdir, path);
                    Some((String::new(), Change::Mkdir(st.defaults.workdir.clone())))
                }
                BuildStep::Copy {
                    sources,
                    dest,
                    from,
                    chown,
                    chmod,
                } => {
                    let (reads, source) = match from {
                        // A stage's tree is named by its key: what it holds follows from it.
                        Some(index) => {
                            let stage = run.stages.get(*index as usize).ok_or_else(|| {
                                NodeError::InvalidArgument {
                                    field: "file".into(),
                                    message: format!(
                                        "line {}: COPY --from names no earlier stage",
                                        step.line
                                    ),
                                }
                            })?;
                            (format!("stage {}", stage.key), stage.tree.clone())
                        }
                        None => (
                            template::hash_sources(
                                run.context.clone(),
                                sources.clone(),
                                run.cancel.clone(),
                            )
                            .await
                            .map_err(|e| match e {
                                template::BuildError::Cancelled => NodeError::Cancelled,
                                e => NodeError::Build(format!("line {}: {e}", step.line)),
                            })?,
                            run.context.clone(),
                        ),
                    };
                    let dest = absolute_dest(&st.defaults.workdir, dest);
                    Some((
                        reads,
                        Change::Copy(StepTree::Copy {
                            context: source,
                            sources: sources.clone(),
                            dest,
                            chown: chown.clone(),
                            chmod: *chmod,
                        }),
                    ))
                }
                BuildStep::Run { program } => Some((String::new(), Change::Run(program.clone()))),
            };
            st.key = template::step_key(
                &st.key,
                &canonical,
                &change.as_ref().map(|c| c.0.clone()).unwrap_or_default(),
            );
            let Some((_, change)) = change else {
                continue;
            };
            if !run.no_cache {
                if let Some(tree) = run.layers.lookup(&st.key) {
                    let _ = run
                        .events
                        .send(BuildEvent::Log(format!(
                            "line {}: {} (cached)",
                            step.line, step.text
                        )))
                        .await;
                    st.tree = tree;
                    run.cached += 1;
                    continue;
                }
            }
            let _ = run
                .events
                .send(BuildEvent::Log(format!(
                    "line {}: {}",
                    step.line, step.text
                )))
                .await;
            let tree_change = match change {
                Change::Mkdir(d) => StepTree::Mkdir(d),
                Change::Copy(copy) => copy,
                Change::Run(program) => {
                    let layer = run.work.join(format!("layer-{i}.tar"));
                    self.run_step(&st, step, &program, &layer, &run.events, &run.cancel)
                        .await?;
                    StepTree::Layer(layer)
                }
            };
            st.tree = run
                .layers
                .produce(
                    &st.key,
                    &st.tree,
                    tree_change,
                    run.tx.clone(),
                    run.cancel.clone(),
                )
                .await
                .map_err(|e| match e {
                    template::BuildError::Cancelled => NodeError::Cancelled,
                    other => NodeError::Build(format!("line {}: {other}", step.line)),
                })?;
            run.ran += 1;
        }
        Ok(st)
    }

    /// Runs one `RUN` step in a sandbox on `st.tree` and saves its changed files to `layer`.
    async fn run_step(
        &self,
        st: &State,
        step: &FileStep,
        program: &StepProgram,
        layer: &Path,
        events: &mpsc::Sender<BuildEvent>,
        cancel: &CancellationToken,
    ) -> Result<(), NodeError> {
        let id = format!("{BUILD_SANDBOX_PREFIX}{:016x}", rand::random::<u64>());
        let dir = self.sandbox_dir(&id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", dir.display())))?;
        let launch = SandboxLaunch {
            id: id.clone(),
            template: String::new(),
            release: 0,
            release_digest: None,
            resources: Resources::default(),
            network: st.network.clone(),
            secrets: BTreeMap::new(),
            arm_secrets: false,
            volumes: Vec::new(),
        };
        let network = match self.attach_network(&launch, None).await {
            Ok(n) => n,
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                return Err(e);
            }
        };
        let spec = SandboxSpec {
            id: id.clone(),
            rootfs: st.tree.clone(),
            dir: dir.clone(),
            guest_agent: self.cfg.guest_agent.clone(),
            guest_agent_args: self.cfg.command_output.agent_args(),
            hostname: "build".into(),
            resources: Resources::default(),
            network,
            volumes: Vec::new(),
        };
        let started = match self.runtime.start(&spec).await {
            Ok(s) => s,
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                let _ = self.detach_network(&id).await;
                return Err(runtime_err(e));
            }
        };
        let client = GuestClient::new(started.guest);
        self.set_guest(&id, Some(client.clone()));
        let ran = async {
            client
                .connect(AGENT_CONNECT_TIMEOUT)
                .await
                .map_err(|e| NodeError::AgentUnavailable(e.to_string()))?;
            self.run_command(&id, st, step, program, events, cancel)
                .await?;
            self.runtime.pause(&id).await.map_err(runtime_err)?;
            let artifact = self
                .runtime
                .snapshot_artifacts()
                .iter()
                .find(|a| !a.memory)
                .ok_or_else(|| NodeError::Unsupported("the runtime saves no files".into()))?;
            let out = std::fs::File::create(layer)
                .map_err(|e| NodeError::Internal(format!("create {}: {e}", layer.display())))?;
            self.runtime
                .save_artifact(
                    &id,
                    &dir,
                    artifact.name,
                    Box::new(std::io::BufWriter::new(out)),
                )
                .await
                .map_err(runtime_err)
        }
        .await;
        if let Err(e) = self.release_sandbox(&id).await {
            warn!(sandbox_id = %id, error = %e, "cannot remove a build sandbox");
        }
        ran.map(drop)
    }

    /// Runs the step's command and streams its output into the build log.
    async fn run_command(
        &self,
        id: &str,
        st: &State,
        step: &FileStep,
        program: &StepProgram,
        events: &mpsc::Sender<BuildEvent>,
        cancel: &CancellationToken,
    ) -> Result<(), NodeError> {
        let mut env = st.defaults.env.clone();
        for (k, v) in &st.args {
            env.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let argv = match program {
            StepProgram::Shell(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
            StepProgram::Argv(argv) => argv.clone(),
        };
        let command_id = format!("cmd-build-{}", step.line);
        self.spawn(
            id,
            SpawnRequest {
                command_id: command_id.clone(),
                program: Program::Argv(argv),
                env,
                cwd: Some(SandboxPath::from(st.defaults.workdir.as_str())),
                user: Some(st.build_user.clone()),
                stdin: false,
                timeout_ms: None,
                pty: None,
            },
        )
        .await
        .map_err(|e| NodeError::Build(format!("line {}: {e}", step.line)))?;
        let mut stream = self.attach(id, &command_id, 0, true).await?;
        let mut lines = LineSplitter::default();
        let exited = loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => return Err(NodeError::Cancelled),
                ev = stream.next() => ev,
            };
            match ev {
                Some(Ok(AttachEvent::Output { stream, data, .. })) => {
                    for line in lines.push(stream, &data) {
                        let _ = events.send(BuildEvent::Log(line)).await;
                    }
                }
                Some(Ok(AttachEvent::Exited(info))) => break info,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(NodeError::Build(format!(
                        "line {}: the command's output ended early",
                        step.line
                    )))
                }
            }
        };
        for line in lines.finish() {
            let _ = events.send(BuildEvent::Log(line)).await;
        }
        match (exited.exit_code, exited.signal) {
            (Some(0), _) => Ok(()),
            (Some(code), _) => Err(NodeError::Build(format!(
                "line {}: `{}` exited with code {code}",
                step.line, step.text
            ))),
            (None, signal) => Err(NodeError::Build(format!(
                "line {}: `{}` was killed by signal {}",
                step.line,
                step.text,
                signal.unwrap_or(0)
            ))),
        }
    }
}

impl NodeAgent {
    /// The build log's line about the network of `RUN` steps.
    fn build_network_line(&self, p: &EgressPolicy) -> String {
        let has_net = self.network.is_some() && self.runtime.capabilities().network;
        if !has_net {
            return "network: none on this node (RUN steps have loopback only)".into();
        }
        let list = |rules: &[cove_domain::EgressRule]| {
            rules
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut line = format!(
            "network: internet {}",
            if p.internet { "on" } else { "off" }
        );
        if !p.allow.is_empty() {
            line.push_str(&format!("; allow {}", list(&p.allow)));
        }
        if !p.deny.is_empty() {
            line.push_str(&format!("; deny {}", list(&p.deny)));
        }
        line
    }
}

/// What a file-changing step does, before its cache lookup.
enum Change {
    Mkdir(String),
    Copy(StepTree),
    Run(StepProgram),
}

/// A built stage (or a build's parent): its tree, step key and defaults.
#[derive(Clone)]
struct Built {
    tree: PathBuf,
    key: String,
    defaults: ReleaseDefaults,
}

impl From<State> for Built {
    fn from(st: State) -> Self {
        Built {
            tree: st.tree,
            key: st.key,
            defaults: st.defaults,
        }
    }
}

/// What the steps of every stage of one build share.
struct StepRun {
    /// The unpacked context.
    context: PathBuf,
    /// The build's work directory (layer tars).
    work: PathBuf,
    layers: LayerCache,
    /// Stages built so far, by index.
    stages: Vec<Built>,
    no_cache: bool,
    network: EgressPolicy,
    events: mpsc::Sender<BuildEvent>,
    tx: mpsc::Sender<template::BuildEvent>,
    cancel: CancellationToken,
    /// Steps begun, of `total`.
    done: usize,
    total: usize,
    cached: u32,
    ran: u32,
}

/// `path` against the working directory `cwd`.
fn absolute(cwd: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", cwd.trim_end_matches('/'))
    }
}

/// A `COPY` destination against `cwd`, keeping a trailing `/` (it means "into this directory").
fn absolute_dest(cwd: &str, dest: &str) -> String {
    let abs = absolute(cwd, dest);
    if dest == "." || dest.ends_with("/.") {
        format!("{}/", abs.trim_end_matches('.'))
    } else {
        abs
    }
}

/// Forwards the template builder's events into the node's build events.
fn forward_events(
    events: mpsc::Sender<BuildEvent>,
) -> (
    mpsc::Sender<template::BuildEvent>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = mpsc::channel(256);
    let forward = tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            let ev = match ev {
                template::BuildEvent::Log(l) => BuildEvent::Log(l),
                template::BuildEvent::Progress { phase, .. } => BuildEvent::Log(phase),
            };
            if events.send(ev).await.is_err() {
                break;
            }
        }
    });
    (tx, forward)
}

/// Splits a command's output into log lines: `stderr` lines prefixed, long lines cut, at most
/// [`MAX_STEP_LOG_LINES`] lines.
#[derive(Default)]
struct LineSplitter {
    out: Vec<u8>,
    err: Vec<u8>,
    emitted: usize,
}

impl LineSplitter {
    fn push(&mut self, stream: cove_node_api::OutputStream, data: &[u8]) -> Vec<String> {
        let is_err = stream == cove_node_api::OutputStream::Stderr;
        let mut done = Vec::new();
        for &b in data {
            let buf = if is_err { &mut self.err } else { &mut self.out };
            if b == b'\n' {
                let line = std::mem::take(buf);
                if let Some(l) = self.line(is_err, &line) {
                    done.push(l);
                }
            } else if buf.len() < MAX_LINE_BYTES {
                buf.push(b);
            }
        }
        done
    }

    fn line(&mut self, is_err: bool, bytes: &[u8]) -> Option<String> {
        self.emitted += 1;
        match self.emitted.cmp(&(MAX_STEP_LOG_LINES + 1)) {
            std::cmp::Ordering::Less => {
                let text = String::from_utf8_lossy(bytes);
                Some(if is_err {
                    format!("stderr: {text}")
                } else {
                    format!("stdout: {text}")
                })
            }
            std::cmp::Ordering::Equal => Some("(more output cut)".into()),
            std::cmp::Ordering::Greater => None,
        }
    }

    fn finish(&mut self) -> Vec<String> {
        let (out, err) = (std::mem::take(&mut self.out), std::mem::take(&mut self.err));
        let mut done = Vec::new();
        for (is_err, buf) in [(false, out), (true, err)] {
            if !buf.is_empty() {
                done.extend(self.line(is_err, &buf));
            }
        }
        done
    }
}
