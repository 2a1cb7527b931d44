//! Operations and their log lines (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{Operation, OperationError, OperationKind, OperationState};

use super::{query, to_i64, Backend, Conn, SqlRow, Tx, XactLock};
use crate::error::map_unique;
use crate::{
    error_code_parse, parse_enum, NewOperation, OperationStore, OperationUpdate, StoreError,
};

pub(super) fn row_to_operation(r: &impl SqlRow) -> Result<Operation, StoreError> {
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
        release: r.opt_uint("release")?,
        progress: r.opt_uint("progress")?,
        error,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        deadline: r.try_get("deadline")?,
    })
}

/// Inserts the operation `op` in `state` (on `sandbox_id`), created `at`; returns it.
pub(super) async fn insert<C: Conn + ?Sized>(
    conn: &mut C,
    op: &NewOperation,
    state: OperationState,
    sandbox_id: Option<&str>,
    at: DateTime<Utc>,
) -> Result<Operation, StoreError> {
    let row = query(
        "INSERT INTO operations (id, kind, state, sandbox_id, template, release, \
         idempotency_key, request_hash, created_at, updated_at, deadline, org) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11) RETURNING *",
    )
    .bind(&op.id)
    .bind(op.kind.as_str())
    .bind(state.as_str())
    .bind(sandbox_id)
    .bind(&op.template)
    .bind(op.release.map(i64::from))
    .bind(&op.idempotency_key)
    .bind(&op.request_hash)
    .bind(at)
    .bind(op.deadline)
    .bind(&op.org)
    .fetch_one(conn)
    .await
    .map_err(map_unique)?;
    row_to_operation(&row)
}

#[async_trait]
impl<S: Backend> OperationStore for S {
    async fn insert_operation(&self, op: &NewOperation) -> Result<Operation, StoreError> {
        let sandbox = op.sandbox_id.as_deref();
        insert(
            &mut self.db(),
            op,
            OperationState::Pending,
            sandbox,
            Utc::now(),
        )
        .await
    }

    async fn get_operation(&self, id: &str) -> Result<Operation, StoreError> {
        let row = query("SELECT * FROM operations WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
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
        let row =
            query("SELECT * FROM operations WHERE org = $1 AND kind = $2 AND idempotency_key = $3")
                .bind(org)
                .bind(kind.as_str())
                .bind(key)
                .fetch_optional(&mut self.db())
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
        query(
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
        .execute(&mut self.db())
        .await?;
        self.get_operation(id).await
    }

    async fn unfinished_operations(&self) -> Result<Vec<Operation>, StoreError> {
        let rows = query("SELECT * FROM operations WHERE state IN ('pending', 'running')")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_operation).collect()
    }

    async fn list_operations(
        &self,
        org: Option<&str>,
        sandbox_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError> {
        let rows = query(
            "SELECT * FROM operations WHERE (CAST($1 AS TEXT) IS NULL OR org = $1) \
             AND (CAST($2 AS TEXT) IS NULL OR sandbox_id = $2) ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(org)
        .bind(sandbox_id)
        .bind(i64::from(limit))
        .fetch_all(&mut self.db())
        .await?;
        rows.iter().map(row_to_operation).collect()
    }

    async fn has_unfinished_operation(&self, sandbox_id: &str) -> Result<bool, StoreError> {
        let row = query(
            "SELECT 1 FROM operations WHERE sandbox_id = $1 AND state IN ('pending', 'running') \
             LIMIT 1",
        )
        .bind(sandbox_id)
        .fetch_optional(&mut self.db())
        .await?;
        Ok(row.is_some())
    }

    async fn append_operation_log(&self, id: &str, line: &str) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        S::lock_xact(&mut tx, XactLock::OperationLog, id).await?;
        let row = query(
            "INSERT INTO operation_logs (operation_id, seq, line) VALUES \
             ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM operation_logs WHERE operation_id = $1), \
             $2) RETURNING seq",
        )
        .bind(id)
        .bind(line)
        .fetch_one(&mut tx)
        .await?;
        tx.commit().await?;
        row.uint("seq")
    }

    async fn operation_logs(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        let rows = query(
            "SELECT seq, line FROM operation_logs WHERE operation_id = $1 AND seq > $2 \
             ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(to_i64(after)?)
        .bind(i64::from(limit))
        .fetch_all(&mut self.db())
        .await?;
        rows.iter()
            .map(|r| Ok((r.uint("seq")?, r.try_get("line")?)))
            .collect()
    }

    async fn purge_operations_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        query(
            "DELETE FROM operation_logs WHERE operation_id IN (SELECT id FROM operations WHERE \
             updated_at < $1 AND state IN ('succeeded', 'failed', 'cancelled'))",
        )
        .bind(before)
        .execute(&mut tx)
        .await?;
        let ops = query(
            "DELETE FROM operations WHERE updated_at < $1 \
             AND state IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(before)
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(ops)
    }
}
