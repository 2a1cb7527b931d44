//! The error body every failed API call returns.

use serde::{Deserialize, Serialize};

/// Body of every error response: `{"code": "...", "message": "...", "request_id": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code.
    pub code: ErrorCode,
    /// Human-readable explanation. Never holds host paths, SQL or stack traces.
    pub message: String,
    /// Id of the request, also in the `x-request-id` response header.
    pub request_id: String,
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $wire:literal => $status:literal, )*) => {
        /// Stable error codes. The wire string is snake_case; each has one HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ErrorCode {
            $( $(#[$doc])* #[serde(rename = $wire)] $variant, )*
        }

        impl ErrorCode {
            /// The wire string.
            pub fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $wire, )* }
            }

            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$( ErrorCode::$variant, )*];

            /// The HTTP status this code is returned with.
            pub fn http_status(self) -> u16 {
                match self { $( ErrorCode::$variant => $status, )* }
            }
        }

        impl utoipa::PartialSchema for ErrorCode {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                let statuses: Vec<String> = ErrorCode::ALL
                    .iter()
                    .map(|c| format!("`{}` {}", c.as_str(), c.http_status()))
                    .collect();
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .description(Some(format!(
                        "Stable error code; each has one HTTP status: {}.",
                        statuses.join(", ")
                    )))
                    .enum_values(Some(ErrorCode::ALL.iter().map(|c| c.as_str())))
                    .into()
            }
        }

        impl utoipa::ToSchema for ErrorCode {}
    };
}

error_codes! {
    /// The request is malformed or a field is invalid; the message names the field.
    InvalidArgument = "invalid_argument" => 400,
    /// Missing or wrong bearer token.
    Unauthorized = "unauthorized" => 401,
    /// The token is valid but may not do this.
    Forbidden = "forbidden" => 403,
    /// The sandbox's user may not access this file.
    PermissionDenied = "permission_denied" => 403,
    /// The feature is turned off on this server (`--disable-feature`); the message names it.
    FeatureDisabled = "feature_disabled" => 403,
    /// No such route or resource.
    NotFound = "not_found" => 404,
    /// No such sandbox (or it was deleted).
    SandboxNotFound = "sandbox_not_found" => 404,
    /// No such template.
    TemplateNotFound = "template_not_found" => 404,
    /// No such release of the template, or it is not ready.
    ReleaseNotFound = "release_not_found" => 404,
    /// No such command in the sandbox.
    CommandNotFound = "command_not_found" => 404,
    /// No such operation.
    OperationNotFound = "operation_not_found" => 404,
    /// No such file or directory in the sandbox.
    FileNotFound = "file_not_found" => 404,
    /// No such warm pool.
    PoolNotFound = "pool_not_found" => 404,
    /// No such checkpoint.
    CheckpointNotFound = "checkpoint_not_found" => 404,
    /// No such node.
    NodeNotFound = "node_not_found" => 404,
    /// No such volume (or it belongs to another org).
    VolumeNotFound = "volume_not_found" => 404,
    /// The HTTP method is not allowed on this route.
    MethodNotAllowed = "method_not_allowed" => 405,
    /// The transition is not allowed from the sandbox's current state.
    InvalidState = "invalid_state" => 409,
    /// The sandbox is not running (paused, suspended, stopped, failed), so it cannot run commands
    /// or serve files.
    SandboxNotRunning = "sandbox_not_running" => 409,
    /// The same `Idempotency-Key` was used with a different request body.
    IdempotencyMismatch = "idempotency_mismatch" => 409,
    /// A command create was retried with its `Idempotency-Key` after the sandbox's processes
    /// restarted (a wake without memory): whether the first attempt ran cannot be established.
    GuestRestarted = "guest_restarted" => 409,
    /// A file or directory already exists where one was to be created.
    AlreadyExists = "already_exists" => 409,
    /// The operation does not apply in the resource's current state (e.g. stdin closed).
    FailedPrecondition = "failed_precondition" => 409,
    /// A volume with this name already exists in the org.
    VolumeExists = "volume_exists" => 409,
    /// The volume is mounted by a sandbox (delete the sandbox first); the message names it.
    VolumeInUse = "volume_in_use" => 409,
    /// The request asks for something this server, runtime or topology does not support
    /// (volumes on qemu, or on a cluster none of whose nodes keeps volumes); the message says
    /// why.
    Unsupported = "unsupported" => 400,
    /// `FROM oci-archive:` in a template file, on a server whose operator set no OCI import
    /// directory (`--oci-import-dir`): image archives are imported only from there.
    OciImportDisabled = "oci_import_disabled" => 403,
    /// The request body is larger than allowed.
    PayloadTooLarge = "payload_too_large" => 413,
    /// An org's quota (running sandboxes, vCPUs, memory, creates per second) would be
    /// exceeded; the message names it and `Retry-After` says when to try again.
    QuotaExceeded = "quota_exceeded" => 429,
    /// The request's headers are too large.
    HeadersTooLarge = "headers_too_large" => 431,
    /// The sandbox's disk is full.
    NoSpace = "no_space" => 507,
    /// A volume is full: the write does not fit in its size.
    InsufficientStorage = "insufficient_storage" => 507,
    /// The feature exists in the API but is not implemented by this server or runtime yet.
    NotImplemented = "not_implemented" => 501,
    /// A sandbox port proxied by `/v1/sandboxes/{id}/ports/{port}/..` did not answer (nothing
    /// listens there, or it does not speak HTTP).
    BadGateway = "bad_gateway" => 502,
    /// The sandbox's agent or a node is unreachable right now (or, for a sandbox that mounts
    /// volumes, their node does not take sandboxes now: the message names it and its state).
    Unavailable = "unavailable" => 503,
    /// An operation exceeded its deadline.
    DeadlineExceeded = "deadline_exceeded" => 504,
    /// The operation was cancelled by request (the code of a `cancelled` operation's `error`).
    Cancelled = "cancelled" => 409,
    /// The sandbox's snapshot is damaged (its manifest or an artifact cannot be read back), so
    /// it cannot be woken; the sandbox stays as it was and can still be deleted.
    SnapshotCorrupt = "snapshot_corrupt" => 500,
    /// A release a node fetched from the snapshot store does not match its digest (or cannot
    /// be read back); the create fails and nothing of the release is kept on the node.
    ReleaseCorrupt = "release_corrupt" => 500,
    /// A server bug or an unexpected failure; details are in the server log under the request id.
    Internal = "internal" => 500,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
