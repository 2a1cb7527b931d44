//! Sandbox lifecycle records: state transitions with their events (one transaction), the
//! state to roll back to, activity times, and wake results.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{EventType, SandboxState};

use crate::StoreError;

/// A lifecycle event to record with a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// What happened.
    pub kind: EventType,
    /// The operation that made it happen.
    pub operation_id: Option<String>,
    /// Detail (why it failed, `idle`, ...).
    pub reason: Option<String>,
    /// What a sandbox's gateway refused (`network.denied` events only).
    pub destination: Option<String>,
    /// For `network.denied`: the host it tried (the name it carried, else the address).
    pub host: Option<String>,
    /// For `network.denied`: the port it tried (none for a DNS question).
    pub port: Option<u16>,
    /// For `network.denied`: the rule that refused it (`deny RULE`, `floor (...)`, `internet
    /// off and no allow rule names it`).
    pub rule: Option<String>,
}

/// Lifecycle writes on sandbox rows and the event log.
#[async_trait]
pub trait LifecycleStore: Send + Sync {
    /// Moves sandbox `id` to `to` if it is in one of `from` (compare-and-set), sets its
    /// `state_reason` to `reason`, and records `event` — all in one transaction, so the event
    /// exists exactly when the move happened. Entering `suspending` or `deleting` remembers the
    /// state left (see [`LifecycleStore::prior_state`]). Returns whether the sandbox moved.
    async fn transition_with_event(
        &self,
        id: &str,
        from: &[SandboxState],
        to: SandboxState,
        reason: Option<&str>,
        event: Option<&NewEvent>,
    ) -> Result<bool, StoreError>;

    /// Records an event on its own (e.g. `sandbox.created` with the insert); returns its
    /// sequence number. Sequence numbers grow by one per event, in commit order, and are never
    /// reused (not even after a purge), so a reader that saw `seq = n` misses nothing by asking
    /// for `seq > n`.
    async fn record_event(&self, sandbox_id: &str, event: &NewEvent) -> Result<u64, StoreError>;

    /// The state a sandbox was in before it last entered `suspending` or `deleting` (`None`
    /// if it never did); [`StoreError::NotFound`] for an unknown sandbox.
    async fn prior_state(&self, id: &str) -> Result<Option<SandboxState>, StoreError>;

    /// Records whether the last wake restored process memory.
    async fn set_memory_restored(&self, id: &str, restored: bool) -> Result<(), StoreError>;

    /// Writes last-activity times (one transaction); a time older than the stored one is
    /// ignored, and unknown ids are skipped.
    async fn record_activity(&self, seen: &[(String, DateTime<Utc>)]) -> Result<(), StoreError>;
}
