//! Checkpoint rows: what a checkpoint is of (sandbox, template, release, resources, defaults)
//! and how far its saving got. The bytes live in the node's snapshot store.

use async_trait::async_trait;
use cove_api_types::Checkpoint;

use crate::StoreError;

/// Checkpoint rows.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Inserts checkpoint `c` (normally `creating`). A taken id is [`StoreError::Conflict`].
    async fn insert_checkpoint(&self, c: &Checkpoint) -> Result<(), StoreError>;

    /// One checkpoint; [`StoreError::NotFound`] when there is none.
    async fn get_checkpoint(&self, id: &str) -> Result<Checkpoint, StoreError>;

    /// The checkpoints of `org` (every org's when `None`) and of `sandbox_id` (every
    /// sandbox's when `None`), newest first.
    async fn list_checkpoints(
        &self,
        org: Option<&str>,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<Checkpoint>, StoreError>;

    /// Moves a `creating` checkpoint to `ready` with what was saved (`file_bytes`, `memory`,
    /// `pause_ms` in milliseconds). Returns whether it moved (false: not `creating`, or gone).
    async fn checkpoint_ready(
        &self,
        id: &str,
        file_bytes: u64,
        memory: bool,
        pause_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Moves a `creating` checkpoint to `failed` with `reason`. Returns whether it moved.
    async fn checkpoint_failed(&self, id: &str, reason: &str) -> Result<bool, StoreError>;

    /// Moves every `creating` checkpoint to `failed` with `reason` (at start-up, for saves a
    /// restart interrupted); returns their ids.
    async fn fail_unfinished_checkpoints(&self, reason: &str) -> Result<Vec<String>, StoreError>;

    /// Removes a checkpoint's row. Returns whether it existed.
    async fn delete_checkpoint(&self, id: &str) -> Result<bool, StoreError>;
}
