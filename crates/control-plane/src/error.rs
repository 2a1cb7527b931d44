//! Service errors, and their one mapping to API error codes.

use cove_api_types::{ErrorCode, SandboxState};
use cove_domain::InvalidInput;
use cove_node_api::NodeError;
use cove_store::StoreError;

/// Errors of the control plane's services. Each maps to exactly one [`ErrorCode`] in
/// [`ServiceError::code`]; 5xx details are logged, not shown to clients.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A field of the request is invalid.
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    /// Unknown sandbox.
    #[error("sandbox {0} not found")]
    SandboxNotFound(String),
    /// Unknown template.
    #[error("template {0} not found")]
    TemplateNotFound(String),
    /// No usable release.
    #[error("{0}")]
    ReleaseNotFound(String),
    /// Unknown command.
    #[error("command {0} not found")]
    CommandNotFound(String),
    /// Unknown warm pool.
    #[error("pool {0} not found")]
    PoolNotFound(String),
    /// Unknown checkpoint.
    #[error("checkpoint {0} not found")]
    CheckpointNotFound(String),
    /// Unknown volume (or another org's).
    #[error("volume {0} not found")]
    VolumeNotFound(String),
    /// A volume of that name exists in the org.
    #[error("volume {0} already exists")]
    VolumeExists(String),
    /// A sandbox mounts the volume; the message names the sandboxes.
    #[error("{0}")]
    VolumeInUse(String),
    /// A volume is full.
    #[error("{0}")]
    InsufficientStorage(String),
    /// The server, runtime or topology does not support the request; the message says why.
    #[error("{0}")]
    Unsupported(String),
    /// The feature is turned off on this server.
    #[error("feature {} is disabled on this server", .0.as_str())]
    FeatureDisabled(crate::features::Feature),
    /// The feature is turned off for the org (`disabled_features`).
    #[error("feature {} is disabled for org {org}", .feature.as_str())]
    FeatureDisabledForOrg {
        /// The feature.
        feature: crate::features::Feature,
        /// The org it is off for.
        org: String,
    },
    /// Another unknown resource (an org, an API key); the message names it.
    #[error("{0}")]
    NotFound(String),
    /// The caller may not do this (an org's key on an admin route).
    #[error("{0}")]
    Forbidden(String),
    /// An org's quota would be exceeded.
    #[error("{message}")]
    QuotaExceeded {
        /// What is said, naming the quota.
        message: String,
        /// Seconds after which a retry may pass (`Retry-After`).
        retry_after_s: u64,
    },
    /// Unknown node.
    #[error("node {0} not found")]
    NodeNotFound(String),
    /// Unknown operation.
    #[error("operation {0} not found")]
    OperationNotFound(String),
    /// No such file in the sandbox.
    #[error("{0}")]
    FileNotFound(String),
    /// The sandbox does not run.
    #[error("sandbox {id} is {state}, not running", state = .state.as_str())]
    SandboxNotRunning {
        /// Sandbox id.
        id: String,
        /// Its state.
        state: SandboxState,
    },
    /// The transition is illegal from the current state.
    #[error("sandbox {id} cannot go from {from} to {to}", from = .from.as_str(), to = .to.as_str())]
    InvalidState {
        /// Sandbox id.
        id: String,
        /// Current state.
        from: SandboxState,
        /// Requested state.
        to: SandboxState,
    },
    /// Idempotency key reused with another body.
    #[error("the Idempotency-Key was already used with a different request")]
    IdempotencyMismatch,
    /// A command retried by its idempotency key after the sandbox's processes restarted.
    #[error("{0}")]
    GuestRestarted(String),
    /// Not applicable in the current state.
    #[error("{0}")]
    FailedPrecondition(String),
    /// Already there.
    #[error("{0}")]
    AlreadyExists(String),
    /// Sandbox-side permission error.
    #[error("{0}")]
    PermissionDenied(String),
    /// Disk full in the sandbox.
    #[error("{0}")]
    NoSpace(String),
    /// The sandbox's snapshot cannot be read back.
    #[error("{0}")]
    SnapshotCorrupt(String),
    /// A release fetched from the snapshot store does not match its digest.
    #[error("{0}")]
    ReleaseCorrupt(String),
    /// Too large.
    #[error("{0}")]
    TooLarge(String),
    /// Not built yet.
    #[error("{0}")]
    NotImplemented(String),
    /// `FROM oci-archive:` on a server with no OCI import directory.
    #[error(
        "this server has no OCI import directory: FROM oci-archive: is off (an operator turns \
         it on with --oci-import-dir DIR)"
    )]
    OciImportDisabled,
    /// Missing or bad credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// A proxied sandbox port did not answer.
    #[error("{0}")]
    BadGateway(String),
    /// Agent or node unreachable.
    #[error("{0}")]
    Unavailable(String),
    /// The operation was cancelled (by request, or at its deadline).
    #[error("{0}")]
    Cancelled(String),
    /// A bug or unexpected failure (logged with detail; clients see a generic message).
    #[error("{0}")]
    Internal(String),
    /// A service that decides on its caller found none in scope (a bug: work that is no
    /// tenant's request runs as `Caller::system()`; see `orgs::scope`).
    #[error("no caller in scope")]
    NoCaller,
}

impl ServiceError {
    /// The API code of this error.
    pub fn code(&self) -> ErrorCode {
        use ServiceError::*;
        match self {
            Invalid(_) => ErrorCode::InvalidArgument,
            SandboxNotFound(_) => ErrorCode::SandboxNotFound,
            TemplateNotFound(_) => ErrorCode::TemplateNotFound,
            ReleaseNotFound(_) => ErrorCode::ReleaseNotFound,
            CommandNotFound(_) => ErrorCode::CommandNotFound,
            OperationNotFound(_) => ErrorCode::OperationNotFound,
            PoolNotFound(_) => ErrorCode::PoolNotFound,
            CheckpointNotFound(_) => ErrorCode::CheckpointNotFound,
            FeatureDisabled(_) | FeatureDisabledForOrg { .. } => ErrorCode::FeatureDisabled,
            VolumeNotFound(_) => ErrorCode::VolumeNotFound,
            VolumeExists(_) => ErrorCode::VolumeExists,
            VolumeInUse(_) => ErrorCode::VolumeInUse,
            InsufficientStorage(_) => ErrorCode::InsufficientStorage,
            Unsupported(_) => ErrorCode::Unsupported,
            NodeNotFound(_) => ErrorCode::NodeNotFound,
            NotFound(_) => ErrorCode::NotFound,
            Forbidden(_) => ErrorCode::Forbidden,
            QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            FileNotFound(_) => ErrorCode::FileNotFound,
            SandboxNotRunning { .. } => ErrorCode::SandboxNotRunning,
            InvalidState { .. } => ErrorCode::InvalidState,
            IdempotencyMismatch => ErrorCode::IdempotencyMismatch,
            GuestRestarted(_) => ErrorCode::GuestRestarted,
            FailedPrecondition(_) => ErrorCode::FailedPrecondition,
            AlreadyExists(_) => ErrorCode::AlreadyExists,
            PermissionDenied(_) => ErrorCode::PermissionDenied,
            NoSpace(_) => ErrorCode::NoSpace,
            SnapshotCorrupt(_) => ErrorCode::SnapshotCorrupt,
            ReleaseCorrupt(_) => ErrorCode::ReleaseCorrupt,
            TooLarge(_) => ErrorCode::PayloadTooLarge,
            NotImplemented(_) => ErrorCode::NotImplemented,
            OciImportDisabled => ErrorCode::OciImportDisabled,
            Unauthorized(_) => ErrorCode::Unauthorized,
            BadGateway(_) => ErrorCode::BadGateway,
            Unavailable(_) => ErrorCode::Unavailable,
            Cancelled(_) => ErrorCode::Cancelled,
            Internal(_) | NoCaller => ErrorCode::Internal,
        }
    }

    /// The message a client sees.
    pub fn public_message(&self) -> String {
        match self {
            ServiceError::Internal(_) => {
                "internal error; the server log has details under this request id".to_string()
            }
            ServiceError::NoCaller => "internal error: no caller in scope (a server bug; the \
                                       server log has details under this request id)"
                .to_string(),
            other => other.to_string(),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        if e.is_storage_full() {
            tracing::warn!(error = %e, "the store's disk is full");
            return ServiceError::NoSpace("the server's disk is full".into());
        }
        ServiceError::Internal(format!("store: {e}"))
    }
}

/// Maps a node error of a call on `sandbox_id` (the one place node errors become API errors).
pub fn from_node(e: NodeError, sandbox_id: &str) -> ServiceError {
    use NodeError as N;
    match e {
        N::SandboxNotFound(_) => {
            ServiceError::Unavailable(format!("sandbox {sandbox_id} is not present on its node"))
        }
        N::CommandNotFound(cid) => ServiceError::CommandNotFound(cid),
        N::FileNotFound(m) => ServiceError::FileNotFound(m),
        N::ReleaseNotFound(m) => ServiceError::ReleaseNotFound(m),
        N::InvalidArgument { field, message } | N::WrongType { field, message } => {
            ServiceError::Invalid(InvalidInput::new(field, message))
        }
        N::AlreadyExists(m) => ServiceError::AlreadyExists(m),
        N::PermissionDenied(m) => ServiceError::PermissionDenied(m),
        N::FailedPrecondition(m) => ServiceError::FailedPrecondition(m),
        N::NoSpace(m) => ServiceError::NoSpace(m),
        N::SnapshotCorrupt(m) => ServiceError::SnapshotCorrupt(m),
        N::ReleaseCorrupt(m) => ServiceError::ReleaseCorrupt(m),
        N::TooLarge(m) => ServiceError::TooLarge(m),
        N::SpawnFailed(m) => ServiceError::Unavailable(format!("could not start the process: {m}")),
        N::AgentUnavailable(m) => {
            ServiceError::Unavailable(format!("sandbox {sandbox_id} does not answer: {m}"))
        }
        N::Cancelled => ServiceError::Cancelled("cancelled".into()),
        N::Unsupported(m) => ServiceError::NotImplemented(m),
        N::OciImportDisabled => ServiceError::OciImportDisabled,
        N::PortClosed(m) => ServiceError::BadGateway(m),
        N::NodeUnreachable(m) => ServiceError::Unavailable(format!(
            "the node of sandbox {sandbox_id} is unreachable: {m}"
        )),
        N::NoNodeAvailable(m) => ServiceError::Unavailable(format!("no node available: {m}")),
        e @ (N::Runtime(_) | N::Build(_) | N::Internal(_)) => ServiceError::Internal(e.to_string()),
    }
}
