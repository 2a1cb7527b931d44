//! The SQLite backend (sqlx): one file, WAL journal, migrations from `migrations/sqlite/`.
//! SQLite runs one write transaction at a time, which is what keeps event and log sequence
//! numbers gap-free and in commit order here.
//!
//! The queries are shared with PostgreSQL (`sql/`); this module holds what SQLite does its own
//! way (its `sql::Backend`): no row or advisory locks, JSON through `json_each`, events and audit
//! records numbered by AUTOINCREMENT, audit appends written in batches (`audit.rs`), named locks
//! as in-process mutexes (`locks.rs`).

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction, TransactionManager as _};

use crate::sql::{Backend, XactLock};
use crate::{Leadership, Store, StoreError};

mod audit;
mod locks;

/// The SQLite store; cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Audit records waiting to be written (`audit.rs`): they are written in batches.
    audit_queue: Arc<audit::AuditQueue>,
    /// The named locks of [`crate::LockStore`] (this process is the store's one writer).
    locks: locks::Locks,
}

impl SqliteStore {
    /// Opens (creating if needed) the SQLite database at `path` and applies migrations.
    /// Errors: [`StoreError::Db`] when the file cannot be opened, [`StoreError::Migrate`] when
    /// its schema is newer than this build or a migration fails.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_secs(10))
            .foreign_keys(true);
        // No ping before each acquire: the database is a file in this process, so there is no
        // link to lose, and the ping is a round trip to the connection's thread on every query.
        // With it, acquires in the fake-node tests' frozen clock hung now and then until the
        // watchdog (`expiry::two_replicas_act_on_one_expiry_once`: 5 of 25 runs under load;
        // 0 of 25 without).
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .test_before_acquire(false)
            // A connection released while sqlx still counts it inside a transaction is closed
            // (closing rolls back whatever it holds), not reused: after a COMMIT that SQLite
            // refused and rolled back itself (`SQLITE_FULL` on a full disk), sqlx's ROLLBACK on
            // drop fails, its count stays at 1, the next `begin` on that connection becomes a
            // SAVEPOINT and a rollback of it leaves a transaction open, so every other writer
            // waited out its busy timeout ("database is locked") after the disk had room again.
            // A release right after a `Transaction` was dropped unawaited may still count it (its
            // ROLLBACK is queued): that connection is closed too, which costs only a reconnect.
            .after_release(|conn, _meta| {
                Box::pin(async move {
                    let depth =
                        <Sqlite as sqlx::Database>::TransactionManager::get_transaction_depth(conn);
                    if depth != 0 {
                        tracing::debug!(
                            depth,
                            "a released store connection is still in a transaction: closed"
                        );
                    }
                    Ok(depth == 0)
                })
            })
            .connect_with(opts)
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        Ok(SqliteStore {
            pool,
            audit_queue: Arc::default(),
            locks: locks::Locks::default(),
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[async_trait]
impl Backend for SqliteStore {
    type Row = sqlx::sqlite::SqliteRow;
    type Pool = SqlitePool;
    type Tx = Transaction<'static, Sqlite>;

    fn db(&self) -> SqlitePool {
        self.pool.clone()
    }

    async fn begin(&self) -> Result<Self::Tx, sqlx::Error> {
        self.pool.begin().await
    }

    const SKIP_LOCKED: &'static str = "";
    const HIT_AFTER_CLAIM: bool = false;
    const SHARED: bool = false;

    fn in_json_array(param: usize) -> String {
        format!("(SELECT value FROM json_each(${param}))")
    }

    fn has_named_element(column: &str, param: usize) -> String {
        format!(
            "EXISTS (SELECT 1 FROM json_each({column}) \
             WHERE json_extract(json_each.value, '$.name') = ${param})"
        )
    }

    fn json_key_is(column: &str, key: usize, value: usize) -> String {
        format!(
            "EXISTS (SELECT 1 FROM json_each({column}) \
             WHERE json_each.key = ${key} AND json_each.value = ${value})"
        )
    }

    async fn lock_xact(_: &mut Self::Tx, _: XactLock, _: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn next_event_seq(_: &mut Self::Tx) -> Result<Option<i64>, StoreError> {
        Ok(None)
    }

    async fn write_audit(&self, e: &cove_api_types::AuditEntry) -> Result<u64, StoreError> {
        self.write_audit_batched(e).await
    }

    /// One process owns the file, so it always leads.
    async fn lead(&self) -> Result<Option<Leadership>, StoreError> {
        Ok(Some(Leadership::forever()))
    }
}
