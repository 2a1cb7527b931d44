//! The group commit of audit records (SQLite): appends are written in batches; the rest of
//! the audit log is shared (`sql/audit.rs`).

use parking_lot::Mutex;

use cove_api_types::AuditEntry;
use sqlx::{Connection, SqliteConnection};
use tokio::sync::oneshot;

use super::SqliteStore;
use crate::sql::insert_audit;
use crate::StoreError;

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
            seqs.push(insert_audit(&mut *tx, e).await?);
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
                let _ = done.send(insert_audit(conn, &e).await);
            }
        }
    }
}

impl SqliteStore {
    /// [`crate::sql::Backend::write_audit`]: queues `e` and waits for the batch it is written in.
    pub(super) async fn write_audit_batched(&self, e: &AuditEntry) -> Result<u64, StoreError> {
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
}
