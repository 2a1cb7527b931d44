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
