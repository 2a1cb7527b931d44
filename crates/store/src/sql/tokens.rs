//! Management API token hashes (both backends).

use async_trait::async_trait;
use chrono::Utc;

use super::{query, Backend, SqlRow};
use crate::error::map_unique;
use crate::{StoreError, TokenStore};

#[async_trait]
impl<S: Backend> TokenStore for S {
    async fn insert_token(&self, id: &str, name: &str, hash: &str) -> Result<(), StoreError> {
        query("INSERT INTO tokens (id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(id)
            .bind(name)
            .bind(hash)
            .bind(Utc::now())
            .execute(&mut self.db())
            .await
            .map_err(map_unique)?;
        Ok(())
    }

    async fn token_exists(&self, hash: &str) -> Result<bool, StoreError> {
        let row = query("SELECT id FROM tokens WHERE token_hash = $1")
            .bind(hash)
            .fetch_optional(&mut self.db())
            .await?;
        Ok(row.is_some())
    }

    async fn token_count(&self) -> Result<i64, StoreError> {
        let row = query("SELECT COUNT(*) FROM tokens")
            .fetch_one(&mut self.db())
            .await?;
        Ok(row.try_get(0)?)
    }
}
