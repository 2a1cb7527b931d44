//! The audit log: who did what, to what, when, and how it ended (`GET /v1/audit`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::AuditEntry;

use crate::StoreError;

/// Audit rows.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends `entry` (its `seq` is ignored: the store gives the next one); returns its seq.
    async fn append_audit(&self, entry: &AuditEntry) -> Result<u64, StoreError>;

    /// Records with `seq > after`, oldest first, at most `limit`; only `org`'s when given.
    async fn audit_after(
        &self,
        org: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError>;

    /// Deletes records older than `before`; returns how many.
    async fn purge_audit_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}
