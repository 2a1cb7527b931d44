//! Rendering of errors: every failure becomes `{"code", "message", "request_id"}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cove_api_types::{ErrorBody, ErrorCode};
use cove_control_plane::ServiceError;
use tracing::{error, info};

/// An error body with the current request id.
pub(crate) fn error_response(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    let body = ErrorBody {
        code,
        message: message.to_string(),
        request_id: super::current_request_id(),
    };
    let mut resp = (status, Json(body)).into_response();
    // For the audit layer's outcome.
    resp.extensions_mut().insert(code);
    resp
}

/// A service error as the API answers it: the one place a [`ServiceError`] becomes an HTTP
/// answer. Its status is its code's ([`ErrorCode::http_status`]), the body is the JSON error
/// body with the client's message ([`ServiceError::public_message`]; a 5xx's detail goes to the
/// log), and a quota refusal carries `Retry-After`.
#[derive(Debug)]
pub(crate) struct ApiError(pub ServiceError);

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(e)
    }
}

impl From<cove_domain::InvalidInput> for ApiError {
    fn from(e: cove_domain::InvalidInput) -> Self {
        ApiError(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError(e) = self;
        let code = e.code();
        let status =
            StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            error!(code = code.as_str(), detail = %e, "request failed");
        } else {
            info!(code = code.as_str(), "request refused");
        }
        let retry_after = match &e {
            ServiceError::QuotaExceeded { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        };
        let mut resp = error_response(status, code, &e.public_message());
        if let Some(s) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(s));
        }
        resp
    }
}

/// Most of a plain-text rejection kept as the message (1 KiB).
const MAX_REJECTION_TEXT: usize = 1024;

/// Gives every error answer the JSON error body, keeping its status: answers that are not
/// JSON yet come from outside our handlers, such as axum's extractor rejections (multipart
/// without a boundary or with another content type, a WebSocket route asked without an
/// upgrade, a path segment that is not UTF-8). Their text becomes the message; a 5xx text is
/// logged and replaced, since it may name internals.
pub(crate) async fn json_error_body(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error())
        || resp
            .extensions()
            .get::<super::ports::FromSandboxPort>()
            .is_some()
    {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    let message = if status.is_server_error() {
        error!(status = status.as_u16(), detail = %text, "request failed outside a handler");
        "internal error".to_string()
    } else if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_string()
    } else {
        text
    };
    let mut out = error_response(status, code_for_status(status), &message);
    // Keep what the refusal says besides its body (`Allow`, `Sec-WebSocket-Version`, ...).
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// The error code of a refusal known only by its HTTP status.
fn code_for_status(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        405 => ErrorCode::MethodNotAllowed,
        409 => ErrorCode::FailedPrecondition,
        413 => ErrorCode::PayloadTooLarge,
        431 => ErrorCode::HeadersTooLarge,
        501 => ErrorCode::NotImplemented,
        503 => ErrorCode::Unavailable,
        504 => ErrorCode::DeadlineExceeded,
        s if s >= 500 => ErrorCode::Internal,
        _ => ErrorCode::InvalidArgument,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_text_rejections_become_json_error_bodies() {
        let plain = (
            StatusCode::BAD_REQUEST,
            [(header::ALLOW, "GET")],
            "Invalid `boundary` for `multipart/form-data` request",
        )
            .into_response();
        let resp = json_error_body(plain).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[header::ALLOW], "GET");
        let bytes = axum::body::to_bytes(resp.into_body(), 4096)
            .await
            .expect("body");
        let body: ErrorBody = serde_json::from_slice(&bytes).expect("json error body");
        assert_eq!(body.code, ErrorCode::InvalidArgument);
        assert!(body.message.contains("boundary"), "{}", body.message);

        let upgrade = (
            StatusCode::UPGRADE_REQUIRED,
            "Connection header did not include 'upgrade'",
        );
        let resp = json_error_body(upgrade.into_response()).await;
        assert_eq!(resp.status(), StatusCode::UPGRADE_REQUIRED);

        let internal =
            (StatusCode::INTERNAL_SERVER_ERROR, "panicked at src/x.rs:1").into_response();
        let bytes = axum::body::to_bytes(json_error_body(internal).await.into_body(), 4096)
            .await
            .expect("body");
        let body: ErrorBody = serde_json::from_slice(&bytes).expect("json error body");
        assert_eq!(
            (body.code, body.message.as_str()),
            (ErrorCode::Internal, "internal error")
        );

        let ok = json_error_body("fine".into_response()).await;
        assert_eq!(ok.status(), StatusCode::OK);
    }
}
