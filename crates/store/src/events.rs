//! The lifecycle event log (`GET /v1/events`) and the purge of old events and operations.

use chrono::{DateTime, Utc};
use cove_api_types::{Event, EventType};
use sqlx::Row;

use crate::{parse_enum, Store, StoreError};

/// What a purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Finished operations (with their log lines).
    pub operations: u64,
    /// Events.
    pub events: u64,
}

impl Store {
    /// Events with `seq > after`, oldest first, at most `limit`.
    pub async fn events_after(&self, after: u64, limit: u32) -> Result<Vec<Event>, StoreError> {
        let rows = sqlx::query("SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?")
            .bind(after as i64)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Event {
                    seq: r.try_get::<i64, _>("seq")? as u64,
                    time: r.try_get("time")?,
                    kind: parse_enum(&r.try_get::<String, _>("type")?, EventType::parse)?,
                    sandbox_id: r.try_get("sandbox_id")?,
                    operation_id: r.try_get("operation_id")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Deletes events older than `before`, and finished operations (and their log lines) last
    /// changed before `before`. Unfinished operations are kept whatever their age.
    pub async fn purge_before(&self, before: DateTime<Utc>) -> Result<Purged, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM operation_logs WHERE operation_id IN (SELECT id FROM operations WHERE \
             updated_at < ? AND state IN ('succeeded', 'failed', 'cancelled'))",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?;
        let ops = sqlx::query(
            "DELETE FROM operations WHERE updated_at < ? \
             AND state IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?;
        let events = sqlx::query("DELETE FROM events WHERE time < ?")
            .bind(before)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Purged {
            operations: ops.rows_affected(),
            events: events.rows_affected(),
        })
    }
}
