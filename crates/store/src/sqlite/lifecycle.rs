//! Lifecycle writes: transitions with their events in one transaction, prior state,
//! activity times, wake results (SQLite).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::SandboxState;
use sqlx::Row;

use super::SqliteStore;
use crate::{parse_enum, LifecycleStore, NewEvent, StoreError};

#[async_trait]
impl LifecycleStore for SqliteStore {
    async fn transition_with_event(
        &self,
        id: &str,
        from: &[SandboxState],
        to: SandboxState,
        reason: Option<&str>,
        event: Option<&NewEvent>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let now = Utc::now();
        let mut moved = false;
        for f in from {
            let res = sqlx::query(
                "UPDATE sandboxes SET state = ?, state_reason = ?, updated_at = ?, \
                 prior_state = CASE WHEN ? IN ('suspending', 'deleting') THEN state \
                 ELSE prior_state END WHERE id = ? AND state = ?",
            )
            .bind(to.as_str())
            .bind(reason)
            .bind(now)
            .bind(to.as_str())
            .bind(id)
            .bind(f.as_str())
            .execute(&mut *tx)
            .await?;
            if res.rows_affected() > 0 {
                moved = true;
                break;
            }
        }
        if moved {
            if let Some(ev) = event {
                insert_event(&mut tx, id, ev, now).await?;
            }
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn record_event(&self, sandbox_id: &str, event: &NewEvent) -> Result<u64, StoreError> {
        let mut conn = self.pool.acquire().await?;
        insert_event(&mut conn, sandbox_id, event, Utc::now()).await
    }

    async fn prior_state(&self, id: &str) -> Result<Option<SandboxState>, StoreError> {
        let row = sqlx::query("SELECT prior_state FROM sandboxes WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        match row.try_get::<Option<String>, _>("prior_state")? {
            Some(s) => Ok(Some(parse_enum(&s, SandboxState::parse)?)),
            None => Ok(None),
        }
    }

    async fn set_memory_restored(&self, id: &str, restored: bool) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET memory_restored = ? WHERE id = ?")
            .bind(restored)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn record_activity(&self, seen: &[(String, DateTime<Utc>)]) -> Result<(), StoreError> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for (id, at) in seen {
            sqlx::query(
                "UPDATE sandboxes SET last_activity_at = ? WHERE id = ? \
                 AND (last_activity_at IS NULL OR last_activity_at < ?)",
            )
            .bind(at)
            .bind(id)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

async fn insert_event(
    conn: &mut sqlx::SqliteConnection,
    sandbox_id: &str,
    ev: &NewEvent,
    at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let (seq,): (i64,) = sqlx::query_as(
        "INSERT INTO events (time, type, sandbox_id, operation_id, reason) VALUES (?, ?, ?, ?, ?) \
         RETURNING seq",
    )
    .bind(at)
    .bind(ev.kind.as_str())
    .bind(sandbox_id)
    .bind(&ev.operation_id)
    .bind(&ev.reason)
    .fetch_one(&mut *conn)
    .await?;
    Ok(seq as u64)
}
