//! Management API tokens; only their SHA-256 hashes are stored.

use async_trait::async_trait;

use crate::StoreError;

/// Token hashes.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Stores a token hash under `id`; a taken id or hash is [`StoreError::Conflict`].
    async fn insert_token(&self, id: &str, name: &str, hash: &str) -> Result<(), StoreError>;

    /// Whether a token with this hash exists.
    async fn token_exists(&self, hash: &str) -> Result<bool, StoreError>;

    /// Number of tokens.
    async fn token_count(&self) -> Result<i64, StoreError>;
}
