//! Command rows and their attachment tokens (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{query, Backend, SqlRow, Tx};
use crate::error::map_unique;
use crate::{CommandRecord, CommandStore, StoreError};

#[async_trait]
impl<S: Backend> CommandStore for S {
    async fn insert_command(&self, c: &CommandRecord) -> Result<(), StoreError> {
        query(
            "INSERT INTO commands (id, sandbox_id, attachment_token_hash, attachment_expires_at, \
             created_at, idempotency_key, request_hash, guest_restarted) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&c.id)
        .bind(&c.sandbox_id)
        .bind(&c.attachment_token_hash)
        .bind(c.attachment_expires_at)
        .bind(Utc::now())
        .bind(&c.idempotency_key)
        .bind(&c.request_hash)
        .bind(c.guest_restarted)
        .execute(&mut self.db())
        .await
        .map_err(map_unique)?;
        Ok(())
    }

    async fn get_command(&self, id: &str) -> Result<CommandRecord, StoreError> {
        let r = query("SELECT * FROM commands WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
            .await?
            .ok_or(StoreError::NotFound)?;
        record(&r)
    }

    async fn command_by_idempotency_key(
        &self,
        sandbox_id: &str,
        key: &str,
    ) -> Result<Option<CommandRecord>, StoreError> {
        let r = query("SELECT * FROM commands WHERE sandbox_id = $1 AND idempotency_key = $2")
            .bind(sandbox_id)
            .bind(key)
            .fetch_optional(&mut self.db())
            .await?;
        r.as_ref().map(record).transpose()
    }

    async fn set_attachment(
        &self,
        id: &str,
        hash: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let res = query(
            "UPDATE commands SET attachment_token_hash = $1, attachment_expires_at = $2 \
             WHERE id = $3",
        )
        .bind(hash)
        .bind(expires_at)
        .bind(id)
        .execute(&mut self.db())
        .await?;
        if res == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    async fn delete_command(&self, id: &str) -> Result<(), StoreError> {
        query("DELETE FROM commands WHERE id = $1")
            .bind(id)
            .execute(&mut self.db())
            .await?;
        Ok(())
    }

    async fn delete_commands_of(&self, sandbox_id: &str) -> Result<(), StoreError> {
        query("DELETE FROM commands WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(&mut self.db())
            .await?;
        Ok(())
    }

    async fn mark_guest_restarted(&self, sandbox_id: &str) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        query("DELETE FROM commands WHERE sandbox_id = $1 AND idempotency_key IS NULL")
            .bind(sandbox_id)
            .execute(&mut tx)
            .await?;
        query("UPDATE commands SET guest_restarted = TRUE WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(&mut tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

fn record(r: &impl SqlRow) -> Result<CommandRecord, StoreError> {
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
