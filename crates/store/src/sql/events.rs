//! The event log and the purge of old events and operations (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{Event, EventType};

use super::{query, to_i64, Backend, SqlRow};
use crate::{parse_enum, EventStore, StoreError};

#[async_trait]
impl<S: Backend> EventStore for S {
    async fn events_after(
        &self,
        org: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let rows = query(
            "SELECT * FROM events WHERE seq > $1 AND (CAST($2 AS TEXT) IS NULL OR sandbox_id IN \
             (SELECT id FROM sandboxes WHERE org = $2)) ORDER BY seq LIMIT $3",
        )
        .bind(to_i64(after)?)
        .bind(org)
        .bind(i64::from(limit))
        .fetch_all(&mut self.db())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Event {
                    seq: r.uint("seq")?,
                    time: r.try_get("time")?,
                    kind: parse_enum(&r.try_get::<String, _>("type")?, EventType::parse)?,
                    sandbox_id: r.try_get("sandbox_id")?,
                    operation_id: r.try_get("operation_id")?,
                    reason: r.try_get("reason")?,
                    destination: r.try_get("destination")?,
                    host: r.try_get("host")?,
                    port: r
                        .try_get::<Option<i32>, _>("port")?
                        .and_then(|p| u16::try_from(p).ok()),
                    rule: r.try_get("rule")?,
                })
            })
            .collect()
    }

    async fn purge_events_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let events = query("DELETE FROM events WHERE time < $1")
            .bind(before)
            .execute(&mut self.db())
            .await?;
        Ok(events)
    }
}
