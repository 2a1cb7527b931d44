//! Operations and their log lines.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use cove_api_types::{Operation, OperationError, OperationKind, OperationState};

use crate::StoreError;

/// A new operation.
#[derive(Debug, Clone)]
pub struct NewOperation {
    /// Id.
    pub id: String,
    /// The org it belongs to.
    pub org: String,
    /// Kind.
    pub kind: OperationKind,
    /// Sandbox it acts on.
    pub sandbox_id: Option<String>,
    /// Template it acts on.
    pub template: Option<String>,
    /// Release it builds.
    pub release: Option<u32>,
    /// Idempotency key of the request, if any.
    pub idempotency_key: Option<String>,
    /// Hash of the request body (for idempotency checks).
    pub request_hash: Option<String>,
    /// Deadline.
    pub deadline: DateTime<Utc>,
}

/// A change of an operation; `None` fields keep their value.
#[derive(Debug, Clone, Default)]
pub struct OperationUpdate {
    /// New state.
    pub state: Option<OperationState>,
    /// New progress (percent).
    pub progress: Option<u8>,
    /// Failure.
    pub error: Option<OperationError>,
}

/// Operation rows and their logs.
#[async_trait]
pub trait OperationStore: Send + Sync {
    /// Inserts an operation in state `pending` and returns it. A taken id, or an idempotency
    /// key already used by an operation of the same kind, is [`StoreError::Conflict`].
    async fn insert_operation(&self, op: &NewOperation) -> Result<Operation, StoreError>;

    /// One operation; [`StoreError::NotFound`] when there is none.
    async fn get_operation(&self, id: &str) -> Result<Operation, StoreError>;

    /// The operation of `kind` created with `key`, and its request hash.
    async fn operation_by_idempotency_key(
        &self,
        org: &str,
        kind: OperationKind,
        key: &str,
    ) -> Result<Option<(Operation, Option<String>)>, StoreError>;

    /// Applies an update unless the operation already ended (final states never change).
    /// Returns the operation as stored afterwards; [`StoreError::NotFound`] for an unknown id.
    async fn update_operation(
        &self,
        id: &str,
        u: &OperationUpdate,
    ) -> Result<Operation, StoreError>;

    /// Operations that have not ended (`pending` or `running`; after a restart they are
    /// failed).
    async fn unfinished_operations(&self) -> Result<Vec<Operation>, StoreError>;

    /// Recent operations, newest first (`created_at`, then `id`, descending), at most `limit`:
    /// of one sandbox when `sandbox_id` is given.
    async fn list_operations(
        &self,
        org: Option<&str>,
        sandbox_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Operation>, StoreError>;

    /// Whether sandbox `sandbox_id` has an operation that has not ended.
    async fn has_unfinished_operation(&self, sandbox_id: &str) -> Result<bool, StoreError>;

    /// Appends a log line to operation `id`; returns its sequence number (1, 2, ... per
    /// operation, without gaps, also under concurrent appends).
    async fn append_operation_log(&self, id: &str, line: &str) -> Result<u64, StoreError>;

    /// Log lines with `seq > after`, oldest first, at most `limit`.
    async fn operation_logs(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(u64, String)>, StoreError>;

    /// Deletes finished operations (with their log lines) last changed before `before`, in one
    /// transaction; returns how many operations. Unfinished operations are kept whatever their
    /// age.
    async fn purge_operations_before(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}
