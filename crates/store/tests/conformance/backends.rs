//! Fresh stores for each case: a temporary SQLite file, or a PostgreSQL schema of its own.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use cove_store::{PgStore, SqliteStore, Store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

/// The variable naming the PostgreSQL database the suite may create schemas in.
pub const POSTGRES_URL_VAR: &str = "COVE_TEST_POSTGRES_URL";

/// The PostgreSQL URL, or `None` (with the reason printed) when the PostgreSQL half is skipped
/// locally. Under CI (`CI` set to anything but `false`/`0`/empty) a missing URL fails the test.
pub fn postgres_url() -> Option<String> {
    match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").unwrap_or_default();
            if !ci.is_empty() && ci != "false" && ci != "0" {
                panic!(
                    "{POSTGRES_URL_VAR} is unset under CI: the PostgreSQL store must be tested \
                     (scripts/test.sh starts a cluster and sets it)"
                );
            }
            eprintln!(
                "skipping the PostgreSQL case: {POSTGRES_URL_VAR} is unset (scripts/test.sh \
                 starts a throwaway cluster and sets it)"
            );
            None
        }
    }
}

/// Runs `case` on a fresh SQLite store in a temporary directory.
pub async fn with_sqlite<F, Fut>(case: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("store.db"))
            .await
            .expect("open sqlite"),
    );
    let outcome = tokio::spawn(case(store.clone())).await;
    store.close().await;
    finish(outcome);
}

/// A schema created for one case in the database at the suite's URL; [`PgSchema::drop`]
/// removes it with everything in it.
pub struct PgSchema {
    admin: PgPool,
    /// The schema's name.
    pub name: String,
}

impl PgSchema {
    /// Creates `cove_conf_<case>_<random>`.
    pub async fn create(url: &str, case: &str) -> PgSchema {
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect to {POSTGRES_URL_VAR}: {e}"));
        let case: String = case.chars().take(40).collect();
        let name = format!("cove_conf_{case}_{:08x}", rand::random::<u32>());
        sqlx::query(&format!("CREATE SCHEMA \"{name}\""))
            .execute(&admin)
            .await
            .expect("create schema");
        PgSchema { admin, name }
    }

    /// Drops the schema and closes the admin connection.
    pub async fn drop(self) {
        sqlx::query(&format!("DROP SCHEMA \"{}\" CASCADE", self.name))
            .execute(&self.admin)
            .await
            .expect("drop schema");
        self.admin.close().await;
    }
}

/// Runs `case` on a PostgreSQL store in a schema of its own, dropped afterwards (also when the
/// case fails).
pub async fn with_postgres<F, Fut>(case_name: &str, case: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(url) = postgres_url() else {
        return;
    };
    let schema = PgSchema::create(&url, case_name).await;
    let opts = PgConnectOptions::from_str(&url)
        .expect("parse the PostgreSQL URL")
        .options([("search_path", schema.name.as_str())]);
    let store: Arc<dyn Store> = match PgStore::connect_with(opts).await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            schema.drop().await;
            panic!("open the PostgreSQL store: {e}");
        }
    };
    let outcome = tokio::spawn(case(store.clone())).await;
    store.close().await;
    schema.drop().await;
    finish(outcome);
}

/// Re-raises a case's panic after the cleanup.
fn finish(outcome: Result<(), tokio::task::JoinError>) {
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("case did not finish: {e}"),
        }
    }
}
