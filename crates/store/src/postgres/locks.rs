//! Named locks (PostgreSQL): a transaction-scoped advisory lock, held by a transaction of its
//! own on a connection of the lock pool until the guard drops.

use async_trait::async_trait;
use parking_lot::Mutex;
use sqlx::{Postgres, Transaction};

use super::{PgStore, LOCK_NAMED};
use crate::{LockStore, StoreError, StoreLock};

/// The transaction that holds an advisory lock; ended (committed: it wrote nothing) when
/// dropped.
struct Held(Mutex<Option<Transaction<'static, Postgres>>>);

impl Drop for Held {
    fn drop(&mut self) {
        let tx = self.0.get_mut().take();
        let Some(tx) = tx else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = tx.commit().await {
                        tracing::warn!(error = %e, "cannot end the transaction of a store lock");
                    }
                });
            }
            // Outside a runtime the transaction is rolled back when its connection is next
            // used or closed.
            Err(_) => drop(tx),
        }
    }
}

#[async_trait]
impl LockStore for PgStore {
    async fn lock(&self, key: &str) -> Result<StoreLock, StoreError> {
        let mut tx = self.locks.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(LOCK_NAMED)
            .bind(key)
            .execute(&mut *tx)
            .await?;
        Ok(StoreLock::new(Held(Mutex::new(Some(tx)))))
    }
}
