//! The audit log (both backends; SQLite writes appends in batches, see `sqlite/audit.rs`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::AuditEntry;

use super::{query, to_i64, Backend, Conn, SqlRow};
use crate::{AuditStore, StoreError};

/// Inserts one audit record; returns its seq.
pub(crate) async fn insert_audit<C: Conn + ?Sized>(
    conn: &mut C,
    e: &AuditEntry,
) -> Result<u64, StoreError> {
    let row = query(
        "INSERT INTO audit (time, org, actor, action, resource, status, outcome, request_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq",
    )
    .bind(e.time)
    .bind(&e.org)
    .bind(&e.actor)
    .bind(&e.action)
    .bind(&e.resource)
    .bind(i64::from(e.status))
    .bind(&e.outcome)
    .bind(&e.request_id)
    .fetch_one(conn)
    .await?;
    row.uint("seq")
}

#[async_trait]
impl<S: Backend> AuditStore for S {
    async fn append_audit(&self, e: &AuditEntry) -> Result<u64, StoreError> {
        self.write_audit(e).await
    }

    async fn audit_after(
        &self,
        org: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = query(
            "SELECT * FROM audit WHERE seq > $1 AND (CAST($2 AS TEXT) IS NULL OR org = $2) \
             ORDER BY seq LIMIT $3",
        )
        .bind(to_i64(after)?)
        .bind(org)
        .bind(i64::from(limit))
        .fetch_all(&mut self.db())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    seq: r.uint("seq")?,
                    time: r.try_get("time")?,
                    org: r.try_get("org")?,
                    actor: r.try_get("actor")?,
                    action: r.try_get("action")?,
                    resource: r.try_get("resource")?,
                    status: r.uint("status")?,
                    outcome: r.try_get("outcome")?,
                    request_id: r.try_get("request_id")?,
                })
            })
            .collect()
    }

    async fn purge_audit_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        Ok(query("DELETE FROM audit WHERE time < $1")
            .bind(before)
            .execute(&mut self.db())
            .await?)
    }
}
