//! The lifecycle event log (`GET /v1/events`) and the purge of old events and operations.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::Event;

use crate::StoreError;

/// What a purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Finished operations (with their log lines).
    pub operations: u64,
    /// Events.
    pub events: u64,
}

/// Reading the event log, and retention.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Events with `seq > after`, oldest first, at most `limit`.
    async fn events_after(&self, after: u64, limit: u32) -> Result<Vec<Event>, StoreError>;

    /// Deletes events older than `before`, and finished operations (and their log lines) last
    /// changed before `before`, in one transaction. Unfinished operations are kept whatever
    /// their age.
    async fn purge_before(&self, before: DateTime<Utc>) -> Result<Purged, StoreError>;
}
