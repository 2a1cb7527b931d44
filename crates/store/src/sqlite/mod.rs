//! The SQLite backend (sqlx): one file, WAL journal, migrations from `migrations/sqlite/`.
//! SQLite runs one write transaction at a time, which is what keeps event and log sequence
//! numbers gap-free and in commit order here.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use crate::{Store, StoreError};

mod audit;
mod checkpoints;
mod cluster;
mod commands;
mod events;
mod lifecycle;
mod locks;
mod operations;
mod orgs;
mod pools;
mod releases;
mod sandboxes;
mod templates;
mod tokens;
mod volumes;

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
