//! The audit log (SQLite).

use parking_lot::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::AuditEntry;
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::oneshot;

use super::SqliteStore;
use crate::{AuditStore, StoreError};

type Waiter = oneshot::Sender<Result<u64, StoreError>>;

/// Audit records waiting to be written, each with who waits for its sequence number.
#[derive(Debug, Default)]
pub(super) struct AuditQueue {
    queued: Mutex<Vec<(AuditEntry, Waiter)>>,
    /// Held by the one flush that writes at a time; the others queue here, not in SQLite.
    flushing: tokio::sync::Mutex<()>,
}

impl AuditQueue {
    fn push(&self, e: AuditEntry, done: Waiter) {
        self.queued.lock().push((e, done));
    }

    fn take(&self) -> Vec<(AuditEntry, Waiter)> {
        std::mem::take(&mut *self.queued.lock())
    }
}

/// Writes `batch` in one transaction and answers each waiter with its record's sequence
/// number; when that fails, each record on its own, so each waiter gets its own answer.
async fn write_batch(conn: &mut SqliteConnection, batch: Vec<(AuditEntry, Waiter)>) {
    let together = async {
        let mut tx = conn.begin().await?;
        let mut seqs = Vec::with_capacity(batch.len());
        for (e, _) in &batch {
            seqs.push(insert(&mut tx, e).await?);
        }
        tx.commit().await?;
        Ok::<_, StoreError>(seqs)
    }
    .await;
    match together {
        Ok(seqs) => {
            for ((_, done), seq) in batch.into_iter().zip(seqs) {
                let _ = done.send(Ok(seq));
            }
        }
        Err(_) => {
            for (e, done) in batch {
                let _ = done.send(insert(conn, &e).await);
            }
        }
    }
}

async fn insert(conn: &mut SqliteConnection, e: &AuditEntry) -> Result<u64, StoreError> {
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
    .fetch_one(&mut *conn)
    .await?;
    Ok(seq as u64)
}

#[async_trait]
impl AuditStore for SqliteStore {
    async fn append_audit(&self, e: &AuditEntry) -> Result<u64, StoreError> {
        let (done, seq) = oneshot::channel();
        self.audit_queue.push(e.clone(), done);
        // Group commit: whoever flushes next writes every record queued by then, this one
        // included (it was queued before), in one transaction, so a burst of requests takes
        // SQLite's one writer a few times instead of once per request. On a task of its own,
        // so a request that goes away meanwhile does not take the records of others with it.
        let store = self.clone();
        tokio::spawn(async move {
            let _flushing = store.audit_queue.flushing.lock().await;
            let batch = store.audit_queue.take();
            if batch.is_empty() {
                return;
            }
            match store.pool.acquire().await {
                Ok(mut conn) => write_batch(&mut conn, batch).await,
                Err(e) => {
                    for (_, done) in batch {
                        let _ = done.send(Err(StoreError::Db(sqlx::Error::Protocol(format!(
                            "no store connection for the audit log: {e}"
                        )))));
                    }
                }
            }
        });
        match seq.await {
            Ok(r) => r,
            // The flush ended before answering: the runtime is shutting down.
            Err(_) => Err(StoreError::Db(sqlx::Error::PoolClosed)),
        }
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
