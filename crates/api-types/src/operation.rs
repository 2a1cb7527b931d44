//! Operations: asynchronous lifecycle changes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{ErrorCode, OperationKind, OperationState};

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OperationError {
    /// Stable code.
    pub code: ErrorCode,
    /// Explanation.
    pub message: String,
}

/// An asynchronous lifecycle change. Poll `GET /v1/operations/{id}` (`?wait=30s` long-polls
/// until it ends or the wait elapses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Operation {
    /// Id (`op-` + 16 lowercase letters/digits).
    pub id: String,
    /// The org it belongs to.
    #[serde(default = "crate::default_org")]
    pub org: String,
    /// What it does.
    pub kind: OperationKind,
    /// Current state.
    pub state: OperationState,
    /// Sandbox it acts on, if any.
    pub sandbox_id: Option<String>,
    /// Template it acts on, if any.
    pub template: Option<String>,
    /// Release it builds, if any.
    pub release: Option<u32>,
    /// Progress of a build, 0–100.
    pub progress: Option<u8>,
    /// Why it failed.
    pub error: Option<OperationError>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it is failed with `deadline_exceeded` if not done.
    pub deadline: DateTime<Utc>,
}

/// One event of `GET /v1/operations/{id}/logs` (SSE event `log` or `progress`, then `done`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OperationLogEvent {
    /// A line of the build log.
    Log {
        /// Sequence number of the line (resume with `?after=`).
        seq: u64,
        /// The line, without its newline.
        line: String,
    },
    /// Progress update.
    Progress {
        /// Percent done, 0–100.
        percent: u8,
        /// Current phase.
        phase: String,
    },
    /// The operation ended.
    Done {
        /// Its final state.
        operation: Operation,
    },
}
