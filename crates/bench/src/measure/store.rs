//! The store's share of a sandbox create on PostgreSQL, beside SQLite in the same run.
//!
//! One sample is the store calls the control plane makes for one create and its first poll,
//! in order: release lookup, idempotency-key lookup, operation insert, sandbox insert,
//! `sandbox.created` event, operation running, `creating → running` with its event, operation
//! succeeded, operation and sandbox reads. SQLite is a temporary file; PostgreSQL is a schema
//! of its own in the database at `--postgres-url`, dropped afterwards.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use cove_api_types::{EventType, OperationKind, OperationState, Resources, Sandbox, SandboxState};
use cove_store::{NewEvent, NewOperation, OperationUpdate, PgStore, SqliteStore, Store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::measure::{dist_ms, progress};
use crate::report::{Metric, Unavailable, Unit};

const KEY: &str = "store_create_postgres";
const NAME: &str = "store writes of one create, PostgreSQL";

/// Times `runs` creates' store calls on PostgreSQL (the metric) and on SQLite (its baseline).
/// Without a PostgreSQL URL the metric is unavailable.
pub async fn measure(
    postgres_url: Option<&str>,
    runs: usize,
) -> anyhow::Result<Result<Metric, Unavailable>> {
    let Some(url) = postgres_url else {
        return Ok(Err(Unavailable {
            key: KEY,
            name: NAME.to_string(),
            reason: "no --postgres-url (COVE_BENCH_POSTGRES_URL) given".to_string(),
        }));
    };
    progress("store: creates' store calls on SQLite and PostgreSQL");
    let dir = tempfile::tempdir().context("temporary dir for SQLite")?;
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("store.db")).await?);
    let on_sqlite = series(&*sqlite, runs).await;
    sqlite.close().await;

    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .context("connect to --postgres-url")?;
    let schema = format!("cove_bench_{}", std::process::id());
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&admin)
        .await
        .context("create the bench schema")?;
    let on_postgres = async {
        let opts = PgConnectOptions::from_str(url)?.options([("search_path", schema.as_str())]);
        let pg: Arc<dyn Store> = Arc::new(PgStore::connect_with(opts).await?);
        let samples = series(&*pg, runs).await;
        pg.close().await;
        samples
    }
    .await;
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&admin)
        .await
        .context("drop the bench schema")?;
    admin.close().await;

    let (on_sqlite, on_postgres) = (on_sqlite?, on_postgres?);
    let pg = dist_ms(&on_postgres)?;
    let lite = dist_ms(&on_sqlite)?;
    let overhead = pg.center() - lite.center();
    Ok(Ok(Metric::new(KEY, NAME, Unit::Ms, pg)
        .baseline("SQLite (same calls)", lite)
        .extra("p50_overhead_ms", overhead)
        .note(format!("p50 {overhead:+.2} ms over SQLite"))))
}

/// One untimed warm-up create, then `runs` timed ones.
async fn series(store: &dyn Store, runs: usize) -> anyhow::Result<Vec<Duration>> {
    one_create(store, 0).await?;
    let mut samples = Vec::with_capacity(runs);
    for i in 1..=runs {
        let t0 = Instant::now();
        one_create(store, i).await?;
        samples.push(t0.elapsed());
    }
    Ok(samples)
}

async fn one_create(store: &dyn Store, i: usize) -> anyhow::Result<()> {
    let (sb, op) = (format!("sb-bench-{i}"), format!("op-bench-{i}"));
    let key = format!("key-{i}");
    store.list_releases("tiny").await?;
    store
        .operation_by_idempotency_key("default", OperationKind::CreateSandbox, &key)
        .await?;
    let now = Utc::now();
    store
        .insert_operation(&NewOperation {
            org: "default".into(),
            id: op.clone(),
            kind: OperationKind::CreateSandbox,
            sandbox_id: Some(sb.clone()),
            template: Some("tiny".into()),
            release: Some(1),
            idempotency_key: Some(key),
            request_hash: Some("hash".into()),
            deadline: now + chrono::Duration::minutes(30),
        })
        .await?;
    store
        .insert_sandbox(&Sandbox {
            org: cove_api_types::DEFAULT_ORG.into(),
            id: sb.clone(),
            template: "tiny".into(),
            release: 1,
            release_digest: None,
            state: SandboxState::Creating,
            state_reason: None,
            runtime: "runc".into(),
            resources: Resources::default(),
            env: Default::default(),
            metadata: Default::default(),
            cwd: "/".into(),
            user: "user".into(),
            created_at: now,
            updated_at: now,
            idle_timeout_s: 21600,
            ttl_s: None,
            expires_at: None,
            on_expiry: cove_api_types::OnExpiry::Delete,
            last_activity_at: None,
            memory_restored: None,
            network: Default::default(),
            secrets: Default::default(),
            public: false,
            volumes: Vec::new(),
        })
        .await?;
    let event = |kind| NewEvent {
        kind,
        operation_id: Some(op.clone()),
        reason: None,
        destination: None,
        host: None,
        port: None,
        rule: None,
    };
    store
        .record_event(&sb, &event(EventType::SandboxCreated))
        .await?;
    let set = |state| OperationUpdate {
        state: Some(state),
        ..Default::default()
    };
    store
        .update_operation(&op, &set(OperationState::Running))
        .await?;
    store
        .transition_with_event(
            &sb,
            &[SandboxState::Creating],
            SandboxState::Running,
            None,
            Some(&event(EventType::SandboxRunning)),
        )
        .await?;
    store
        .update_operation(&op, &set(OperationState::Succeeded))
        .await?;
    store.get_operation(&op).await?;
    store.get_sandbox(&sb).await?;
    Ok(())
}
