//! The store's one error type.

/// Errors of every store backend. Only [`StoreError::NotFound`] and [`StoreError::Conflict`]
/// mean something to a caller; the rest are failures whose detail belongs in the server log,
/// never in an API response (the control plane maps them to an internal error).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist.
    #[error("not found")]
    NotFound,
    /// A unique key is taken (an id, an idempotency key, a token hash); the message names the
    /// constraint as the database reported it.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A stored value could not be decoded (a bug or a hand-edited database).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The store URL or settings are unusable.
    #[error("store configuration: {0}")]
    Config(String),
    /// The database failed (connection, I/O, SQL).
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Migrations failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    /// Whether the database's disk is full (SQLite `SQLITE_FULL`, PostgreSQL `disk_full`
    /// 53100, or an I/O error `ENOSPC`): the control plane answers 507 `no_space` then.
    pub fn is_storage_full(&self) -> bool {
        match self {
            StoreError::Db(sqlx::Error::Database(db)) => {
                // SQLite reports primary code 13 (its extended codes keep it in the low byte).
                let code = db.code();
                let sqlite_full = code
                    .as_deref()
                    .and_then(|c| c.parse::<u32>().ok())
                    .is_some_and(|c| c & 0xff == 13);
                sqlite_full
                    || code.as_deref() == Some("53100")
                    || db.message().contains("database or disk is full")
            }
            StoreError::Db(sqlx::Error::Io(e)) => {
                e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
                // ENOSPC on Linux
            }
            _ => false,
        }
    }
}

/// Maps a unique-key violation to [`StoreError::Conflict`] and any other failure to
/// [`StoreError::Db`] (both backends report violations through sqlx the same way).
pub(crate) fn map_unique(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(db.message().to_string())
        }
        _ => StoreError::Db(e),
    }
}
