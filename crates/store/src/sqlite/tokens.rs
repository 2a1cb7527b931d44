//! Management API tokens; only their SHA-256 hashes are stored (SQLite).

use async_trait::async_trait;
use chrono::Utc;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{StoreError, TokenStore};

#[async_trait]
impl TokenStore for SqliteStore {
    async fn insert_token(&self, id: &str, name: &str, hash: &str) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO tokens (id, name, token_hash, created_at) VALUES (?, ?, ?, ?)")
            .bind(id)
            .bind(name)
            .bind(hash)
            .bind(Utc::now())
            .execute(&self.pool)
            .await
            .map_err(map_unique)?;
        Ok(())
    }

    async fn token_exists(&self, hash: &str) -> Result<bool, StoreError> {
        let row: Option<(String,)> = sqlx::query_as("SELECT id FROM tokens WHERE token_hash = ?")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn token_count(&self) -> Result<i64, StoreError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM tokens")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }
}
