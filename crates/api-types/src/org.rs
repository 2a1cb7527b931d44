//! Orgs, their API keys and quotas, and the audit log (`/v1/orgs`, `/v1/audit`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The built-in org: the admin token acts in it, and everything made before orgs existed
/// belongs to it.
pub const DEFAULT_ORG: &str = "default";

/// An org: the owner of sandboxes, commands, operations, events, checkpoints, pools and file
/// templates. Another org's resources answer `404` as if they did not exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Org {
    /// Id (1 to 40 of `a-z`, `0-9`, `-`, starting with a letter), chosen at creation.
    pub id: String,
    /// Its quotas.
    pub quotas: Quotas,
    /// Features turned off for this org (each answers `403 feature_disabled` to it), by name.
    /// A feature the server turns off (`--disable-feature`) is off for every org whatever
    /// this says.
    #[serde(default)]
    pub disabled_features: Vec<Feature>,
    /// How long its checkpoints are kept (default: until deleted).
    #[serde(default)]
    pub checkpoint_retention: CheckpointRetention,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// What it holds now, counted as each quota counts (`GET /v1/orgs/{org}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<OrgUsage>,
}

/// What an org holds now, one count per quota that bounds it. Its warm pools' members count
/// like its other sandboxes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrgUsage {
    /// Sandboxes alive (every state but `suspended` and `deleted`; a `failed` one may still
    /// hold node resources, so it counts until deleted): `max_running`.
    pub running: u64,
    /// The vCPUs of those together: `max_vcpus`.
    pub vcpus: u64,
    /// The memory (MiB) of those together: `max_memory_mib`.
    pub memory_mib: u64,
    /// Sandboxes in every state but `deleted`: `max_sandboxes`.
    pub sandboxes: u64,
    /// The `disk_mib` of those sandboxes together plus the sizes of the org's volumes:
    /// `max_disk_mib`.
    pub disk_mib: u64,
    /// The bytes of the org's checkpoints (imported ones too) and of its suspended sandboxes'
    /// snapshots, in MiB rounded up: `max_snapshot_mib`.
    #[serde(default)]
    pub snapshot_mib: u64,
}

/// An incubating feature that can be turned off for a server (`cove server
/// --disable-feature`) or for one org (`disabled_features`). A call to a feature turned off
/// answers `403 feature_disabled` naming it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// Checkpoints: take, list, get, delete, roll back to, create a sandbox from one.
    Checkpoints,
    /// Forks of a running sandbox.
    Fork,
    /// Checkpoint archives: export (download) and import (upload).
    Export,
    /// Persistent volumes: create, list, get, delete, their files, mounting them at create.
    Volumes,
}

impl Feature {
    /// Every feature.
    pub const ALL: &'static [Feature] = &[
        Feature::Checkpoints,
        Feature::Fork,
        Feature::Export,
        Feature::Volumes,
    ];

    /// Its name (the wire string, as `--disable-feature` takes it and `feature_disabled`
    /// names it).
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Checkpoints => "checkpoints",
            Feature::Fork => "fork",
            Feature::Export => "export",
            Feature::Volumes => "volumes",
        }
    }

    /// The feature of a name; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<Feature> {
        Feature::ALL.iter().copied().find(|f| f.as_str() == s)
    }
}

/// How long an org's checkpoints are kept; an absent limit is no limit (the default). The
/// server's retention pass (every minute) deletes, oldest first, the `ready` and `failed`
/// checkpoints past either limit, from the store and the snapshot store; a checkpoint still
/// being saved is never deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRetention {
    /// Most checkpoints kept per sandbox (1 to 10000); the oldest beyond it go. Checkpoints
    /// of deleted sandboxes count per the sandbox they were taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_sandbox: Option<u32>,
    /// Most age of a checkpoint, in seconds (60 to 315360000); older ones go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_s: Option<u64>,
}

/// Body of `PATCH /v1/orgs/{org}`: each field given replaces the org's; absent ones stay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateOrgRequest {
    /// New quotas (replacing all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Quotas>,
    /// New set of features turned off for the org (`[]` turns every one back on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_features: Option<Vec<Feature>>,
    /// New checkpoint retention (`{}`: keep until deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_retention: Option<CheckpointRetention>,
}

/// An org's quotas; an absent limit is unlimited (the default of every limit). The members of
/// the org's warm pools count like its other sandboxes (claimed or not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Most sandboxes alive at once (every state but `suspended` and `deleted`: those hold no
    /// CPU or memory; a `failed` one counts until deleted, as it may still hold them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Most vCPUs of those sandboxes together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_vcpus: Option<u32>,
    /// Most memory (MiB) of those sandboxes together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mib: Option<u64>,
    /// Most sandbox creates (creates from a checkpoint and forks too) accepted per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_creates_per_s: Option<u32>,
    /// Most sandboxes that exist at once, in every state but `deleted` (suspended and failed
    /// ones too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u32>,
    /// Most disk (MiB): the `disk_mib` of those sandboxes together plus the sizes of the
    /// org's volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk_mib: Option<u64>,
    /// Most snapshot bytes (MiB) in the snapshot store: the org's checkpoints (imported ones
    /// too) and the snapshots of its suspended sandboxes. A checkpoint is refused while the
    /// org is at or past it (its size is known once saved); an import, once its size is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_mib: Option<u64>,
}

/// Body of `POST /v1/orgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrgRequest {
    /// The org's id (1 to 40 of `a-z`, `0-9`, `-`, starting with a letter).
    pub id: String,
    /// Its quotas (default: unlimited).
    #[serde(default)]
    pub quotas: Quotas,
    /// Features turned off for it (default: none).
    #[serde(default)]
    pub disabled_features: Vec<Feature>,
    /// How long its checkpoints are kept (default: until deleted).
    #[serde(default)]
    pub checkpoint_retention: CheckpointRetention,
}

/// Answer of `GET /v1/orgs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OrgList {
    /// Every org, by id.
    pub orgs: Vec<Org>,
}

/// An API key of an org (never its secret, which is shown once, at creation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiKey {
    /// Id (`key-` + 16 lowercase letters/digits).
    pub id: String,
    /// The org it acts as.
    pub org: String,
    /// A name to tell keys apart.
    pub name: String,
    /// The secret's first characters (`cove_` + 8), to recognise it.
    pub prefix: String,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// When it was revoked (a revoked key answers `401`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Body of `POST /v1/orgs/{org}/keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyRequest {
    /// A name to tell keys apart (default: empty).
    #[serde(default)]
    pub name: String,
}

/// `201` answer of `POST /v1/orgs/{org}/keys`: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreatedApiKey {
    /// The key.
    pub key: ApiKey,
    /// The secret to send as `Authorization: Bearer` (or E2B's `X-API-Key`). Only its
    /// SHA-256 hash is stored.
    pub secret: String,
}

/// Answer of `GET /v1/orgs/{org}/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiKeyList {
    /// The org's keys, oldest first (revoked ones too).
    pub keys: Vec<ApiKey>,
}

/// One audit record: who did what, to what, when, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Position in the log (increasing; the cursor of `GET /v1/audit`).
    pub seq: u64,
    /// When the request was answered.
    pub time: DateTime<Utc>,
    /// The org the caller acted in.
    pub org: String,
    /// Who: `admin` (the admin token) or the API key's id.
    pub actor: String,
    /// What: the method and route, e.g. `POST /v1/sandboxes/{id}/pause`.
    pub action: String,
    /// The resource the route names (sandbox, command, checkpoint, operation, pool, template,
    /// org or key id), or the one a create made when the answer names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
    /// `ok` for a 2xx/3xx answer, else the error's code (e.g. `quota_exceeded`).
    pub outcome: String,
    /// The request's id (`x-request-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Answer of `GET /v1/audit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditPage {
    /// Records after the cursor, oldest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `?after=` for the next page (absent when this page is the last for now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
}
