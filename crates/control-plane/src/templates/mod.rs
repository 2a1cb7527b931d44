//! Templates and release builds: built-in recipes (`base`, `tiny`) and templates built from a
//! file (`file.rs`, the parser; `manage.rs`, create and delete; `startup.rs`, START and READY
//! when a sandbox starts).

use chrono::{Duration as ChronoDuration, Utc};
use cove_api_types::{
    BuildReleaseRequest, BuildReleaseResponse, OperationKind, Release, ReleaseState, Template,
    TemplateDefaults, TemplateList,
};
use cove_domain::ids;
use cove_node_api::{BuildEvent, RecipeInfo};
use cove_store::NewOperation;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::from_node;
use crate::operations::Begun;
use crate::orgs::scope;
use crate::{ControlPlane, ServiceError};

pub mod context;
pub mod file;
mod manage;
mod startup;

pub use manage::TemplateFileBuild;

/// Deadline of a release build (1 h: a cold `base` build downloads ~100 MB of packages).
pub const BUILD_DEADLINE_MIN: i64 = 60;

impl ControlPlane {
    /// Every template with its releases: the built-in recipes, then file templates by name.
    pub async fn list_templates(&self) -> Result<TemplateList, ServiceError> {
        let caller = scope::require()?;
        let mut templates = Vec::new();
        for r in self.node().recipes() {
            templates.push(self.template_of(r).await?);
        }
        for t in self.store().file_templates().await? {
            if !caller.sees(&t.org) {
                continue;
            }
            templates.push(self.file_template_of(t).await?);
        }
        Ok(TemplateList { templates })
    }

    /// One template.
    pub async fn get_template(&self, name: &str) -> Result<Template, ServiceError> {
        scope::require()?;
        if let Ok(recipe) = self.recipe(name) {
            return self.template_of(recipe).await;
        }
        match self.file_template(name).await? {
            Some(t) => self.file_template_of(t).await,
            None => Err(ServiceError::TemplateNotFound(name.to_string())),
        }
    }

    /// Whether `name` is a template the caller may use (a built-in recipe, shared by every
    /// org, or a file template of the caller's org).
    pub(crate) async fn template_exists(&self, name: &str) -> Result<bool, ServiceError> {
        Ok(self.recipe(name).is_ok() || self.file_template(name).await?.is_some())
    }

    /// File template `name` when the caller's org owns it.
    pub(crate) async fn file_template(
        &self,
        name: &str,
    ) -> Result<Option<cove_store::FileTemplate>, ServiceError> {
        let caller = scope::require()?;
        Ok(self
            .store()
            .file_template(name)
            .await?
            .filter(|t| caller.sees(&t.org)))
    }

    /// Refuses an org's key where a built-in template's releases would change for every org.
    pub(crate) fn require_builtin_admin(&self, name: &str) -> Result<(), ServiceError> {
        match scope::require()? {
            c if !c.has_admin_rights() && self.recipe(name).is_ok() => {
                Err(ServiceError::Forbidden(format!(
                    "{name} is a built-in template shared by every org: only the admin token                      builds or deletes its releases"
                )))
            }
            _ => Ok(()),
        }
    }

    /// What sandboxes of `release` of `template` get by default: the release's own defaults
    /// (built from a file) or its recipe's.
    ///
    /// # Errors
    /// `template_not_found` when it is neither.
    pub(crate) fn release_defaults(
        &self,
        template: &str,
        release: &Release,
    ) -> Result<TemplateDefaults, ServiceError> {
        if let Some(d) = &release.defaults {
            return Ok(d.clone());
        }
        let r = self.recipe(template)?;
        Ok(TemplateDefaults {
            user: r.user,
            workdir: r.workdir,
            env: r.env,
            start: None,
            ready: None,
            labels: Default::default(),
            ports: Vec::new(),
        })
    }

    /// The digest a node may fetch `s`'s release from the snapshot store by: releases built
    /// from a file only (every node builds the built-in recipes itself).
    pub(crate) fn fetchable_digest(&self, s: &cove_api_types::Sandbox) -> Option<String> {
        if self.recipe(&s.template).is_ok() {
            return None;
        }
        s.release_digest.clone()
    }

    fn recipe(&self, name: &str) -> Result<RecipeInfo, ServiceError> {
        self.node()
            .recipes()
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| ServiceError::TemplateNotFound(name.to_string()))
    }

    async fn template_of(&self, r: RecipeInfo) -> Result<Template, ServiceError> {
        let releases = self.live_releases(&r.name).await?;
        Ok(Template {
            latest_release: latest_ready(&releases),
            org: None,
            name: r.name,
            description: r.description,
            defaults: TemplateDefaults {
                user: r.user,
                workdir: r.workdir,
                env: r.env,
                start: None,
                ready: None,
                labels: Default::default(),
                ports: Vec::new(),
            },
            file: None,
            releases,
        })
    }

    async fn file_template_of(
        &self,
        t: cove_store::FileTemplate,
    ) -> Result<Template, ServiceError> {
        let releases = self.live_releases(&t.name).await?;
        let latest = latest_ready(&releases);
        let defaults = releases
            .iter()
            .find(|r| Some(r.number) == latest)
            .and_then(|r| r.defaults.clone())
            .unwrap_or_else(|| TemplateDefaults {
                user: "root".into(),
                workdir: "/".into(),
                env: Default::default(),
                start: None,
                ready: None,
                labels: Default::default(),
                ports: Vec::new(),
            });
        Ok(Template {
            org: Some(t.org),
            name: t.name,
            description: "built from a template file".into(),
            defaults,
            latest_release: latest,
            file: Some(t.file),
            releases,
        })
    }

    /// Releases of `template` that are not deleted, newest first.
    async fn live_releases(&self, template: &str) -> Result<Vec<Release>, ServiceError> {
        let mut releases = self.store().list_releases(template).await?;
        releases.retain(|r| r.state != ReleaseState::Deleted);
        Ok(releases)
    }

    /// Starts building the next release of a template.
    pub async fn build_release(
        &self,
        name: &str,
        req: BuildReleaseRequest,
    ) -> Result<BuildReleaseResponse, ServiceError> {
        self.require_builtin_admin(name)?;
        let recipe = match self.recipe(name) {
            Ok(r) => r,
            Err(e) if self.file_template(name).await?.is_some() => {
                let _ = e;
                return Err(ServiceError::FailedPrecondition(format!(
                    "{name} is built from a file: build its next release with POST /v1/templates \
                     and its context (the context is not kept)"
                )));
            }
            Err(e) => return Err(e),
        };
        let release = self
            .store()
            .insert_next_release(name, &recipe.recipe_hash)
            .await?;
        let new_op = NewOperation {
            id: ids::new_operation_id(),
            org: scope::acting_org()?,
            kind: OperationKind::BuildRelease,
            sandbox_id: None,
            template: Some(name.to_string()),
            release: Some(release.number),
            idempotency_key: None,
            request_hash: None,
            deadline: Utc::now() + ChronoDuration::minutes(BUILD_DEADLINE_MIN),
        };
        let Begun::New(op) = self.operations().begin(new_op).await? else {
            return Err(ServiceError::Internal("build replayed".into()));
        };
        self.store()
            .set_release_operation(name, release.number, &op.id)
            .await?;
        let mut release = release;
        release.build_operation_id = Some(op.id.clone());
        let this = self.clone();
        let (template, number, op_id) = (name.to_string(), release.number, op.id.clone());
        self.operations().run(&op, async move {
            this.run_build(&op_id, &template, number, req.no_cache)
                .await
        });
        Ok(BuildReleaseResponse {
            release,
            operation: op,
        })
    }

    async fn run_build(
        &self,
        op_id: &str,
        template: &str,
        number: u32,
        no_cache: bool,
    ) -> Result<(), ServiceError> {
        let mut guard = FailOnDrop::new(self, template, number);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<BuildEvent>(256);
        let cancel = CancellationToken::new();
        // Cancel the build if this future is dropped (deadline).
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
            .build_release(template, number, no_cache, tx, cancel.clone())
            .await;
        let _ = forward.await;
        match result {
            Ok(built) => {
                guard.disarm();
                self.store()
                    .set_release_digest(template, number, &built.digest)
                    .await?;
                self.store()
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
                warn!(template, number, error = %e, "release build failed");
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
}

impl ControlPlane {
    /// Records that the build of release `number` of `template` failed, was cancelled or was
    /// interrupted: the node's copy goes, the release is `failed`, and a file template left
    /// with no ready or building release goes too (its failed releases become `deleted`), so a
    /// failed first build does not keep a name every org shares. Built-in templates have no
    /// row and keep their failed releases.
    pub(crate) async fn fail_release_build(
        &self,
        template: &str,
        number: u32,
    ) -> Result<(), ServiceError> {
        let _ = self.node().remove_release(template, number).await;
        self.store()
            .set_release_state(template, number, ReleaseState::Failed, None)
            .await?;
        if self.recipe(template).is_ok()
            || !self
                .store()
                .delete_file_template_if_unbuilt(template)
                .await?
        {
            return Ok(());
        }
        info!(template, "template removed: it has no release that built");
        for r in self.store().list_releases(template).await? {
            if r.state == ReleaseState::Failed {
                self.store()
                    .set_release_state(template, r.number, ReleaseState::Deleted, None)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Fails a release whose build future is dropped before it finished (a cancel request or the
/// operation's deadline drops it): armed until the build's own outcome is recorded.
pub(crate) struct FailOnDrop {
    cp: Option<(ControlPlane, String, u32)>,
}

impl FailOnDrop {
    pub(crate) fn new(cp: &ControlPlane, template: &str, number: u32) -> Self {
        Self {
            cp: Some((cp.clone(), template.to_string(), number)),
        }
    }

    /// The outcome is recorded by the caller.
    pub(crate) fn disarm(&mut self) {
        self.cp = None;
    }
}

impl Drop for FailOnDrop {
    fn drop(&mut self) {
        let Some((cp, template, number)) = self.cp.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // A clean-up after its operation is gone: it runs as the server (`orgs::scope`).
        rt.spawn(scope::as_system(async move {
            if let Err(e) = cp.fail_release_build(&template, number).await {
                warn!(template, number, error = %e, "cannot fail a stopped build");
            }
        }));
    }
}

fn latest_ready(releases: &[Release]) -> Option<u32> {
    releases
        .iter()
        .filter(|x| x.state == ReleaseState::Ready)
        .map(|x| x.number)
        .max()
}
