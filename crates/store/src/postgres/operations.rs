//! Operations and their log lines (PostgreSQL).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{Operation, OperationError, OperationKind, OperationState};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{from_i64, to_i64, PgStore, LOCK_OPERATION_LOG};
use crate::error::map_unique;
use crate::{
    error_code_parse, parse_enum, NewOperation, OperationStore, OperationUpdate, StoreError,
};

pub(super) fn row_to_operation(r: &PgRow) -> Result<Operation, StoreError> {
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
        org: r.try_get("org")?,
        kind: parse_enum(&r.try_get::<String, _>("kind")?, OperationKind::parse)?,
        state: parse_enum(&r.try_get::<String, _>("state")?, OperationState::parse)?,
        sandbox_id: r.try_get("sandbox_id")?,
        template: r.try_get("template")?,
        release: r
            .try_get::<Option<i64>, _>("release")?
            .map(|v| from_i64(v, "release"))
            .transpose()?,
        progress: r
            .try_get::<Option<i64>, _>("progress")?
            .map(|v| from_i64(v, "progress"))
            .transpose()?,
        error,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        deadline: r.try_get("deadline")?,
    })
}

#[async_trait]
impl OperationStore for PgStore {
    async fn insert_operation(&self, op: &NewOperation) -> Result<Operation, StoreError> {
        let now = Utc::now();
        let row = sqlx::query(
            "INSERT INTO operations (id, kind, state, sandbox_id, template, release, \
             idempotency_key, request_hash, created_at, updated_at, deadline, org) \
             VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $8, $9, $10) RETURNING *",
        )
        .bind(&op.id)
        .bind(op.kind.as_str())
        .bind(&op.sandbox_id)
        .bind(&op.template)
        .bind(op.release.map(i64::from))
        .bind(&op.idempotency_key)
        .bind(&op.request_hash)
        .bind(now)
        .bind(op.deadline)
        .bind(&op.org)
        .fetch_one(&self.pool)
        .await
        .map_err(map_unique)?;
        row_to_operation(&row)
    }

    async fn get_operation(&self, id: &str) -> Result<Operation, StoreError> {
        let row = sqlx::query("SELECT * FROM operations WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        row_to_operation(&row)
    }

    async fn operation_by_idempotency_key(
        &self,
        org: &str,
        kind: OperationKind,
        key: &str,
    ) -> Result<Option<(Operation, Option<String>)>, StoreError> {
        let row = sqlx::query(
            "SELECT * FROM operations WHERE org = $1 AND kind = $2 AND idempotency_key = $3",
        )
        .bind(org)
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
            "UPDATE operations SET state = COALESCE($1, state), \
             progress = COALESCE($2, progress), error_code = COALESCE($3, error_code), \
             error_message = COALESCE($4, error_message), updated_at = $5 \
             WHERE id = $6 AND state NOT IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(u.state.map(|s| s.as_str()))
        .bind(u.progress.map(i64::from))
        .bind(u.error.as_ref().map(|e| e.code.as_str()))
        .bind(u.error.as_ref().map(|e| e.message.as_str()))
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
        org: Option<&str>,
        sandbox_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM operations WHERE ($1::TEXT IS NULL OR org = $1) \
             AND ($2::TEXT IS NULL OR sandbox_id = $2) ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(org)
        .bind(sandbox_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(row_to_operation).collect()
    }

    async fn has_unfinished_operation(&self, sandbox_id: &str) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM operations WHERE sandbox_id = $1 AND state IN ('pending', 'running') \
             LIMIT 1",
        )
        .bind(sandbox_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    async fn append_operation_log(&self, id: &str, line: &str) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(LOCK_OPERATION_LOG)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let (seq,): (i64,) = sqlx::query_as(
            "INSERT INTO operation_logs (operation_id, seq, line) VALUES \
             ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM operation_logs WHERE operation_id = $1), \
             $2) RETURNING seq",
        )
        .bind(id)
        .bind(line)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        from_i64(seq, "seq")
    }

    async fn operation_logs(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, line FROM operation_logs WHERE operation_id = $1 AND seq > $2 \
             ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(to_i64(after)?)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((from_i64(r.try_get("seq")?, "seq")?, r.try_get("line")?)))
            .collect()
    }

    async fn purge_operations_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM operation_logs WHERE operation_id IN (SELECT id FROM operations WHERE \
             updated_at < $1 AND state IN ('succeeded', 'failed', 'cancelled'))",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?;
        let ops = sqlx::query(
            "DELETE FROM operations WHERE updated_at < $1 \
             AND state IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ops.rows_affected())
    }
}
