//! The PostgreSQL backend (sqlx): migrations from `migrations/postgres/`, native types
//! (TIMESTAMPTZ, BIGINT, BOOLEAN).
//!
//! Where SQLite relies on its single writer, this backend takes locks inside the writing
//! transaction instead:
//! - event seqs come from the one-row `event_seq` counter (row lock: commit order, no gaps);
//! - an operation's log seq and a template's next release number are computed under a
//!   transaction-scoped advisory lock, keyed `(LOCK_OPERATION_LOG, hashtext(id))` and
//!   `(LOCK_RELEASE_NUMBER, hashtext(template))`.
//!
//! - the named locks of `LockStore` (quota check-and-record, volume delete against mount) are
//!   transaction-scoped advisory locks keyed `(LOCK_NAMED, hashtext(key))` (`locks.rs`);
//! - the leader of the controllers holds a session advisory lock (`cluster.rs`).
//!
//! PostgreSQL keeps times to the microsecond; a finer time reads back truncated.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

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

/// First key of the advisory lock that serialises appends to one operation's log.
pub(crate) const LOCK_OPERATION_LOG: i32 = 0x636f_0001;
/// First key of the advisory lock that serialises release numbering of one template.
pub(crate) const LOCK_RELEASE_NUMBER: i32 = 0x636f_0002;
/// First key of the session advisory lock the leader of the controllers holds.
pub(crate) const LOCK_LEADER: i32 = 0x636f_0003;

/// First key of the transaction-scoped advisory locks of [`crate::LockStore`].
pub(crate) const LOCK_NAMED: i32 = 0x636f_0004;

/// Most named locks held (or waited for) at once by one replica.
const LOCK_CONNECTIONS: u32 = 16;

/// The PostgreSQL store; cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    /// Connections that hold the named locks of [`crate::LockStore`], apart from `pool` so
    /// a holder waiting for a connection of `pool` never waits on a waiter for a lock.
    locks: PgPool,
    /// How to connect, kept for the leader lock's own connection.
    opts: PgConnectOptions,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:pass@host:port/db`, or
    /// `postgres://user@localhost/db?host=/run/postgresql` for a unix socket) and applies
    /// migrations. Errors: [`StoreError::Db`] for a bad URL or an unreachable database,
    /// [`StoreError::Migrate`] when a migration fails or the schema is newer than this build.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_with(PgConnectOptions::from_str(url)?).await
    }

    /// Like [`PgStore::connect`], from parsed options (for example with a `search_path` set,
    /// to keep Cove's tables in their own schema).
    pub async fn connect_with(opts: PgConnectOptions) -> Result<PgStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(opts.clone())
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        let locks = PgPoolOptions::new()
            .max_connections(LOCK_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(60))
            .connect_lazy_with(opts.clone());
        Ok(PgStore { pool, locks, opts })
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn close(&self) {
        self.locks.close().await;
        self.pool.close().await;
    }
}

/// An unsigned count or size as the BIGINT it is stored as.
pub(crate) fn to_i64(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{v} does not fit a BIGINT")))
}

/// A stored BIGINT back to the unsigned type of the row.
pub(crate) fn from_i64<T: TryFrom<i64>>(v: i64, column: &str) -> Result<T, StoreError> {
    T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{column} = {v} is out of range")))
}
