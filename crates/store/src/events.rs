//! The lifecycle event log (`GET /v1/events`) and the purge of old events.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::Event;

use crate::StoreError;

/// Reading the event log, and retention.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Events with `seq > after`, oldest first, at most `limit`; only those of `org`'s
    /// sandboxes when given.
    async fn events_after(
        &self,
        org: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError>;

    /// Deletes events older than `before`; returns how many. The sequence counter is not
    /// reset.
    async fn purge_events_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}
