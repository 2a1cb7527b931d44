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
    /// Deleted: its files are gone and its number is never reused.
    Deleted,
}

impl ReleaseState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseState::Building => "building",
            ReleaseState::Ready => "ready",
            ReleaseState::Failed => "failed",
            ReleaseState::Deleted => "deleted",
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "building" => ReleaseState::Building,
            "ready" => ReleaseState::Ready,
            "failed" => ReleaseState::Failed,
            "deleted" => ReleaseState::Deleted,
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
    /// A shell command started when a sandbox starts (a template file's `START`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// A check that must pass before a sandbox counts as running (a template file's `READY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyCheck>,
    /// A template file's `LABEL`s (recorded only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// TCP ports a template file `EXPOSE`s (recorded only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
}

/// A readiness check: a shell command run until it exits 0, at most `timeout_s` seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReadyCheck {
    /// Shell command (`/bin/sh -c`).
    pub command: String,
    /// Seconds a sandbox may take to pass it; the create fails after that.
    pub timeout_s: u64,
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
    /// Defaults of its sandboxes, for a release built from a file (releases of a built-in
    /// recipe use the template's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<TemplateDefaults>,
    /// The operation that built it: its log (`GET /v1/operations/{id}/logs`) is the build log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_operation_id: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// A template: a named starting environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Template {
    /// Name (`base`, `tiny`).
    pub name: String,
    /// The org that owns it; absent for a built-in template (`base`, `tiny`), which every org
    /// may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
    /// What it contains.
    pub description: String,
    /// Defaults of its sandboxes.
    pub defaults: TemplateDefaults,
    /// Newest ready release.
    pub latest_release: Option<u32>,
    /// The template file it is built from (`None` for a built-in recipe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
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

/// Query of `POST /v1/templates` (the body is the build context, a tar archive holding the
/// template file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplateQuery {
    /// Template name: `[a-z0-9][a-z0-9_-]*`, at most 63 bytes, not a built-in recipe's.
    /// An existing file template gets its next release.
    pub name: String,
    /// Path of the template file inside the context (default `Dockerfile`).
    #[serde(default)]
    pub file: Option<String>,
    /// Ignore cached step results.
    #[serde(default)]
    pub no_cache: bool,
    /// The egress policy of the build's `RUN` steps, as JSON of the shape sandboxes take
    /// (`{"internet": false, "allow": ["pypi.org"], "deny": []}`); default: the internet
    /// open, as for a sandbox. On a node without sandbox networks only the default is
    /// accepted (`501 not_implemented`), and steps then have loopback only. The policy is not
    /// part of the step cache key: it decides what a step may reach, not what it writes.
    #[serde(default, with = "policy_json", skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>)]
    pub network: Option<crate::EgressPolicy>,
    /// Build arguments, as a JSON object of strings (`{"VERSION": "1.2"}`): each replaces the
    /// default of the file's `ARG` of that name, literally (`docker build --build-arg`).
    #[serde(
        default,
        with = "args_json",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    #[param(value_type = Option<String>)]
    pub build_args: BTreeMap<String, String>,
}

/// Build arguments carried as one JSON string (a query parameter).
mod args_json {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        a: &BTreeMap<String, String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(a).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text).map_err(serde::de::Error::custom)
    }
}

/// An egress policy carried as one JSON string (a query parameter).
mod policy_json {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        p: &Option<crate::EgressPolicy>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => {
                let text = serde_json::to_string(p).map_err(serde::ser::Error::custom)?;
                s.serialize_str(&text)
            }
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<crate::EgressPolicy>, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}
