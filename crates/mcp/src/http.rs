//! MCP over streamable HTTP: `POST /mcp` (JSON-RPC in, JSON out), for `cove server` to merge
//! into its management listener.
//!
//! Stateless: every request is served on its own (no `Mcp-Session-Id`, so nothing is kept
//! between requests and no session outlives its caller), and every request must carry
//! `Authorization: Bearer <management token>`. The token is checked against the API before the
//! MCP message is read (`401` with the API's JSON error body when it is missing or wrong), and
//! each tool call runs with it, so a caller can do exactly what its token can. `GET` and
//! `DELETE` (the optional server stream and session end of the MCP transport) answer `405`.
//!
//! `Host` is not restricted: the bearer token, which a browser never sends on its own, is what
//! guards the endpoint against DNS rebinding.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use cove_api_types::{ErrorBody, ErrorCode, REQUEST_ID_HEADER};
use cove_client::Client;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::error::ToolFailure;
use crate::CoveMcp;

/// The route of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// Largest MCP request body (bytes): a `write_file` of a few MiB, base64-encoded.
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// What the token check needs.
#[derive(Debug, Clone)]
struct Api {
    http: reqwest::Client,
    base_url: String,
}

/// The `/mcp` route, calling the REST API at `base_url` (the server's own management listener,
/// e.g. `http://127.0.0.1:7700`) with each request's bearer token.
///
/// Errors: building the HTTP client failed (no TLS backend, ...).
pub fn router(base_url: String) -> anyhow::Result<Router> {
    let http = reqwest::Client::builder()
        .user_agent(concat!("cove-mcp/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let mut config = StreamableHttpServerConfig::default().with_legacy_session_mode(false);
    config.json_response = true;
    config.allowed_hosts = Vec::new();
    config.max_request_body_bytes = MAX_REQUEST_BYTES;
    let api = Api {
        http: http.clone(),
        base_url: base_url.clone(),
    };
    let service = StreamableHttpService::new(
        move || Ok(CoveMcp::per_request(http.clone(), base_url.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Ok(Router::new()
        .route_service(MCP_PATH, service)
        .route_layer(middleware::from_fn_with_state(api, require_token)))
}

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Lets a request through only with a token the API accepts.
async fn require_token(State(api): State<Api>, request: Request, next: Next) -> Response {
    let request_id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let Some(token) = bearer(request.headers()) else {
        return refuse(
            ToolFailure::unauthorized("missing bearer token"),
            &request_id,
        );
    };
    let checked = match Client::with_http_client(api.http, &api.base_url, token) {
        Ok(client) => client.capabilities().await.map(drop),
        Err(e) => Err(e),
    };
    match checked {
        Ok(()) => next.run(request).await,
        Err(e) => refuse(ToolFailure::from(e), &request_id),
    }
}

/// The API's JSON error answer for a refused request.
fn refuse(failure: ToolFailure, request_id: &str) -> Response {
    let code = match failure.code {
        // Anything but a wrong token is the server's trouble, not the caller's.
        ErrorCode::Unauthorized | ErrorCode::Forbidden => failure.code,
        _ => ErrorCode::Unavailable,
    };
    let status = StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::UNAUTHORIZED);
    let body = ErrorBody {
        code,
        message: failure.message,
        // This request's id (the token check's own request has another).
        request_id: request_id.to_owned(),
    };
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_found() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert("authorization", "Bearer abc ".parse().expect("header"));
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert("authorization", "Basic abc".parse().expect("header"));
        assert_eq!(bearer(&headers), None);
        headers.insert("authorization", "bearer  ".parse().expect("header"));
        assert_eq!(bearer(&headers), None);
    }
}
