//! How a failed tool call reaches the MCP client: a tool error (`isError: true`), never a
//! JSON-RPC protocol error, so the agent sees why and can act on it.
//!
//! Its text is `CODE: message (request REQUEST_ID)` and its structured content
//! `{"code": CODE, "message": ..., "request_id": ...}`, `CODE` being the API's error code
//! (`sandbox_not_found`, `sandbox_not_running`, `invalid_argument`, ...). Failures that never
//! reached the API get the code that fits best: `unavailable` when the server could not be
//! reached, `deadline_exceeded` when a wait ran out, `internal` for an answer that did not
//! decode; their `request_id` is empty.

use cove_api_types::ErrorCode;
use cove_client::ClientError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

/// Why a tool call failed; rendered once by [`ToolFailure::into_result`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// The API's error code (or the closest one, see the module docs).
    pub code: ErrorCode,
    /// What went wrong.
    pub message: String,
    /// The API request's id, when the API answered (empty otherwise).
    pub request_id: String,
}

impl ToolFailure {
    /// A failure found before calling the API.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolFailure {
            code,
            message: message.into(),
            request_id: String::new(),
        }
    }

    /// An argument of the tool call is invalid (`invalid_argument`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// The call carried no usable token (`unauthorized`).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    /// The MCP tool error result.
    pub fn into_result(self) -> CallToolResult {
        let text = if self.request_id.is_empty() {
            format!("{}: {}", self.code, self.message)
        } else {
            format!(
                "{}: {} (request {})",
                self.code, self.message, self.request_id
            )
        };
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "code": self.code.as_str(),
            "message": self.message,
            "request_id": self.request_id,
        }));
        result
    }
}

impl From<ClientError> for ToolFailure {
    fn from(err: ClientError) -> Self {
        match err {
            ClientError::Api { body, .. } => ToolFailure {
                code: body.code,
                message: body.message,
                request_id: body.request_id,
            },
            ClientError::Status {
                status, snippet, ..
            } => Self::new(
                ErrorCode::Unavailable,
                format!("the server answered http status {status}: {snippet}"),
            ),
            ClientError::Transport(e) => Self::new(
                ErrorCode::Unavailable,
                format!("cannot reach the Cove server: {e}"),
            ),
            ClientError::WaitTimeout {
                operation_id,
                timeout,
            } => Self::new(
                ErrorCode::DeadlineExceeded,
                format!("operation {operation_id} did not finish within {timeout:?}"),
            ),
            ClientError::InvalidUrl { url } => {
                Self::new(ErrorCode::InvalidArgument, format!("invalid url `{url}`"))
            }
            other @ (ClientError::Decode { .. } | ClientError::Stream { .. }) => {
                Self::new(ErrorCode::Internal, other.to_string())
            }
        }
    }
}

/// The result of a tool's body: a success, or a failure rendered as a tool error.
pub type ToolResult = Result<CallToolResult, ToolFailure>;

/// Turns a tool body's result into what the MCP handler answers (failures become tool
/// errors, see the module docs).
pub fn answer(result: ToolResult) -> Result<CallToolResult, rmcp::ErrorData> {
    Ok(result.unwrap_or_else(ToolFailure::into_result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_their_code_and_request_id() {
        let failure = ToolFailure {
            code: ErrorCode::SandboxNotFound,
            message: "no sandbox sb-1".into(),
            request_id: "req-7".into(),
        };
        let result = failure.into_result();
        assert_eq!(result.is_error, Some(true));
        let structured = result.structured_content.expect("structured");
        assert_eq!(structured["code"], "sandbox_not_found");
        assert_eq!(structured["request_id"], "req-7");
        let text = serde_json::to_value(&result.content).expect("json");
        assert_eq!(
            text[0]["text"],
            "sandbox_not_found: no sandbox sb-1 (request req-7)"
        );
    }

    #[test]
    fn local_failures_have_no_request_id() {
        let result = ToolFailure::invalid("path is empty").into_result();
        let text = serde_json::to_value(&result.content).expect("json");
        assert_eq!(text[0]["text"], "invalid_argument: path is empty");
    }
}
