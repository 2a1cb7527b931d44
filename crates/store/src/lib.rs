//! Cove's SQL store: tokens, releases, sandboxes, operations and their logs, commands.
//!
//! SQLite (through sqlx) is the embedded default; migrations under `migrations/` are applied at
//! open. PostgreSQL is planned behind the same API. Every write is one statement or one
//! transaction, so a crash leaves either the old or the new row.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

mod commands;
mod events;
mod lifecycle;
mod operations;
mod releases;
mod sandboxes;
mod tokens;

pub use commands::CommandRecord;
pub use events::Purged;
pub use lifecycle::NewEvent;
pub use operations::{NewOperation, OperationUpdate};
pub use sandboxes::SandboxFilter;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist.
    #[error("not found")]
    NotFound,
    /// A unique key is taken.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A stored value could not be decoded (a bug or a hand-edited database).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Migrations failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// A handle to the store; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path` and applies migrations.
    pub async fn open_sqlite(path: &Path) -> Result<Store, StoreError> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Store { pool })
    }

    /// Closes the pool (waits for connections to finish).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

pub(crate) fn parse_enum<T>(s: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
    parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown value {s:?}")))
}

pub(crate) fn map_unique(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(db.message().to_string())
        }
        _ => StoreError::Db(e),
    }
}
