//! Operations and their log lines (SQLite).

use async_trait::async_trait;
use chrono::Utc;
use cove_api_types::{Operation, OperationError, OperationKind, OperationState};
use sqlx::Row;

use super::SqliteStore;
use crate::error::map_unique;
use crate::{
    error_code_parse, parse_enum, NewOperation, OperationStore, OperationUpdate, StoreError,
};

fn row_to_operation(r: &sqlx::sqlite::SqliteRow) -> Result<Operation, StoreError> {
    let code: Option<String> = r.try_get("error_code")?;
    let error = match code {
        Some(c) => Some(OperationError {
            code: parse_enum(&c, error_code_parse)?,
            message: r
                .try_get::<Option<String>, _>("error_message")?
                .unwrap_or_default(),
        }),
        None => None,
    };
    Ok(Operation {
        id: r.try_get("id")?,
        kind: parse_enum(&r.try_get::<String, _>("kind")?, OperationKind::parse)?,
        state: parse_enum(&r.try_get::<String, _>("state")?, OperationState::parse)?,
        sandbox_id: r.try_get("sandbox_id")?,
        template: r.try_get("template")?,
        release: r.try_get::<Option<i64>, _>("release")?.map(|v| v as u32),
        progress: r.try_get::<Option<i64>, _>("progress")?.map(|v| v as u8),
        error,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        deadline: r.try_get("deadline")?,
    })
}

#[async_trait]
impl OperationStore for SqliteStore {
    async fn insert_operation(&self, op: &NewOperation) -> Result<Operation, StoreError> {
        let now = Utc::now();
        sqlx::query(
            "INSERT INTO operations (id, kind, state, sandbox_id, template, release, \
             idempotency_key, request_hash, created_at, updated_at, deadline) \
             VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&op.id)
        .bind(op.kind.as_str())
        .bind(&op.sandbox_id)
        .bind(&op.template)
        .bind(op.release)
        .bind(&op.idempotency_key)
        .bind(&op.request_hash)
        .bind(now)
        .bind(now)
        .bind(op.deadline)
        .execute(&self.pool)
        .await
        .map_err(map_unique)?;
        self.get_operation(&op.id).await
    }

    async fn get_operation(&self, id: &str) -> Result<Operation, StoreError> {
        let row = sqlx::query("SELECT * FROM operations WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_operation(&row)
    }

    async fn operation_by_idempotency_key(
        &self,
        kind: OperationKind,
        key: &str,
    ) -> Result<Option<(Operation, Option<String>)>, StoreError> {
        let row = sqlx::query("SELECT * FROM operations WHERE kind = ? AND idempotency_key = ?")
            .bind(kind.as_str())
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(r) => Ok(Some((row_to_operation(&r)?, r.try_get("request_hash")?))),
            None => Ok(None),
        }
    }

    async fn update_operation(
        &self,
        id: &str,
        u: &OperationUpdate,
    ) -> Result<Operation, StoreError> {
        sqlx::query(
            "UPDATE operations SET state = COALESCE(?, state), progress = COALESCE(?, progress), \
             error_code = COALESCE(?, error_code), error_message = COALESCE(?, error_message), \
             updated_at = ? WHERE id = ? AND state NOT IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(u.state.map(|s| s.as_str()))
        .bind(u.progress)
        .bind(u.error.as_ref().map(|e| e.code.as_str()))
        .bind(u.error.as_ref().map(|e| e.message.clone()))
        .bind(Utc::now())
        .bind(id)
        .execute(&self.pool)
        .await?;
        self.get_operation(id).await
    }

    async fn unfinished_operations(&self) -> Result<Vec<Operation>, StoreError> {
        let rows = sqlx::query("SELECT * FROM operations WHERE state IN ('pending', 'running')")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_operation).collect()
    }

    async fn list_operations(
        &self,
        sandbox_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        let rows = match sandbox_id {
            Some(id) => {
                sqlx::query(
                    "SELECT * FROM operations WHERE sandbox_id = ? \
                     ORDER BY created_at DESC, id DESC LIMIT ?",
                )
                .bind(id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query("SELECT * FROM operations ORDER BY created_at DESC, id DESC LIMIT ?")
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(row_to_operation).collect()
    }

    async fn has_unfinished_operation(&self, sandbox_id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM operations WHERE sandbox_id = ? AND state IN ('pending', 'running') \
             LIMIT 1",
        )
        .bind(sandbox_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    async fn append_operation_log(&self, id: &str, line: &str) -> Result<u64, StoreError> {
        let (seq,): (i64,) = sqlx::query_as(
            "INSERT INTO operation_logs (operation_id, seq, line) VALUES \
             (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM operation_logs WHERE operation_id = ?), ?) \
             RETURNING seq",
        )
        .bind(id)
        .bind(id)
        .bind(line)
        .fetch_one(&self.pool)
        .await?;
        Ok(seq as u64)
    }

    async fn operation_logs(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, line FROM operation_logs WHERE operation_id = ? AND seq > ? \
             ORDER BY seq LIMIT ?",
        )
        .bind(id)
        .bind(after as i64)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get::<i64, _>("seq")? as u64, r.try_get("line")?)))
            .collect()
    }
}
