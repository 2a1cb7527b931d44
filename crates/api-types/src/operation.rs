//! Operations: asynchronous lifecycle changes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ErrorCode;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// Create and start a sandbox.
    CreateSandbox,
    /// Delete a sandbox and everything it had.
    DeleteSandbox,
    /// Build a new release of a template.
    BuildRelease,
    /// Freeze a running sandbox.
    PauseSandbox,
    /// Thaw a paused sandbox.
    ResumeSandbox,
    /// Save a sandbox to the snapshot store and release its node resources.
    SuspendSandbox,
    /// Restore a suspended sandbox and start it.
    WakeSandbox,
}

impl OperationKind {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::CreateSandbox => "create_sandbox",
            OperationKind::DeleteSandbox => "delete_sandbox",
            OperationKind::BuildRelease => "build_release",
            OperationKind::PauseSandbox => "pause_sandbox",
            OperationKind::ResumeSandbox => "resume_sandbox",
            OperationKind::SuspendSandbox => "suspend_sandbox",
            OperationKind::WakeSandbox => "wake_sandbox",
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "create_sandbox" => OperationKind::CreateSandbox,
            "delete_sandbox" => OperationKind::DeleteSandbox,
            "build_release" => OperationKind::BuildRelease,
            "pause_sandbox" => OperationKind::PauseSandbox,
            "resume_sandbox" => OperationKind::ResumeSandbox,
            "suspend_sandbox" => OperationKind::SuspendSandbox,
            "wake_sandbox" => OperationKind::WakeSandbox,
            _ => return None,
        })
    }
}

/// State of an operation. `succeeded`, `failed` and `cancelled` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    /// Accepted, not started.
    Pending,
    /// In progress.
    Running,
    /// Done.
    Succeeded,
    /// Ended with an error (see `error`).
    Failed,
    /// Cancelled before it finished.
    Cancelled,
}

impl OperationState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationState::Pending => "pending",
            OperationState::Running => "running",
            OperationState::Succeeded => "succeeded",
            OperationState::Failed => "failed",
            OperationState::Cancelled => "cancelled",
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => OperationState::Pending,
            "running" => OperationState::Running,
            "succeeded" => OperationState::Succeeded,
            "failed" => OperationState::Failed,
            "cancelled" => OperationState::Cancelled,
            _ => return None,
        })
    }

    /// Whether the operation has ended.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            OperationState::Succeeded | OperationState::Failed | OperationState::Cancelled
        )
    }
}

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationError {
    /// Stable code.
    pub code: ErrorCode,
    /// Explanation.
    pub message: String,
}

/// An asynchronous lifecycle change. Poll `GET /v1/operations/{id}` (`?wait=30s` long-polls
/// until it ends or the wait elapses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Id (`op-` + 16 lowercase letters/digits).
    pub id: String,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
