//! Rendering of errors: every failure becomes `{"code", "message", "request_id"}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cove_api_types::{ErrorBody, ErrorCode};
use tracing::{error, info};

use crate::ServiceError;

/// An error body with the current request id.
pub(crate) fn error_response(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    let body = ErrorBody {
        code,
        message: message.to_string(),
        request_id: super::current_request_id(),
    };
    (status, Json(body)).into_response()
}

impl IntoResponse for ServiceError {
    fn into_response(self) -> Response {
        let code = self.code();
        let status =
            StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            error!(code = code.as_str(), detail = %self, "request failed");
        } else {
            info!(code = code.as_str(), "request refused");
        }
        error_response(status, code, &self.public_message())
    }
}
