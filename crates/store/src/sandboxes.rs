//! Sandboxes: their rows, listing with filters and cursor paging.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{EgressPolicy, OnExpiry, Sandbox, SandboxState};

use crate::StoreError;

/// Filters of a sandbox listing.
#[derive(Debug, Clone, Default)]
pub struct SandboxFilter {
    /// Only this org's sandboxes (`None`: every org's).
    pub org: Option<String>,
    /// Only this state.
    pub state: Option<SandboxState>,
    /// Only this template.
    pub template: Option<String>,
    /// Only sandboxes whose metadata has every one of these `(key, value)` pairs.
    pub metadata: Vec<(String, String)>,
    /// Include deleted sandboxes (asking for `state: deleted` includes them too).
    pub include_deleted: bool,
    /// Page size (rows at most).
    pub limit: u32,
    /// Continue after this `(created_at, id)` position: the last row of the previous page.
    pub after: Option<(DateTime<Utc>, String)>,
}

/// Sandbox rows.
#[async_trait]
pub trait SandboxStore: Send + Sync {
    /// Inserts a new sandbox. A taken id is [`StoreError::Conflict`].
    async fn insert_sandbox(&self, s: &Sandbox) -> Result<(), StoreError>;

    /// One sandbox (deleted ones too); [`StoreError::NotFound`] when there is none.
    async fn get_sandbox(&self, id: &str) -> Result<Sandbox, StoreError>;

    /// Sets the state and `state_reason` of a sandbox, but only if it is currently in one of
    /// `from` (compare-and-set), so a late writer cannot undo a newer transition. Returns
    /// whether the row changed (false also for an unknown id).
    async fn transition_sandbox(
        &self,
        id: &str,
        from: &[SandboxState],
        to: SandboxState,
        reason: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// A page of sandboxes, newest first (`created_at` descending, then `id` descending),
    /// without deleted ones unless the filter asks for them.
    async fn list_sandboxes(&self, f: &SandboxFilter) -> Result<Vec<Sandbox>, StoreError>;

    /// Every sandbox in one of `states` (for reconciliation), in no particular order.
    async fn sandboxes_in(&self, states: &[SandboxState]) -> Result<Vec<Sandbox>, StoreError>;

    /// Replaces a sandbox's egress policy (`network`); returns whether the sandbox exists.
    async fn set_sandbox_network(
        &self,
        id: &str,
        policy: &EgressPolicy,
    ) -> Result<bool, StoreError>;

    /// Sets whether a sandbox's ports are reachable without a credential; returns whether the
    /// sandbox exists.
    async fn set_sandbox_public(&self, id: &str, public: bool) -> Result<bool, StoreError>;

    /// Records the size in bytes of the snapshot a suspend saved of sandbox `id` (0: it has
    /// none, after a wake); counted toward its org's `max_snapshot_mib` until it is deleted.
    /// Returns whether the sandbox exists.
    async fn set_snapshot_bytes(&self, id: &str, bytes: u64) -> Result<bool, StoreError>;

    /// Stores the sealed values of a sandbox's secrets (an opaque string made by the control
    /// plane; never a value in clear). Returns whether the sandbox exists.
    async fn set_sealed_secrets(&self, id: &str, sealed: &str) -> Result<bool, StoreError>;

    /// Gives sandbox `id` secrets after it was recorded (a warm pool member claimed by a
    /// create with secrets): their public part (`secrets` of the sandbox) and their sealed
    /// values, in one write. Returns whether the sandbox exists.
    async fn set_sandbox_secrets(
        &self,
        id: &str,
        public: &std::collections::BTreeMap<String, cove_api_types::SandboxSecret>,
        sealed: &str,
    ) -> Result<bool, StoreError>;

    /// Sets the volumes sandbox `id` mounts, after it was recorded (a warm pool member claimed
    /// by a create that mounts volumes; a volume delete then sees them in use). Returns whether
    /// the sandbox exists.
    async fn set_sandbox_volumes(
        &self,
        id: &str,
        volumes: &[cove_api_types::VolumeMount],
    ) -> Result<bool, StoreError>;

    /// The sealed values of a sandbox's secrets (`None`: none stored);
    /// [`StoreError::NotFound`] for an unknown sandbox.
    async fn sealed_secrets(&self, id: &str) -> Result<Option<String>, StoreError>;

    /// Sets when sandbox `id` expires (`None`: never) and what its expiry does. Returns
    /// whether a sandbox not deleting or deleted has it now.
    async fn set_sandbox_expiry(
        &self,
        id: &str,
        expires_at: Option<DateTime<Utc>>,
        on_expiry: OnExpiry,
    ) -> Result<bool, StoreError>;

    /// Moves the expiry of sandbox `id` to `at` when it has none or an earlier one (never
    /// earlier), with `on_expiry`. Returns whether it moved.
    async fn extend_sandbox_expiry(
        &self,
        id: &str,
        at: DateTime<Utc>,
        on_expiry: OnExpiry,
    ) -> Result<bool, StoreError>;

    /// At most `limit` sandboxes (not deleting or deleted) whose expiry is at or before
    /// `now`, the earliest first.
    async fn expired_sandboxes(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Sandbox>, StoreError>;

    /// Claims the expiry of sandbox `id`: clears its `expires_at` if it is still at or before
    /// `now` (a conditional write). Of replicas racing for one expiry, exactly one gets
    /// `true` and acts on it; an expiry moved later meanwhile is not claimed.
    async fn claim_expiry(&self, id: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;
}
