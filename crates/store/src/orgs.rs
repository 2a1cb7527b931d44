//! Orgs, their API keys (SHA-256 hashes only; the secret is never stored) and quotas, and what
//! an org uses now (for quota checks).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{ApiKey, CheckpointRetention, Feature, Org, Quotas};

use crate::StoreError;

/// What an org holds now (the API's type: the store fills every count).
pub use cove_api_types::OrgUsage;

/// Org and API key rows.
#[async_trait]
pub trait OrgStore: Send + Sync {
    /// Inserts an org. A taken id is [`StoreError::Conflict`].
    async fn insert_org(&self, org: &Org) -> Result<(), StoreError>;

    /// One org; [`StoreError::NotFound`] when there is none.
    async fn get_org(&self, id: &str) -> Result<Org, StoreError>;

    /// Every org, by id.
    async fn list_orgs(&self) -> Result<Vec<Org>, StoreError>;

    /// Replaces an org's quotas; returns whether the org exists.
    async fn set_org_quotas(&self, id: &str, quotas: &Quotas) -> Result<bool, StoreError>;

    /// Replaces an org's disabled features and checkpoint retention; returns whether the org
    /// exists.
    async fn set_org_settings(
        &self,
        id: &str,
        disabled_features: &[Feature],
        checkpoint_retention: &CheckpointRetention,
    ) -> Result<bool, StoreError>;

    /// Stores key `key` with the SHA-256 `hash` of its secret. A taken id or hash is
    /// [`StoreError::Conflict`]. The caller makes sure the org exists.
    async fn insert_api_key(&self, key: &ApiKey, hash: &str) -> Result<(), StoreError>;

    /// The key whose secret hashes to `hash` (revoked ones too), if any.
    async fn api_key_by_hash(&self, hash: &str) -> Result<Option<ApiKey>, StoreError>;

    /// The keys of `org`, oldest first (revoked ones too).
    async fn list_api_keys(&self, org: &str) -> Result<Vec<ApiKey>, StoreError>;

    /// Marks key `id` of `org` revoked at `at` (a key already revoked keeps its first time).
    /// Returns whether `org` has such a key.
    async fn revoke_api_key(
        &self,
        org: &str,
        id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// What `org` holds now ([`OrgUsage`]), read in one statement.
    async fn org_usage(&self, org: &str) -> Result<OrgUsage, StoreError>;
}

/// A stored byte count in MiB, rounded up (a negative count, which no row holds, is 0).
pub(crate) fn mib_of_bytes(bytes: i64) -> u64 {
    u64::try_from(bytes).unwrap_or(0).div_ceil(1 << 20)
}

/// The `disabled_features` column of a set of features: their names, comma-separated, sorted,
/// each once (`''` for none).
pub(crate) fn encode_features(features: &[Feature]) -> String {
    let mut names: Vec<&str> = features.iter().map(|f| f.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names.join(",")
}

/// The features of a `disabled_features` column. An unknown name is [`StoreError::Corrupt`].
pub(crate) fn decode_features(column: &str) -> Result<Vec<Feature>, StoreError> {
    column
        .split(',')
        .filter(|n| !n.is_empty())
        .map(|n| {
            Feature::parse(n)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown feature {n:?} of an org")))
        })
        .collect()
}
