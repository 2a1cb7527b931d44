//! Lifecycle writes: transitions with their events in one transaction, prior state,
//! activity times, wake results (PostgreSQL).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::SandboxState;
use sqlx::{PgConnection, Row};

use super::sandboxes::state_strings;
use super::{from_i64, PgStore};
use crate::{parse_enum, LifecycleStore, NewEvent, StoreError};

#[async_trait]
impl LifecycleStore for PgStore {
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
        let remember = matches!(to, SandboxState::Suspending | SandboxState::Deleting);
        let res = sqlx::query(
            "UPDATE sandboxes SET state = $1, state_reason = $2, updated_at = $3, \
             prior_state = CASE WHEN $4 THEN state ELSE prior_state END \
             WHERE id = $5 AND state = ANY($6)",
        )
        .bind(to.as_str())
        .bind(reason)
        .bind(now)
        .bind(remember)
        .bind(id)
        .bind(state_strings(from))
        .execute(&mut *tx)
        .await?;
        let moved = res.rows_affected() > 0;
        if moved {
            if let Some(ev) = event {
                insert_event(&mut tx, id, ev, now).await?;
            }
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn record_event(&self, sandbox_id: &str, event: &NewEvent) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let seq = insert_event(&mut tx, sandbox_id, event, Utc::now()).await?;
        tx.commit().await?;
        Ok(seq)
    }

    async fn prior_state(&self, id: &str) -> Result<Option<SandboxState>, StoreError> {
        let row = sqlx::query("SELECT prior_state FROM sandboxes WHERE id = $1")
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
        sqlx::query("UPDATE sandboxes SET memory_restored = $1 WHERE id = $2")
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
        // Rows are locked in id order, so two concurrent flushes cannot deadlock.
        let mut ordered: Vec<&(String, DateTime<Utc>)> = seen.iter().collect();
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        let mut tx = self.pool.begin().await?;
        for (id, at) in ordered {
            sqlx::query(
                "UPDATE sandboxes SET last_activity_at = $1 WHERE id = $2 \
                 AND (last_activity_at IS NULL OR last_activity_at < $1)",
            )
            .bind(at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Takes the next event seq (locking the counter row until the transaction ends) and inserts
/// the event under it.
pub(super) async fn insert_event(
    conn: &mut PgConnection,
    sandbox_id: &str,
    ev: &NewEvent,
    at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let (seq,): (i64,) =
        sqlx::query_as("UPDATE event_seq SET last = last + 1 WHERE id = 1 RETURNING last")
            .fetch_one(&mut *conn)
            .await?;
    sqlx::query(
        "INSERT INTO events (seq, time, type, sandbox_id, operation_id, reason, destination, \
         host, port, rule) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(seq)
    .bind(at)
    .bind(ev.kind.as_str())
    .bind(sandbox_id)
    .bind(&ev.operation_id)
    .bind(&ev.reason)
    .bind(&ev.destination)
    .bind(&ev.host)
    .bind(ev.port.map(i32::from))
    .bind(&ev.rule)
    .execute(&mut *conn)
    .await?;
    from_i64(seq, "seq")
}
