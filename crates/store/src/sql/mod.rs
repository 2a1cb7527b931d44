//! The one SQL layer both backends run: every query is written here once, with PostgreSQL's
//! numbered `$N` placeholders (sqlx's SQLite driver binds `$N` by its number, like `?N`), and
//! every row is mapped here once, with checked integer conversions ([`to_i64`],
//! [`SqlRow::uint`]).
//!
//! How it is shared: each resource's trait is implemented once, for every type that
//! implements [`Backend`] (`impl<S: Backend> VolumeStore for S`); [`crate::SqliteStore`] and
//! [`crate::PgStore`] implement [`Backend`]. The shared code is not generic over
//! `sqlx::Database`: doing that needs a dozen higher-ranked bounds (`for<'c> &'c mut
//! DB::Connection: Executor<'c>`, `String: Decode<DB>`, …) restated on every impl, because Rust
//! does not imply a trait's where-clauses. Instead the few places that touch a driver are
//! concrete and small:
//! - [`Query`] holds the SQL and its arguments, each boxed as a [`Value`] that can bind itself
//!   to either driver's query: any type both drivers encode (so a `u64` does not bind, and goes
//!   through [`to_i64`]);
//! - [`Conn`] runs a [`Query`] on a pool or in a transaction of either driver;
//! - [`SqlRow`] reads a column of either driver's row as any [`Col`] type.
//!
//! What differs between the backends is named on [`Backend`], and nothing else is per backend:
//! SQL fragments (JSON functions, `FOR UPDATE SKIP LOCKED`), when a warm pool hit is counted,
//! the locks that PostgreSQL takes where SQLite relies on its single writer
//! ([`Backend::lock_xact`], [`Backend::next_event_seq`], leadership), the SQLite group commit
//! of audit rows ([`Backend::write_audit`]), and each backend's migrations and named locks
//! ([`crate::LockStore`]).

use async_trait::async_trait;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{ColumnIndex, Decode, Encode, Postgres, Sqlite, Type};

use crate::{Leadership, StoreError};

mod audit;
mod checkpoints;
mod cluster;
mod commands;
mod events;
mod lifecycle;
mod operations;
mod orgs;
mod pools;
mod releases;
mod sandboxes;
mod templates;
mod tokens;
mod volumes;

pub(crate) use audit::insert_audit;

/// A query of the SQLite driver.
pub type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;
/// A query of the PostgreSQL driver.
pub type PgQuery<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// A value both drivers can bind.
pub trait Value<'q>: Send + 'q {
    /// Binds the value as the next argument of a SQLite query.
    fn bind_sqlite(self: Box<Self>, q: SqliteQuery<'q>) -> SqliteQuery<'q>;
    /// Binds the value as the next argument of a PostgreSQL query.
    fn bind_pg(self: Box<Self>, q: PgQuery<'q>) -> PgQuery<'q>;
}

impl<'q, T> Value<'q> for T
where
    T: Encode<'q, Sqlite> + Type<Sqlite> + Encode<'q, Postgres> + Type<Postgres> + Send + 'q,
{
    fn bind_sqlite(self: Box<Self>, q: SqliteQuery<'q>) -> SqliteQuery<'q> {
        q.bind(*self)
    }

    fn bind_pg(self: Box<Self>, q: PgQuery<'q>) -> PgQuery<'q> {
        q.bind(*self)
    }
}

/// A type both drivers can read from a column.
pub trait Col:
    for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

impl<T> Col for T where
    T: for<'r> Decode<'r, Sqlite> + Type<Sqlite> + for<'r> Decode<'r, Postgres> + Type<Postgres>
{
}

/// A column name or position in either driver's row.
pub trait Idx: ColumnIndex<SqliteRow> + ColumnIndex<PgRow> + std::fmt::Debug {}

impl<T: ColumnIndex<SqliteRow> + ColumnIndex<PgRow> + std::fmt::Debug> Idx for T {}

/// A row of either driver.
pub trait SqlRow: Send + Sync + Unpin + 'static {
    /// The column `i` as a `T` (an error when it is missing or of another type).
    fn try_get<T: Col, I: Idx>(&self, i: I) -> Result<T, sqlx::Error>;

    /// The 64-bit integer `column` as the unsigned type of the row (checked).
    fn uint<T: TryFrom<i64>>(&self, column: &str) -> Result<T, StoreError> {
        from_i64(self.try_get(column)?, column)
    }

    /// The nullable 64-bit integer `column` as the unsigned type of the row (checked).
    fn opt_uint<T: TryFrom<i64>>(&self, column: &str) -> Result<Option<T>, StoreError> {
        self.try_get::<Option<i64>, _>(column)?
            .map(|v| from_i64(v, column))
            .transpose()
    }

    /// The `vcpus`, `memory_mib`, `pids_max` and `disk_mib` columns (sandboxes, pools,
    /// checkpoints).
    fn resources(&self) -> Result<cove_api_types::Resources, StoreError> {
        Ok(cove_api_types::Resources {
            vcpus: self.uint("vcpus")?,
            memory_mib: self.uint("memory_mib")?,
            pids_max: self.uint("pids_max")?,
            disk_mib: self.opt_uint("disk_mib")?,
        })
    }
}

impl SqlRow for SqliteRow {
    fn try_get<T: Col, I: Idx>(&self, i: I) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, i)
    }
}

impl SqlRow for PgRow {
    fn try_get<T: Col, I: Idx>(&self, i: I) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, i)
    }
}

/// A statement and its arguments, in `$N` order.
pub struct Query<'q> {
    sql: &'q str,
    args: Vec<Box<dyn Value<'q>>>,
}

/// A statement with `$N` placeholders; bind its arguments in order with [`Query::bind`].
pub fn query(sql: &str) -> Query<'_> {
    Query {
        sql,
        args: Vec::new(),
    }
}

/// The arguments of a statement that is put together piece by piece (a filter of optional
/// conditions): [`Args::add`] gives each its `$N` as the SQL that uses it is written.
#[derive(Default)]
pub struct Args<'q>(Vec<Box<dyn Value<'q>>>);

impl<'q> Args<'q> {
    /// Adds the next argument; returns its number `N` (for `$N`).
    pub fn add<T: Value<'q>>(&mut self, value: T) -> usize {
        self.0.push(Box::new(value));
        self.0.len()
    }

    /// The statement `sql` with these arguments.
    pub fn query(self, sql: &'q str) -> Query<'q> {
        Query { sql, args: self.0 }
    }
}

impl<'q> Query<'q> {
    /// Adds the next argument.
    pub fn bind<T: Value<'q>>(mut self, value: T) -> Self {
        self.args.push(Box::new(value));
        self
    }

    /// The query for the SQLite driver.
    pub fn sqlite(self) -> SqliteQuery<'q> {
        self.args
            .into_iter()
            .fold(sqlx::query(self.sql), |q, a| a.bind_sqlite(q))
    }

    /// The query for the PostgreSQL driver.
    pub fn pg(self) -> PgQuery<'q> {
        self.args
            .into_iter()
            .fold(sqlx::query(self.sql), |q, a| a.bind_pg(q))
    }

    /// Runs the statement; returns the number of rows it changed.
    pub async fn execute<C: Conn + ?Sized>(self, c: &mut C) -> Result<u64, sqlx::Error> {
        c.execute(self).await
    }

    /// Every row the statement returns.
    pub async fn fetch_all<C: Conn + ?Sized>(self, c: &mut C) -> Result<Vec<C::Row>, sqlx::Error> {
        c.fetch_all(self).await
    }

    /// The first row the statement returns, if any.
    pub async fn fetch_optional<C: Conn + ?Sized>(
        self,
        c: &mut C,
    ) -> Result<Option<C::Row>, sqlx::Error> {
        c.fetch_optional(self).await
    }

    /// The first row the statement returns ([`sqlx::Error::RowNotFound`] when none).
    pub async fn fetch_one<C: Conn + ?Sized>(self, c: &mut C) -> Result<C::Row, sqlx::Error> {
        c.fetch_optional(self)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

/// Somewhere to run a [`Query`]: a pool or a transaction of either driver.
#[async_trait]
pub trait Conn: Send {
    /// The driver's row.
    type Row: SqlRow;
    /// Runs `q`; returns the number of rows it changed.
    async fn execute(&mut self, q: Query<'_>) -> Result<u64, sqlx::Error>;
    /// Every row `q` returns.
    async fn fetch_all(&mut self, q: Query<'_>) -> Result<Vec<Self::Row>, sqlx::Error>;
    /// The first row `q` returns, if any.
    async fn fetch_optional(&mut self, q: Query<'_>) -> Result<Option<Self::Row>, sqlx::Error>;
}

/// A transaction of either driver.
#[async_trait]
pub trait Tx: Conn {
    /// Commits the transaction (dropping it uncommitted rolls it back).
    async fn commit(self) -> Result<(), sqlx::Error>;
    /// Rolls the transaction back.
    async fn rollback(self) -> Result<(), sqlx::Error>;
}

/// [`Conn`] for a pool and a transaction of one driver: `$to` turns a [`Query`] into the
/// driver's query, `|$s| $exec` is the executor of `$s: &mut Self`.
macro_rules! conn {
    ($ty:ty, $row:ty, $to:ident, |$s:ident| $exec:expr) => {
        #[async_trait]
        impl Conn for $ty {
            type Row = $row;

            async fn execute(&mut self, q: Query<'_>) -> Result<u64, sqlx::Error> {
                let $s = self;
                Ok(q.$to().execute($exec).await?.rows_affected())
            }

            async fn fetch_all(&mut self, q: Query<'_>) -> Result<Vec<$row>, sqlx::Error> {
                let $s = self;
                q.$to().fetch_all($exec).await
            }

            async fn fetch_optional(&mut self, q: Query<'_>) -> Result<Option<$row>, sqlx::Error> {
                let $s = self;
                q.$to().fetch_optional($exec).await
            }
        }
    };
}

conn!(sqlx::SqlitePool, SqliteRow, sqlite, |s| &*s);
conn!(sqlx::Transaction<'static, Sqlite>, SqliteRow, sqlite, |s| {
    &mut **s
});
conn!(sqlx::SqliteConnection, SqliteRow, sqlite, |s| &mut *s);
conn!(sqlx::PgPool, PgRow, pg, |s| &*s);
conn!(sqlx::Transaction<'static, Postgres>, PgRow, pg, |s| {
    &mut **s
});

/// [`Tx`] for a transaction of each driver.
macro_rules! tx {
    ($($db:ty),*) => {$(
        #[async_trait]
        impl Tx for sqlx::Transaction<'static, $db> {
            async fn commit(self) -> Result<(), sqlx::Error> {
                sqlx::Transaction::commit(self).await
            }

            async fn rollback(self) -> Result<(), sqlx::Error> {
                sqlx::Transaction::rollback(self).await
            }
        }
    )*};
}

tx!(Sqlite, Postgres);

/// Which transaction-scoped lock [`Backend::lock_xact`] takes.
#[derive(Clone, Copy, Debug)]
pub enum XactLock {
    /// Appends to one operation's log (its next seq).
    OperationLog,
    /// Numbering of one template's releases.
    ReleaseNumber,
}

/// A store backend: a pool to run the shared queries on, and what differs between the
/// databases (SQL fragments and concurrency).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The driver's row.
    type Row: SqlRow;
    /// The connection pool (cheap to clone).
    type Pool: Conn<Row = Self::Row>;
    /// A transaction.
    type Tx: Tx<Row = Self::Row>;

    /// The pool, to run one statement on.
    fn db(&self) -> Self::Pool;

    /// Starts a transaction.
    async fn begin(&self) -> Result<Self::Tx, sqlx::Error>;

    /// Appended to a sub-select that picks rows to claim, so concurrent claimers pick
    /// different rows (PostgreSQL: `FOR UPDATE SKIP LOCKED`; SQLite has one writer).
    const SKIP_LOCKED: &'static str;

    /// Whether a warm pool's hit is counted after the claim commits (PostgreSQL: inside the
    /// claim the pool's row lock would queue every claim of the pool) rather than inside it.
    const HIT_AFTER_CLAIM: bool;

    /// Whether several processes may share the store ([`crate::ClusterStore::shared`]).
    const SHARED: bool;

    /// `<expr> IN <this>` holds when the text `expr` is an element of the JSON array of
    /// strings bound as `$param`.
    fn in_json_array(param: usize) -> String;

    /// Holds when the JSON array of objects in `column` has an element whose `name` is the
    /// text bound as `$param`.
    fn has_named_element(column: &str, param: usize) -> String;

    /// Holds when the JSON object in `column` maps the key bound as `$key` to the string bound
    /// as `$value`.
    fn json_key_is(column: &str, key: usize, value: usize) -> String;

    /// Serialises, until `tx` ends, the writers of `lock` on `key` (PostgreSQL: an advisory
    /// lock; SQLite: nothing, its one writer already does).
    async fn lock_xact(tx: &mut Self::Tx, lock: XactLock, key: &str) -> Result<(), StoreError>;

    /// The seq of the next event, taken under a lock held until `tx` ends (PostgreSQL: the
    /// `event_seq` counter row), or `None` where the database numbers events itself (SQLite's
    /// AUTOINCREMENT, in commit order under its one writer).
    async fn next_event_seq(tx: &mut Self::Tx) -> Result<Option<i64>, StoreError>;

    /// Appends an audit record ([`crate::AuditStore::append_audit`]).
    async fn write_audit(&self, e: &cove_api_types::AuditEntry) -> Result<u64, StoreError>;

    /// Tries to become the leader ([`crate::ClusterStore::try_lead`]).
    async fn lead(&self) -> Result<Option<Leadership>, StoreError>;
}

/// An unsigned count or size as the 64-bit integer it is stored as.
pub(crate) fn to_i64(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{v} does not fit a BIGINT")))
}

/// A stored 64-bit integer back to the unsigned type of the row.
pub(crate) fn from_i64<T: TryFrom<i64>>(v: i64, column: &str) -> Result<T, StoreError> {
    T::try_from(v).map_err(|_| StoreError::Corrupt(format!("{column} = {v} is out of range")))
}

/// A JSON array of strings, for [`Backend::in_json_array`].
pub(crate) fn json_array<S: AsRef<str>>(items: &[S]) -> Result<String, StoreError> {
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    serde_json::to_string(&items).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite binds `$N` by its number, not by the order the placeholders appear in: the
    /// shared queries rely on it (out of order and repeated placeholders).
    #[tokio::test]
    async fn sqlite_binds_numbered_placeholders_by_number() {
        let mut pool = sqlx::SqlitePool::connect("sqlite::memory:")
            .await
            .expect("open");
        let row = query("SELECT $2 AS b, $1 AS a, $2 || $1 AS ba")
            .bind("one")
            .bind("two")
            .fetch_one(&mut pool)
            .await
            .expect("select");
        assert_eq!(row.try_get::<String, _>("a").expect("a"), "one");
        assert_eq!(row.try_get::<String, _>("b").expect("b"), "two");
        assert_eq!(row.try_get::<String, _>("ba").expect("ba"), "twoone");
    }

    #[test]
    fn integers_are_converted_checked() {
        assert!(to_i64(u64::MAX).is_err());
        assert_eq!(to_i64(7).expect("fits"), 7);
        assert!(from_i64::<u32>(-1, "c").is_err());
        assert!(from_i64::<u8>(256, "c").is_err());
    }
}
