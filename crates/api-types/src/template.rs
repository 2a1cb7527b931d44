//! Templates and releases.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Operation;

/// State of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseState {
    /// Being built.
    Building,
    /// Built; sandboxes can use it.
    Ready,
    /// The build failed; nothing of it is kept.
    Failed,
}

impl ReleaseState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseState::Building => "building",
            ReleaseState::Ready => "ready",
            ReleaseState::Failed => "failed",
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "building" => ReleaseState::Building,
            "ready" => ReleaseState::Ready,
            "failed" => ReleaseState::Failed,
            _ => return None,
        })
    }
}

/// Defaults a template gives its sandboxes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TemplateDefaults {
    /// Default user of commands.
    pub user: String,
    /// Default working directory of commands.
    pub workdir: String,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
}

/// An immutable, numbered build of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Release {
    /// Template name.
    pub template: String,
    /// Release number, 1, 2, ... per template.
    pub number: u32,
    /// Build state.
    pub state: ReleaseState,
    /// Size of the root filesystem in bytes (when ready).
    pub size_bytes: Option<u64>,
    /// Hash of the recipe it was built from.
    pub recipe_hash: String,
    /// Content digest of the built root filesystem and defaults (`sha256:` + 64 hex digits;
    /// when ready). Pin it with `template@sha256:…` on create.
    #[serde(default)]
    pub digest: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// A template: a named starting environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Template {
    /// Name (`base`, `tiny`).
    pub name: String,
    /// What it contains.
    pub description: String,
    /// Defaults of its sandboxes.
    pub defaults: TemplateDefaults,
    /// Newest ready release.
    pub latest_release: Option<u32>,
    /// Every release, newest first.
    pub releases: Vec<Release>,
}

/// `GET /v1/templates` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TemplateList {
    /// All templates.
    pub templates: Vec<Template>,
}

/// `POST /v1/templates/{name}/releases` body (may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildReleaseRequest {
    /// Skip the node's build cache and build from scratch.
    #[serde(default)]
    pub no_cache: bool,
}

/// `202` answer of `POST /v1/templates/{name}/releases`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BuildReleaseResponse {
    /// The release being built.
    pub release: Release,
    /// The build operation; its log streams at `GET /v1/operations/{id}/logs`.
    pub operation: Operation,
}
