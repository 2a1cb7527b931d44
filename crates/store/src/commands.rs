//! Commands: which sandbox each belongs to and its current attachment token (hashed). The
//! command's process state lives in the guest agent, not here.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::StoreError;

/// A command row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRecord {
    /// Command id.
    pub id: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// SHA-256 (hex) of the current attachment token.
    pub attachment_token_hash: String,
    /// Expiry of the current attachment token.
    pub attachment_expires_at: DateTime<Utc>,
    /// The `Idempotency-Key` the command was created with, unique per sandbox.
    pub idempotency_key: Option<String>,
    /// Hash of the create request's body (to tell a retry from a different request).
    pub request_hash: Option<String>,
    /// The sandbox's processes restarted after this command started (a wake without memory):
    /// the row is kept only as a marker for its idempotency key.
    pub guest_restarted: bool,
}

/// Command rows and their attachment tokens.
#[async_trait]
pub trait CommandStore: Send + Sync {
    /// Inserts a command row; a taken id, or an idempotency key the sandbox already used, is
    /// [`StoreError::Conflict`].
    async fn insert_command(&self, c: &CommandRecord) -> Result<(), StoreError>;

    /// The command a sandbox created with `key`, if any.
    async fn command_by_idempotency_key(
        &self,
        sandbox_id: &str,
        key: &str,
    ) -> Result<Option<CommandRecord>, StoreError>;

    /// One command row; [`StoreError::NotFound`] when there is none.
    async fn get_command(&self, id: &str) -> Result<CommandRecord, StoreError>;

    /// Replaces a command's attachment token (the old one stops working);
    /// [`StoreError::NotFound`] for an unknown command.
    async fn set_attachment(
        &self,
        id: &str,
        hash: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Deletes a command row (a failed start); an unknown id is a no-op.
    async fn delete_command(&self, id: &str) -> Result<(), StoreError>;

    /// Deletes every command row of a sandbox.
    async fn delete_commands_of(&self, sandbox_id: &str) -> Result<(), StoreError>;

    /// The sandbox's processes restarted: deletes its command rows without an idempotency key
    /// and marks the others [`CommandRecord::guest_restarted`] (kept until the sandbox goes).
    async fn mark_guest_restarted(&self, sandbox_id: &str) -> Result<(), StoreError>;
}
