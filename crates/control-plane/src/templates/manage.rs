//! Templates built from a file: create (a build operation), delete a template or one release.

use std::collections::BTreeMap;
use std::io::Read;

use bytes::Bytes;
use chrono::{Duration as ChronoDuration, Utc};
use cove_api_types::{
    BuildReleaseResponse, EgressPolicy, OperationKind, ReleaseState, SandboxState, TemplateDefaults,
};
use cove_domain::{ids, InvalidInput};
use cove_node_api::{BuildEvent, BuildParent, BuildStage, FileBuild, ReleaseDefaults};
use cove_store::{NewOperation, SandboxFilter, StoreError};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::context;
use super::file::{self, FromRef, MAX_FILE_BYTES};
use super::BUILD_DEADLINE_MIN;
use crate::error::from_node;
use crate::operations::Begun;
use crate::orgs::scope;
use crate::release_pins;
use crate::{ControlPlane, ServiceError};

/// Default path of the template file in the context.
pub const DEFAULT_FILE: &str = "Dockerfile";

/// A build of a file template's next release, as [`ControlPlane::create_template_from_file`]
/// takes it (the REST API reads it from the query of `POST /v1/templates`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateFileBuild {
    /// Template name: `[a-z0-9][a-z0-9_-]*`, at most 63 bytes, not a built-in recipe's. An
    /// existing file template gets its next release.
    pub name: String,
    /// Path of the template file inside the build context (default `Dockerfile`).
    pub file: Option<String>,
    /// Ignore cached step results.
    pub no_cache: bool,
    /// The egress policy of the build's `RUN` steps (default: the internet open, as for a
    /// sandbox; on a node without sandbox networks only the default is accepted).
    pub network: Option<EgressPolicy>,
    /// Build arguments: each replaces the default of the file's `ARG` of that name.
    pub build_args: BTreeMap<String, String>,
}

fn invalid(field: &str, message: impl Into<String>) -> ServiceError {
    InvalidInput::new(field, message).into()
}

impl ControlPlane {
    /// Starts building the next release of the file template `q.name` (created if new) from
    /// the build context `context` (a tar archive holding the template file at `q.file`).
    ///
    /// # Errors
    /// `invalid_argument` for a bad name, a context that is not a tar or lacks the file, or a
    /// bad template file (the message names the line); `release_not_found` when `FROM` names no
    /// ready release; `not_implemented` for `FROM oci-archive:` on a node that cannot import.
    pub async fn create_template_from_file(
        &self,
        q: TemplateFileBuild,
        context: Bytes,
    ) -> Result<BuildReleaseResponse, ServiceError> {
        check_name(&q.name)?;
        if self.recipe(&q.name).is_ok() {
            return Err(invalid("name", "is a built-in template"));
        }
        let network = q.network.clone().unwrap_or_default();
        network.validate()?;
        self.check_network_supported(&network, false)?;
        let path = q.file.clone().unwrap_or_else(|| DEFAULT_FILE.to_string());
        let text = file_in_context(&context, &path)?;
        let parsed =
            file::parse(&text, &q.build_args).map_err(|e| invalid("file", e.to_string()))?;
        // Bounded (entries, patterns, time), but long enough to keep off the async workers.
        let context = tokio::task::spawn_blocking(move || context::apply_ignore(context))
            .await
            .map_err(|e| ServiceError::Internal(format!("context filter: {e}")))??;
        let mut parsed = parsed;
        context::resolve_sources(&context, &mut parsed.steps)?;
        let mut stages = Vec::with_capacity(parsed.stages.len());
        for stage in &mut parsed.stages {
            context::resolve_sources(&context, &mut stage.steps)?;
            stages.push(BuildStage {
                name: stage.name.clone(),
                parent: self.build_parent(&q.name, &stage.from, stage.line).await?,
                steps: std::mem::take(&mut stage.steps),
            });
        }
        let parent = self
            .build_parent(&q.name, &parsed.from, parsed.from_line)
            .await?;
        let recipe_hash = format!("file:{:x}", Sha256::digest(text.as_bytes()));
        match self
            .store()
            .put_file_template(&q.name, &scope::acting_org()?, &text)
            .await
        {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => {
                return Err(ServiceError::AlreadyExists(format!(
                    "template name {} is taken (template names are shared by every org)",
                    q.name
                )))
            }
            Err(e) => return Err(e.into()),
        }
        let release = self
            .store()
            .insert_next_release(&q.name, &recipe_hash)
            .await?;
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: scope::acting_org()?,
            kind: OperationKind::BuildRelease,
            sandbox_id: None,
            template: Some(q.name.clone()),
            release: Some(release.number),
            idempotency_key: None,
            request_hash: None,
            deadline: Utc::now() + ChronoDuration::minutes(BUILD_DEADLINE_MIN),
        };
        let Begun::New(op) = self.operations().begin(new_op).await? else {
            return Err(ServiceError::Internal("build replayed".into()));
        };
        self.store()
            .set_release_operation(&q.name, release.number, &op.id)
            .await?;
        let mut release = release;
        release.build_operation_id = Some(op.id.clone());
        if !parsed.unused_args.is_empty() {
            self.operations()
                .log(
                    &op.id,
                    &format!(
                        "warning: build arguments not declared by an ARG: {}",
                        parsed.unused_args.join(", ")
                    ),
                )
                .await;
        }
        let build = FileBuild {
            parent,
            steps: parsed.steps,
            stages,
            context,
            no_cache: q.no_cache,
            network,
        };
        let this = self.clone();
        let (template, number, op_id) = (q.name.clone(), release.number, op.id.clone());
        self.operations().run(&op, async move {
            this.run_file_build(&op_id, &template, number, build).await
        });
        Ok(BuildReleaseResponse {
            release,
            operation: op,
        })
    }

    /// The node's parent of a build or stage starting `from` (a `FROM` at `line`): a ready
    /// release of another template, an OCI archive, or an earlier stage.
    ///
    /// # Errors
    /// `invalid_argument` for a bad pin or the template itself; `template_not_found`,
    /// `release_not_found`.
    async fn build_parent(
        &self,
        name: &str,
        from: &FromRef,
        line: u32,
    ) -> Result<BuildParent, ServiceError> {
        Ok(match from {
            FromRef::Template(pin) => {
                let (template, pin) = release_pins::parse(pin, None)
                    .map_err(|e| invalid("file", format!("line {line}: FROM: {e}")))?;
                if template == name {
                    return Err(invalid(
                        "file",
                        format!("line {line}: FROM names the template itself"),
                    ));
                }
                if !self.template_exists(&template).await? {
                    return Err(ServiceError::TemplateNotFound(template));
                }
                let release = self.pick_release(&template, &pin).await?;
                let d = self.release_defaults(&template, &release)?;
                BuildParent::Release {
                    digest: release
                        .digest
                        .clone()
                        .unwrap_or_else(|| format!("{template}:{}", release.number)),
                    template,
                    number: release.number,
                    defaults: Box::new(node_defaults(d)),
                }
            }
            FromRef::OciArchive(path) => BuildParent::OciArchive { path: path.clone() },
            FromRef::Stage(index) => BuildParent::Stage { index: *index },
        })
    }

    async fn run_file_build(
        &self,
        op_id: &str,
        template: &str,
        number: u32,
        build: FileBuild,
    ) -> Result<(), ServiceError> {
        let mut guard = super::FailOnDrop::new(self, template, number);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<BuildEvent>(256);
        let cancel = CancellationToken::new();
        let _cancel_on_drop = cancel.clone().drop_guard();
        let ops = self.operations().clone();
        let op = op_id.to_string();
        let forward = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                match ev {
                    BuildEvent::Log(line) => ops.log(&op, &line).await,
                    BuildEvent::Progress { percent, phase } => {
                        ops.set_progress(&op, percent).await;
                        ops.log(&op, &format!("[{percent:>3}%] {phase}")).await;
                    }
                }
            }
        });
        let result = self
            .node()
            .build_file_release(template, number, build, tx, cancel.clone())
            .await;
        let _ = forward.await;
        match result {
            Ok(built) => {
                guard.disarm();
                let d = built.defaults;
                let defaults = TemplateDefaults {
                    user: d.user,
                    workdir: d.workdir,
                    env: d.env,
                    start: d.start,
                    ready: d.ready.map(|r| cove_api_types::ReadyCheck {
                        command: r.command,
                        timeout_s: r.timeout_s,
                    }),
                    labels: d.labels,
                    ports: d.ports,
                };
                let store = self.store();
                store
                    .set_release_digest(template, number, &built.digest)
                    .await?;
                store
                    .set_release_defaults(template, number, &defaults)
                    .await?;
                store
                    .set_release_state(
                        template,
                        number,
                        ReleaseState::Ready,
                        Some(built.size_bytes),
                    )
                    .await?;
                self.operations().set_progress(op_id, 100).await;
                Ok(())
            }
            Err(e) => {
                warn!(template, number, error = %e, "file release build failed");
                self.operations().log(op_id, &format!("error: {e}")).await;
                guard.disarm();
                self.fail_release_build(template, number).await?;
                Err(match e {
                    cove_node_api::NodeError::Build(m) => ServiceError::FailedPrecondition(m),
                    other => from_node(other, "-"),
                })
            }
        }
    }

    /// Deletes release `number` of `template`: its files go, its number is never reused.
    ///
    /// # Errors
    /// `template_not_found`/`release_not_found`; `failed_precondition` (409) while a sandbox
    /// that is not deleted uses it, a warm pool pins it, or it is still building.
    pub async fn delete_release(&self, template: &str, number: u32) -> Result<(), ServiceError> {
        self.require_builtin_admin(template)?;
        if !self.template_exists(template).await? {
            return Err(ServiceError::TemplateNotFound(template.to_string()));
        }
        let release = self
            .live_releases(template)
            .await?
            .into_iter()
            .find(|r| r.number == number)
            .ok_or_else(|| {
                ServiceError::ReleaseNotFound(format!("{template} has no release {number}"))
            })?;
        if release.state == ReleaseState::Building {
            return Err(ServiceError::FailedPrecondition(format!(
                "release {number} of {template} is still building"
            )));
        }
        self.check_unused(template, Some(number)).await?;
        self.node()
            .remove_release(template, number)
            .await
            .map_err(|e| from_node(e, "-"))?;
        if self.recipe(template).is_err() {
            self.remove_stored_copy(template, &release).await?;
        }
        self.store()
            .set_release_state(template, number, ReleaseState::Deleted, None)
            .await?;
        Ok(())
    }

    /// Deletes the file template `name` and every release of it.
    ///
    /// # Errors
    /// `template_not_found`; `failed_precondition` (409) for a built-in template, or while a
    /// sandbox or warm pool uses one of its releases or one is building.
    pub async fn delete_template(&self, name: &str) -> Result<(), ServiceError> {
        if self.recipe(name).is_ok() {
            return Err(ServiceError::FailedPrecondition(format!(
                "{name} is a built-in template and cannot be deleted"
            )));
        }
        if self.file_template(name).await?.is_none() {
            return Err(ServiceError::TemplateNotFound(name.to_string()));
        }
        let releases = self.live_releases(name).await?;
        if releases.iter().any(|r| r.state == ReleaseState::Building) {
            return Err(ServiceError::FailedPrecondition(format!(
                "{name} has a release building"
            )));
        }
        self.check_unused(name, None).await?;
        for r in releases {
            self.node()
                .remove_release(name, r.number)
                .await
                .map_err(|e| from_node(e, "-"))?;
            self.remove_stored_copy(name, &r).await?;
            self.store()
                .set_release_state(name, r.number, ReleaseState::Deleted, None)
                .await?;
        }
        self.store().delete_file_template(name).await?;
        Ok(())
    }

    /// Removes the snapshot-store copy of file release `r` of `template` (what other nodes
    /// fetch it from), unless another live release has the same digest: the same inputs build
    /// the same tree, and one stored copy serves them all.
    async fn remove_stored_copy(
        &self,
        template: &str,
        r: &cove_api_types::Release,
    ) -> Result<(), ServiceError> {
        let Some(digest) = r.digest.as_deref() else {
            return Ok(());
        };
        for t in self.store().file_templates().await? {
            let shared = self.live_releases(&t.name).await?.into_iter().any(|o| {
                o.digest.as_deref() == Some(digest)
                    && o.state != ReleaseState::Failed
                    && (t.name != template || o.number != r.number)
            });
            if shared {
                return Ok(());
            }
        }
        self.node()
            .remove_stored_release(digest)
            .await
            .map_err(|e| from_node(e, "-"))
    }

    /// `failed_precondition` when a sandbox that is not deleted, or a warm pool, uses release
    /// `number` of `template` (any release when `None`).
    async fn check_unused(&self, template: &str, number: Option<u32>) -> Result<(), ServiceError> {
        let mut after = None;
        // Bounded: every page moves the cursor forward.
        for _ in 0..10_000 {
            let page = self
                .store()
                .list_sandboxes(&SandboxFilter {
                    template: Some(template.to_string()),
                    limit: 500,
                    after: after.clone(),
                    ..Default::default()
                })
                .await?;
            if let Some(s) = page
                .iter()
                .find(|s| s.state != SandboxState::Deleted && number.is_none_or(|n| s.release == n))
            {
                return Err(ServiceError::FailedPrecondition(format!(
                    "sandbox {} uses release {} of {template}",
                    s.id, s.release
                )));
            }
            match page.last() {
                Some(last) if page.len() == 500 => after = Some((last.created_at, last.id.clone())),
                _ => break,
            }
        }
        for p in self.store().list_pools().await? {
            if p.template == template && (number.is_none() || p.release == number) {
                return Err(ServiceError::FailedPrecondition(format!(
                    "warm pool {} uses {template}",
                    p.name
                )));
            }
        }
        Ok(())
    }
}

fn node_defaults(d: TemplateDefaults) -> ReleaseDefaults {
    ReleaseDefaults {
        user: d.user,
        workdir: d.workdir,
        env: d.env,
        start: d.start,
        ready: d.ready.map(|r| cove_node_api::ReadyCheck {
            command: r.command,
            timeout_s: r.timeout_s,
        }),
        labels: d.labels,
        ports: d.ports,
    }
}

fn check_name(name: &str) -> Result<(), ServiceError> {
    Ok(cove_domain::validate::resource_name("name", name)?)
}

/// The template file at `path` in the context tar.
fn file_in_context(context: &[u8], path: &str) -> Result<String, ServiceError> {
    let want = path.trim_start_matches("./");
    let mut ar = tar::Archive::new(context);
    let entries = ar
        .entries()
        .map_err(|_| invalid("body", "the build context must be a tar archive"))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|_| invalid("body", "the build context is not a valid tar archive"))?;
        let name = entry
            .path()
            .map(|p| p.to_string_lossy().trim_start_matches("./").to_string())
            .unwrap_or_default();
        if name == want {
            if entry.size() > MAX_FILE_BYTES as u64 {
                return Err(invalid("file", format!("is over {MAX_FILE_BYTES} bytes")));
            }
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .map_err(|_| invalid("file", "must be UTF-8 text"))?;
            return Ok(text);
        }
    }
    Err(invalid(
        "file",
        format!("{want} is not in the build context"),
    ))
}
