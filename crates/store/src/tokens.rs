//! Management API tokens; only their SHA-256 hashes are stored.

use chrono::Utc;

use crate::{map_unique, Store, StoreError};

impl Store {
    /// Stores a token hash under `id`.
    pub async fn insert_token(&self, id: &str, name: &str, hash: &str) -> Result<(), StoreError> {
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

    /// Whether a token with this hash exists.
    pub async fn token_exists(&self, hash: &str) -> Result<bool, StoreError> {
        let row: Option<(String,)> = sqlx::query_as("SELECT id FROM tokens WHERE token_hash = ?")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    /// Number of tokens.
    pub async fn token_count(&self) -> Result<i64, StoreError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM tokens")
            .fetch_one(&self.pool)
            .await?;
        Ok(n)
    }
}
