//! Command rows and their attachment tokens (SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{CommandRecord, CommandStore, StoreError};

#[async_trait]
impl CommandStore for SqliteStore {
    async fn insert_command(&self, c: &CommandRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO commands (id, sandbox_id, attachment_token_hash, attachment_expires_at, \
             created_at, idempotency_key, request_hash, guest_restarted) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&c.id)
        .bind(&c.sandbox_id)
        .bind(&c.attachment_token_hash)
        .bind(c.attachment_expires_at)
        .bind(Utc::now())
        .bind(&c.idempotency_key)
        .bind(&c.request_hash)
        .bind(c.guest_restarted)
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_command(&self, id: &str) -> Result<CommandRecord, StoreError> {
        let r = sqlx::query("SELECT * FROM commands WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        record(&r)
    }

    async fn command_by_idempotency_key(
        &self,
        sandbox_id: &str,
        key: &str,
    ) -> Result<Option<CommandRecord>, StoreError> {
        let r = sqlx::query("SELECT * FROM commands WHERE sandbox_id = ? AND idempotency_key = ?")
            .bind(sandbox_id)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        r.as_ref().map(record).transpose()
    }

    async fn set_attachment(
        &self,
        id: &str,
        hash: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let res = sqlx::query(
            "UPDATE commands SET attachment_token_hash = ?, attachment_expires_at = ? WHERE id = ?",
        )
        .bind(hash)
        .bind(expires_at)
        .bind(id)
        .execute(&self.pool)
        .await?;
        if res.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    async fn delete_command(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM commands WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete_commands_of(&self, sandbox_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM commands WHERE sandbox_id = ?")
            .bind(sandbox_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn mark_guest_restarted(&self, sandbox_id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM commands WHERE sandbox_id = ? AND idempotency_key IS NULL")
            .bind(sandbox_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE commands SET guest_restarted = TRUE WHERE sandbox_id = ?")
            .bind(sandbox_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

fn record(r: &sqlx::sqlite::SqliteRow) -> Result<CommandRecord, StoreError> {
    Ok(CommandRecord {
        id: r.try_get("id")?,
        sandbox_id: r.try_get("sandbox_id")?,
        attachment_token_hash: r.try_get("attachment_token_hash")?,
        attachment_expires_at: r.try_get("attachment_expires_at")?,
        idempotency_key: r.try_get("idempotency_key")?,
        request_hash: r.try_get("request_hash")?,
        guest_restarted: r.try_get("guest_restarted")?,
    })
}
