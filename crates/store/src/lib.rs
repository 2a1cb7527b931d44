//! Cove's SQL store: tokens, orgs and their API keys, releases, sandboxes, warm pools,
//! operations and their logs, commands, events, checkpoints, the audit log, volumes, and what
//! control-plane replicas share (nodes, placements, operation leases, the leader).
//!
//! [`Store`] is the contract the control plane holds as `Arc<dyn Store>`; it is the sum of one
//! trait per resource ([`SandboxStore`], [`LifecycleStore`], [`EventStore`],
//! [`OperationStore`], [`PoolStore`], [`CommandStore`], [`ReleaseStore`], [`TemplateStore`],
//! [`TokenStore`], [`CheckpointStore`], [`OrgStore`], [`AuditStore`], [`VolumeStore`], [`ClusterStore`]). Two backends
//! implement it: [`SqliteStore`] (the embedded default) and [`PgStore`] (PostgreSQL). Each
//! keeps its own migrations (`migrations/sqlite/`, `migrations/postgres/`), applied at open;
//! both run the same queries and row mappings (`sql/`), and differ only where their SQL or
//! their concurrency does (`sqlite/`, `postgres/`).
//! Every write is one statement or one transaction, so a crash leaves either the old or the
//! new row. `tests/conformance.rs` is the one suite every backend passes.
//!
//! [`open`] picks the backend from a URL: `sqlite://<path>` or `postgres://...`.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

mod audit;
mod checkpoints;
mod cluster;
mod commands;
mod error;
mod events;
mod lifecycle;
mod locks;
mod operations;
mod orgs;
mod pools;
pub mod postgres;
mod releases;
mod sandboxes;
mod sql;
pub mod sqlite;
mod templates;
mod tokens;
mod volumes;

pub use audit::AuditStore;
pub use checkpoints::CheckpointStore;
pub use cluster::{ClusterStore, Leadership, NodeRecord, PlacementRecord};
pub use commands::{CommandRecord, CommandStore};
pub use error::StoreError;
pub use events::EventStore;
pub use lifecycle::{LifecycleStore, NewEvent};
pub use locks::{LockStore, StoreLock};
pub use operations::{NewOperation, OperationStore, OperationUpdate};
pub use orgs::{OrgStore, OrgUsage};
pub use pools::{PoolClaim, PoolMember, PoolRecord, PoolStore};
pub use postgres::PgStore;
pub use releases::ReleaseStore;
pub use sandboxes::{SandboxFilter, SandboxStore};
pub use sqlite::SqliteStore;
pub use templates::{FileTemplate, TemplateStore};
pub use tokens::TokenStore;
pub use volumes::{VolumeObject, VolumeRecord, VolumeStore};

/// The whole store: every resource's methods, behind one object-safe trait. Share it as
/// `Arc<dyn Store>`; every method takes `&self` and is safe to call concurrently.
#[async_trait]
pub trait Store:
    SandboxStore
    + LifecycleStore
    + EventStore
    + OperationStore
    + PoolStore
    + CommandStore
    + ReleaseStore
    + TemplateStore
    + TokenStore
    + CheckpointStore
    + OrgStore
    + AuditStore
    + VolumeStore
    + ClusterStore
    + LockStore
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The backend's name: `sqlite` or `postgres` (for logs).
    fn backend(&self) -> &'static str;

    /// Closes the connection pool (waits for connections in use to be returned).
    async fn close(&self);
}

/// Opens the store named by `url` and applies its migrations:
/// - `sqlite://<path>` (`sqlite:///var/lib/cove/store.db` for an absolute path): the SQLite
///   file at `<path>`, created if missing;
/// - `postgres://...` or `postgresql://...`: a PostgreSQL database (the usual libpq URL;
///   `?host=/run/postgresql` for a unix socket).
///
/// Errors: [`StoreError::Config`] for any other scheme; otherwise what the backend's open
/// returns.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err(StoreError::Config("sqlite:// needs a file path".into()));
        }
        return Ok(Arc::new(SqliteStore::open(Path::new(path)).await?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(PgStore::connect(url).await?));
    }
    Err(StoreError::Config(
        "store URL must start with sqlite:// or postgres://".into(),
    ))
}

/// Parses a stored enum's wire string.
pub(crate) fn parse_enum<T>(s: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
    parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown value {s:?}")))
}

/// A JSON object column (`env`, `metadata`) as a map.
pub(crate) fn json_map(s: &str) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A map as a JSON object column.
pub(crate) fn map_json(
    m: &std::collections::BTreeMap<String, String>,
) -> Result<String, StoreError> {
    serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The `network` column (an egress policy as JSON) back to the policy.
pub(crate) fn json_policy(s: &str) -> Result<cove_api_types::EgressPolicy, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// An egress policy as the `network` column.
pub(crate) fn policy_json(p: &cove_api_types::EgressPolicy) -> Result<String, StoreError> {
    serde_json::to_string(p).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The `secrets` column (`{NAME: {hosts}}`) back to the map.
pub(crate) fn json_secrets(
    s: &str,
) -> Result<std::collections::BTreeMap<String, cove_api_types::SandboxSecret>, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The secrets' public part as the `secrets` column.
pub(crate) fn secrets_json(
    m: &std::collections::BTreeMap<String, cove_api_types::SandboxSecret>,
) -> Result<String, StoreError> {
    serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The `defaults` column of a release (JSON) back to the defaults.
pub(crate) fn json_defaults(
    s: Option<String>,
) -> Result<Option<cove_api_types::TemplateDefaults>, StoreError> {
    s.map(|s| serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(e.to_string())))
        .transpose()
}

/// Release defaults as the `defaults` column.
pub(crate) fn defaults_json(d: &cove_api_types::TemplateDefaults) -> Result<String, StoreError> {
    serde_json::to_string(d).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// An operation error code's wire string back to the code.
pub(crate) fn error_code_parse(s: &str) -> Option<cove_api_types::ErrorCode> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
}

#[cfg(test)]
mod migration_tests {
    /// Each backend's migrations have distinct versions: branches that each add "the next"
    /// migration otherwise merge into two files of one version, and every store then fails to
    /// open (`UNIQUE constraint failed: _sqlx_migrations.version`).
    #[test]
    fn migration_versions_are_unique_per_backend() {
        for backend in ["sqlite", "postgres"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(backend);
            let mut seen = std::collections::BTreeMap::new();
            for entry in std::fs::read_dir(&dir).expect("migrations dir") {
                let name = entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                let version = name.split('_').next().unwrap_or_default().to_string();
                if let Some(other) = seen.insert(version.clone(), name.clone()) {
                    panic!("{backend}: {name} and {other} share version {version}");
                }
            }
        }
    }
}
