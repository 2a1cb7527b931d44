//! The error shapes E2B clients parse: REST `{code:int, message}`, Connect
//! `{code:"not_found", message}`, envd HTTP `{code:int, message}`, and the proxy's 502 for a
//! sandbox that is not running.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cove_api_types::ErrorCode;
use cove_control_plane::ServiceError;

use crate::model::errors::{ConnectErrorBody, ErrorBody, ProxyError};

/// An error of the REST control API, answered as `{"code": <status>, "message": ...}` (what
/// the SDK's generated client requires on every error status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct RestError {
    /// HTTP status.
    pub status: StatusCode,
    /// Message shown by the SDK's exception.
    pub message: String,
    /// Seconds for `Retry-After` (a quota refusal).
    pub retry_after_s: Option<u64>,
}

impl RestError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        RestError {
            status,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// The body it answers with.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.status.as_u16(),
            message: self.message.clone(),
        }
    }

    /// `501`: a feature of E2B's API Cove does not offer yet (the SDK raises an exception).
    pub fn unsupported(what: &str) -> Self {
        RestError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("{what} is not supported by Cove's E2B compatibility layer yet"),
        )
    }
}

impl From<ServiceError> for RestError {
    fn from(e: ServiceError) -> Self {
        let status = match e.code() {
            ErrorCode::InvalidArgument | ErrorCode::ReleaseNotFound => StatusCode::BAD_REQUEST,
            ErrorCode::SandboxNotFound
            | ErrorCode::TemplateNotFound
            | ErrorCode::NotFound
            | ErrorCode::OperationNotFound => StatusCode::NOT_FOUND,
            ErrorCode::InvalidState | ErrorCode::FailedPrecondition => StatusCode::CONFLICT,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::NotImplemented => StatusCode::NOT_IMPLEMENTED,
            // `feature_disabled` is a 403, `checkpoint_not_found` a 404, and so on.
            other => StatusCode::from_u16(other.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %e, "e2b request failed");
        }
        let retry_after_s = match &e {
            ServiceError::QuotaExceeded { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        };
        RestError {
            retry_after_s,
            ..RestError::new(status, e.public_message())
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        let headers = resp.headers_mut();
        match retry_advice(self.status, self.retry_after_s) {
            Some(after) => {
                headers.insert("should-retry", HeaderValue::from_static("true"));
                headers.insert(header::RETRY_AFTER, HeaderValue::from(after));
            }
            None => {
                headers.insert("should-retry", HeaderValue::from_static("false"));
            }
        }
        resp
    }
}

/// E2B's server-directed retries (`Should-Retry`, `Retry-After`): a quota refusal (`429`) and a
/// sandbox or node that is busy or briefly unreachable (`502`, `503`) are worth retrying after
/// `Retry-After` seconds (the quota's own wait, else 1 s); every other error is not (`Should-Retry:
/// false`), including `504`: the operation that timed out may still finish, and a retried create
/// without an `Idempotency-Key` would make a second sandbox.
pub(crate) fn retry_advice(status: StatusCode, retry_after_s: Option<u64>) -> Option<u64> {
    match status {
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE => Some(retry_after_s.unwrap_or(1).clamp(1, 60)),
        _ => None,
    }
}

/// A Connect error code (wire names as in the Connect protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectCode {
    /// `canceled`
    Canceled,
    /// `invalid_argument`
    InvalidArgument,
    /// `deadline_exceeded`
    DeadlineExceeded,
    /// `not_found`
    NotFound,
    /// `already_exists`
    AlreadyExists,
    /// `permission_denied`
    PermissionDenied,
    /// `resource_exhausted`
    ResourceExhausted,
    /// `failed_precondition`
    FailedPrecondition,
    /// `unimplemented`
    Unimplemented,
    /// `internal`
    Internal,
    /// `unavailable`
    Unavailable,
    /// `unauthenticated`
    Unauthenticated,
}

impl ConnectCode {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        use ConnectCode::*;
        match self {
            Canceled => "canceled",
            InvalidArgument => "invalid_argument",
            DeadlineExceeded => "deadline_exceeded",
            NotFound => "not_found",
            AlreadyExists => "already_exists",
            PermissionDenied => "permission_denied",
            ResourceExhausted => "resource_exhausted",
            FailedPrecondition => "failed_precondition",
            Unimplemented => "unimplemented",
            Internal => "internal",
            Unavailable => "unavailable",
            Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code.
    pub fn status(self) -> StatusCode {
        use ConnectCode::*;
        match self {
            InvalidArgument | FailedPrecondition => StatusCode::BAD_REQUEST,
            Unauthenticated => StatusCode::UNAUTHORIZED,
            PermissionDenied => StatusCode::FORBIDDEN,
            NotFound => StatusCode::NOT_FOUND,
            AlreadyExists => StatusCode::CONFLICT,
            ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Canceled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        }
    }
}

/// An error of an envd RPC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ConnectError {
    /// Its code.
    pub code: ConnectCode,
    /// Its message (the SDK shows it).
    pub message: String,
}

impl ConnectError {
    /// An error with `code` and `message`.
    pub fn new(code: ConnectCode, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// The body of the error, as in a unary answer or an end-of-stream frame's `error`.
    pub fn body(&self) -> ConnectErrorBody<'_> {
        ConnectErrorBody {
            code: self.code.as_str(),
            message: &self.message,
        }
    }
}

impl From<ServiceError> for ConnectError {
    fn from(e: ServiceError) -> Self {
        use ConnectCode as C;
        let code = match e.code() {
            ErrorCode::InvalidArgument => C::InvalidArgument,
            ErrorCode::CommandNotFound | ErrorCode::FileNotFound | ErrorCode::NotFound => {
                C::NotFound
            }
            ErrorCode::SandboxNotFound | ErrorCode::SandboxNotRunning | ErrorCode::Unavailable => {
                C::Unavailable
            }
            ErrorCode::AlreadyExists => C::AlreadyExists,
            ErrorCode::PermissionDenied => C::PermissionDenied,
            ErrorCode::NoSpace | ErrorCode::PayloadTooLarge => C::ResourceExhausted,
            ErrorCode::FailedPrecondition | ErrorCode::InvalidState => C::FailedPrecondition,
            ErrorCode::NotImplemented => C::Unimplemented,
            ErrorCode::Unauthorized => C::Unauthenticated,
            ErrorCode::Cancelled => C::Canceled,
            _ => C::Internal,
        };
        if code == C::Internal {
            tracing::error!(error = %e, "envd request failed");
        }
        let message = match &e {
            ServiceError::Invalid(i) => i.message.clone(),
            other => other.public_message(),
        };
        ConnectError::new(code, message)
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        (self.code.status(), axum::Json(self.body())).into_response()
    }
}

/// An error of envd's plain HTTP routes (`/files`, `/health`): `{"code": <status>, "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct EnvdHttpError {
    /// HTTP status.
    pub status: StatusCode,
    /// Message.
    pub message: String,
}

impl EnvdHttpError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        EnvdHttpError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for EnvdHttpError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.status.as_u16(),
            message: self.message,
        };
        (self.status, axum::Json(body)).into_response()
    }
}

/// The proxy's `502` for envd traffic to a sandbox that is not running (killed, expired,
/// unknown or paused): the SDK matches "was not found" in it.
pub fn sandbox_not_found(e2b_id: &str) -> Response {
    proxy_502(&ProxyError {
        sandbox_id: e2b_id,
        message: "The sandbox was not found",
        port: None,
        code: 502,
    })
}

/// The proxy's `502` for a port of a running sandbox where nothing answers.
pub fn port_not_open(e2b_id: &str, port: u16) -> Response {
    proxy_502(&ProxyError {
        sandbox_id: e2b_id,
        message: "The sandbox is running but port is not open",
        port: Some(port),
        code: 502,
    })
}

fn proxy_502(body: &ProxyError<'_>) -> Response {
    let body = serde_json::to_string(body).unwrap_or_default();
    let mut resp = (StatusCode::BAD_GATEWAY, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_answers_ask_for_a_retry_and_others_do_not() {
        let resp = RestError::new(StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
        assert_eq!(resp.headers()["should-retry"], "true");
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let quota = RestError {
            retry_after_s: Some(30),
            ..RestError::new(StatusCode::TOO_MANY_REQUESTS, "quota")
        };
        assert_eq!(quota.into_response().headers()[header::RETRY_AFTER], "30");
        for status in [
            StatusCode::GATEWAY_TIMEOUT,
            StatusCode::CONFLICT,
            StatusCode::INTERNAL_SERVER_ERROR,
        ] {
            let resp = RestError::new(status, "no").into_response();
            assert_eq!(resp.headers()["should-retry"], "false", "{status}");
            assert!(resp.headers().get(header::RETRY_AFTER).is_none());
        }
    }
}
