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
//!
//! The queries are shared with SQLite (`sql/`); this module holds what PostgreSQL does its own
//! way (its `sql::Backend`): the locks above, `FOR UPDATE SKIP LOCKED` claims, JSON through `jsonb`.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};

use crate::sql::{Backend, XactLock};
use crate::{Leadership, Store, StoreError};

mod cluster;
mod locks;

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

#[async_trait]
impl Backend for PgStore {
    type Row = sqlx::postgres::PgRow;
    type Pool = PgPool;
    type Tx = Transaction<'static, Postgres>;

    fn db(&self) -> PgPool {
        self.pool.clone()
    }

    async fn begin(&self) -> Result<Self::Tx, sqlx::Error> {
        self.pool.begin().await
    }

    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const HIT_AFTER_CLAIM: bool = true;
    const SHARED: bool = true;

    fn in_json_array(param: usize) -> String {
        format!("(SELECT jsonb_array_elements_text(CAST(${param} AS JSONB)))")
    }

    fn has_named_element(column: &str, param: usize) -> String {
        format!(
            "CAST({column} AS JSONB) @> \
             jsonb_build_array(jsonb_build_object('name', CAST(${param} AS TEXT)))"
        )
    }

    fn json_key_is(column: &str, key: usize, value: usize) -> String {
        // The column is JSON text; `->>` reads a string value unquoted.
        format!("(CAST({column} AS JSONB) ->> ${key}) = ${value}")
    }

    async fn lock_xact(tx: &mut Self::Tx, lock: XactLock, key: &str) -> Result<(), StoreError> {
        let class = match lock {
            XactLock::OperationLog => LOCK_OPERATION_LOG,
            XactLock::ReleaseNumber => LOCK_RELEASE_NUMBER,
        };
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(class)
            .bind(key)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn next_event_seq(tx: &mut Self::Tx) -> Result<Option<i64>, StoreError> {
        let (seq,): (i64,) =
            sqlx::query_as("UPDATE event_seq SET last = last + 1 WHERE id = 1 RETURNING last")
                .fetch_one(&mut **tx)
                .await?;
        Ok(Some(seq))
    }

    async fn write_audit(&self, e: &cove_api_types::AuditEntry) -> Result<u64, StoreError> {
        crate::sql::insert_audit(&mut self.db(), e).await
    }

    async fn lead(&self) -> Result<Option<Leadership>, StoreError> {
        cluster::lead(self).await
    }
}
