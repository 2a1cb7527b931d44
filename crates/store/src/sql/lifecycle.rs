//! Lifecycle writes: transitions with their events in one transaction, prior state,
//! activity times, wake results (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::SandboxState;

use super::sandboxes::state_strings;
use super::{query, Backend, SqlRow, Tx};
use crate::{parse_enum, LifecycleStore, NewEvent, StoreError};

#[async_trait]
impl<S: Backend> LifecycleStore for S {
    async fn transition_with_event(
        &self,
        id: &str,
        from: &[SandboxState],
        to: SandboxState,
        reason: Option<&str>,
        event: Option<&NewEvent>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let now = Utc::now();
        let remember = matches!(to, SandboxState::Suspending | SandboxState::Deleting);
        let sql = format!(
            "UPDATE sandboxes SET state = $1, state_reason = $2, updated_at = $3, \
             prior_state = CASE WHEN $4 THEN state ELSE prior_state END \
             WHERE id = $5 AND state IN {}",
            S::in_json_array(6)
        );
        let res = query(&sql)
            .bind(to.as_str())
            .bind(reason)
            .bind(now)
            .bind(remember)
            .bind(id)
            .bind(state_strings(from)?)
            .execute(&mut tx)
            .await?;
        let moved = res > 0;
        if moved {
            if let Some(ev) = event {
                insert_event::<S>(&mut tx, id, ev, now).await?;
            }
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn record_event(&self, sandbox_id: &str, event: &NewEvent) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let seq = insert_event::<S>(&mut tx, sandbox_id, event, Utc::now()).await?;
        tx.commit().await?;
        Ok(seq)
    }

    async fn prior_state(&self, id: &str) -> Result<Option<SandboxState>, StoreError> {
        let row = query("SELECT prior_state FROM sandboxes WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut self.db())
            .await?
            .ok_or(StoreError::NotFound)?;
        match row.try_get::<Option<String>, _>("prior_state")? {
            Some(s) => Ok(Some(parse_enum(&s, SandboxState::parse)?)),
            None => Ok(None),
        }
    }

    async fn set_memory_restored(&self, id: &str, restored: bool) -> Result<(), StoreError> {
        query("UPDATE sandboxes SET memory_restored = $1 WHERE id = $2")
            .bind(restored)
            .bind(id)
            .execute(&mut self.db())
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
        let mut tx = self.begin().await?;
        for (id, at) in ordered {
            query(
                "UPDATE sandboxes SET last_activity_at = $1 WHERE id = $2 \
                 AND (last_activity_at IS NULL OR last_activity_at < $1)",
            )
            .bind(at)
            .bind(id)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Inserts an event under the next seq ([`Backend::next_event_seq`]); returns the seq.
pub(super) async fn insert_event<S: Backend>(
    tx: &mut S::Tx,
    sandbox_id: &str,
    ev: &NewEvent,
    at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let seq = S::next_event_seq(tx).await?;
    let row = query(
        "INSERT INTO events (seq, time, type, sandbox_id, operation_id, reason, destination, \
         host, port, rule) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING seq",
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
    .fetch_one(tx)
    .await?;
    row.uint("seq")
}
