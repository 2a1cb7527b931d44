//! The one error type of the client: an API error answered by the server, or a failure to reach
//! it or to understand its answer.

use std::time::Duration;

use cove_api_types::ErrorBody;

/// Result of every client call.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body (`{code, message, request_id}`).
    #[error("{}: {} (request {})", body.code, body.message, body.request_id)]
    Api {
        /// HTTP status of the answer.
        status: u16,
        /// The decoded error body.
        body: ErrorBody,
    },
    /// The server answered with an error status whose body is not an error body (a proxy, or a
    /// server that is not Cove).
    #[error("http status {status} from {url}: {snippet}")]
    Status {
        /// HTTP status of the answer.
        status: u16,
        /// URL of the request (without its query).
        url: String,
        /// The start of the body, lossily decoded.
        snippet: String,
    },
    /// The request could not be sent or its answer could not be read.
    #[error("http request failed")]
    Transport(#[source] reqwest::Error),
    /// A successful answer did not decode as the expected type.
    #[error("invalid answer from {url}")]
    Decode {
        /// URL of the request (without its query).
        url: String,
        /// What did not decode.
        #[source]
        source: serde_json::Error,
    },
    /// A server-sent event stream carried something that is not valid SSE or an unknown payload.
    #[error("invalid event stream from {url}: {reason}")]
    Stream {
        /// URL of the stream (without its query).
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// A URL given to the client (base URL or attachment URL) is not a usable http(s) URL.
    #[error("invalid url `{url}`")]
    InvalidUrl {
        /// The URL as given.
        url: String,
    },
    /// An operation was not final when the caller's wait ran out.
    #[error("operation {operation_id} did not finish within {timeout:?}")]
    WaitTimeout {
        /// The operation waited for.
        operation_id: String,
        /// How long the caller waited.
        timeout: Duration,
    },
}

impl ClientError {
    /// The error body, when the server answered with one.
    pub fn api_body(&self) -> Option<&ErrorBody> {
        match self {
            ClientError::Api { body, .. } => Some(body),
            _ => None,
        }
    }

    /// The HTTP status, when the server answered at all.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } | ClientError::Status { status, .. } => Some(*status),
            ClientError::Transport(e) => e.status().map(|s| s.as_u16()),
            _ => None,
        }
    }

    /// Whether retrying the same request could succeed: the connection failed or broke, or the
    /// server was unavailable for a moment (5xx). Client errors (4xx) are never retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Transport(_) => true,
            ClientError::Api { status, .. } | ClientError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// Turns an error answer into a [`ClientError`]: its body is an [`ErrorBody`] when it parses as
/// one, and a [`ClientError::Status`] with the start of the body otherwise.
pub(crate) fn from_error_answer(status: u16, url: &str, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(body) => ClientError::Api { status, body },
        Err(_) => {
            const MAX: usize = 512;
            let text = String::from_utf8_lossy(&body[..body.len().min(MAX)]);
            ClientError::Status {
                status,
                url: url.to_owned(),
                snippet: text.trim().to_owned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use cove_api_types::ErrorCode;

    use super::*;

    #[test]
    fn error_body_maps_to_api_error() {
        let body =
            br#"{"code":"sandbox_not_found","message":"no sandbox sb-1","request_id":"req-7"}"#;
        let err = from_error_answer(404, "http://x/v1/sandboxes/sb-1", body);
        match &err {
            ClientError::Api { status, body } => {
                assert_eq!(*status, 404);
                assert_eq!(body.code, ErrorCode::SandboxNotFound);
                assert_eq!(body.request_id, "req-7");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "sandbox_not_found: no sandbox sb-1 (request req-7)"
        );
        assert!(!err.is_retryable());
        assert_eq!(err.status(), Some(404));
    }

    #[test]
    fn other_body_maps_to_status_error() {
        let err = from_error_answer(502, "http://x/v1/sandboxes", b"<html>Bad Gateway</html>\n");
        match &err {
            ClientError::Status {
                status, snippet, ..
            } => {
                assert_eq!(*status, 502);
                assert_eq!(snippet, "<html>Bad Gateway</html>");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.is_retryable());
    }

    #[test]
    fn unknown_code_is_not_an_api_error() {
        let body = br#"{"code":"brand_new_code","message":"m","request_id":"r"}"#;
        let err = from_error_answer(400, "http://x", body);
        assert!(matches!(err, ClientError::Status { status: 400, .. }));
    }

    #[test]
    fn long_bodies_are_cut() {
        let body = vec![b'a'; 10_000];
        let ClientError::Status { snippet, .. } = from_error_answer(500, "u", &body) else {
            panic!("expected a status error");
        };
        assert_eq!(snippet.len(), 512);
    }
}
