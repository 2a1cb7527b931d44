//! The audit log (SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::AuditEntry;
use sqlx::Row;

use super::SqliteStore;
use crate::{AuditStore, StoreError};

#[async_trait]
impl AuditStore for SqliteStore {
    async fn append_audit(&self, e: &AuditEntry) -> Result<u64, StoreError> {
        let (seq,): (i64,) = sqlx::query_as(
            "INSERT INTO audit (time, org, actor, action, resource, status, outcome, request_id) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        )
        .bind(e.time)
        .bind(&e.org)
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.resource)
        .bind(i64::from(e.status))
        .bind(&e.outcome)
        .bind(&e.request_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(seq as u64)
    }

    async fn audit_after(
        &self,
        org: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM audit WHERE seq > ?1 AND (?2 IS NULL OR org = ?2) \
             ORDER BY seq LIMIT ?3",
        )
        .bind(after as i64)
        .bind(org)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    seq: r.try_get::<i64, _>("seq")? as u64,
                    time: r.try_get("time")?,
                    org: r.try_get("org")?,
                    actor: r.try_get("actor")?,
                    action: r.try_get("action")?,
                    resource: r.try_get("resource")?,
                    status: r.try_get::<i64, _>("status")? as u16,
                    outcome: r.try_get("outcome")?,
                    request_id: r.try_get("request_id")?,
                })
            })
            .collect()
    }

    async fn purge_audit_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM audit WHERE time < ?")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
