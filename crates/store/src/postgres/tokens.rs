//! Management API token hashes (PostgreSQL).

use async_trait::async_trait;
use chrono::Utc;

use super::PgStore;
use crate::error::map_unique;
use crate::{StoreError, TokenStore};

#[async_trait]
impl TokenStore for PgStore {
    async fn insert_token(&self, id: &str, name: &str, hash: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO tokens (id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)",
        )
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
        let row: Option<(String,)> = sqlx::query_as("SELECT id FROM tokens WHERE token_hash = $1")
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
