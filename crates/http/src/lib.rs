//! Cove's REST API over HTTP: the management API (`/v1`, bearer token), the data plane
//! (`/v1/attach`, attachment token) and the proxy listener of sandbox ports, each served on its
//! own listener, with the API's OpenAPI document ([`openapi`]).
//!
//! This crate frames requests and answers only: every handler extracts its input, calls one
//! service of [`cove_control_plane::ControlPlane`] through its public API, and renders the
//! result. A [`cove_control_plane::ServiceError`] becomes an HTTP answer in one place
//! (`render.rs`: status, JSON error body, `Retry-After`). The E2B surface (`cove-e2b-compat`)
//! sits beside it over the same services and borrows its port proxy framing ([`serve_port`]).

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use cove_api_types::ErrorCode;
use cove_control_plane::orgs::{audit, scope};
use cove_control_plane::{ControlPlane, ServiceError};

use render::ApiError;

mod checkpoints;
mod commands;
mod context;
mod data_plane;
mod events;
mod expiry;
mod extract;
mod files;
mod files_query;
mod files_upload;
mod lifecycle;
mod nodes;
pub mod openapi;
mod operations;
mod orgs;
mod pools;
mod ports;
mod pty;
mod render;
mod sandboxes;
mod templates;
mod volumes;

pub(crate) use context::current_request_id;
pub use context::MAX_HEADER_BYTES;
pub use extract::parse_wait;
pub use ports::{serve_port, PortSurface};

/// The management API router.
pub fn management_router(cp: ControlPlane) -> Router {
    management_router_with(cp, Router::new())
}

/// The management API router with `extra` routes of other surfaces merged in (the MCP server
/// at `/mcp`, the web console at `/console`): they share the API's per-request layers (request
/// id, trace span, header bound, caught panics) and its JSON `404`/`405` fallbacks, and do their
/// own authorisation. `extra` must not set a fallback, nor repeat a route of the API.
pub fn management_router_with(cp: ControlPlane, extra: Router) -> Router {
    let v1 = Router::new()
        .route(
            "/v1/templates",
            get(templates::list).post(templates::create),
        )
        .route(
            "/v1/templates/{name}",
            get(templates::get_one).delete(templates::delete),
        )
        .route("/v1/templates/{name}/releases", post(templates::build))
        .route(
            "/v1/templates/{name}/releases/{number}",
            axum::routing::delete(templates::delete_release),
        )
        .route(
            "/v1/sandboxes",
            post(sandboxes::create).get(sandboxes::list),
        )
        .route(
            "/v1/sandboxes/{id}",
            get(sandboxes::get_one).delete(sandboxes::delete),
        )
        .route("/v1/sandboxes/{id}/metrics", get(sandboxes::metrics))
        .route(
            "/v1/sandboxes/{id}/expiry",
            axum::routing::put(expiry::set).delete(expiry::clear),
        )
        .route(
            "/v1/sandboxes/{id}/network",
            get(sandboxes::network).put(sandboxes::set_network),
        )
        .route(
            "/v1/sandboxes/{id}/ports",
            get(ports::access).put(ports::set_access),
        )
        .route("/v1/sandboxes/{id}/ports:link", post(ports::create_link))
        .route(
            "/v1/sandboxes/{id}/commands",
            post(commands::create).get(commands::list),
        )
        .route(
            "/v1/sandboxes/{id}/commands/{cid}",
            get(commands::get_one).delete(commands::forget),
        )
        .route(
            "/v1/sandboxes/{id}/commands/{cid}/output",
            get(commands::output),
        )
        .route(
            "/v1/sandboxes/{id}/commands/{cid}/signal",
            post(commands::signal),
        )
        .route(
            "/v1/sandboxes/{id}/commands/{cid}/kill",
            post(commands::kill),
        )
        .route(
            "/v1/sandboxes/{id}/commands/{cid}/attachment",
            post(commands::attachment),
        )
        .merge(files::routes())
        .route(
            "/v1/sandboxes/{id}/checkpoints",
            post(checkpoints::create).get(checkpoints::list_of_sandbox),
        )
        .route("/v1/sandboxes/{id}/rollback", post(checkpoints::rollback))
        .route("/v1/sandboxes/{id}/fork", post(checkpoints::fork))
        .route("/v1/checkpoints", get(checkpoints::list))
        .route(
            "/v1/checkpoints/import",
            post(checkpoints::import).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/v1/checkpoints/{cid}/archive", get(checkpoints::archive))
        .route(
            "/v1/checkpoints/{cid}",
            get(checkpoints::get_one).delete(checkpoints::delete),
        )
        .route("/v1/sandboxes/{id}/pause", post(lifecycle::pause))
        .route("/v1/sandboxes/{id}/resume", post(lifecycle::resume))
        .route("/v1/sandboxes/{id}/suspend", post(lifecycle::suspend))
        .route("/v1/sandboxes/{id}/wake", post(lifecycle::wake))
        .route("/v1/pools", get(pools::list))
        .route(
            "/v1/pools/{name}",
            put(pools::put).get(pools::get_one).delete(pools::delete),
        )
        .route("/v1/nodes", get(nodes::list))
        .route("/v1/nodes/{name}/drain", post(nodes::drain))
        .route("/v1/nodes/{name}/ready", post(nodes::ready))
        .route("/v1/capabilities", get(lifecycle::capabilities))
        .route("/v1/events", get(events::stream))
        .route("/v1/operations", get(operations::list))
        .route("/v1/operations/{id}", get(operations::get_one))
        .route("/v1/operations/{id}/cancel", post(operations::cancel))
        .route("/v1/operations/{id}/logs", get(operations::logs))
        .route("/v1/orgs", post(orgs::create).get(orgs::list))
        .route("/v1/orgs/{org}", get(orgs::get_one).patch(orgs::update))
        .route("/v1/orgs/{org}/quotas", put(orgs::set_quotas))
        .route(
            "/v1/orgs/{org}/keys",
            post(orgs::create_key).get(orgs::list_keys),
        )
        .route(
            "/v1/orgs/{org}/keys/{key}",
            axum::routing::delete(orgs::revoke_key),
        )
        .route("/v1/audit", get(orgs::audit))
        .merge(volumes::routes())
        .route_layer(middleware::from_fn_with_state(cp.clone(), require_token));
    // Sandbox ports authorise on their own (admin token or the sandbox's port token).
    let ports = Router::new()
        .route("/v1/sandboxes/{id}/ports/{port}", any(ports::proxy))
        .route("/v1/sandboxes/{id}/ports/{port}/", any(ports::proxy))
        .route("/v1/sandboxes/{id}/ports/{port}/{*path}", any(ports::proxy));
    let api: Router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi::openapi_json))
        .merge(v1)
        .merge(ports)
        .with_state(cp);
    let router = api
        .merge(extra)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    context::layers(router, "api")
}

/// The data-plane router: command output (SSE) and stdin, authorised per command.
pub fn data_plane_router(cp: ControlPlane) -> Router {
    // Every route checks the command's attachment token first; the rest reaches that
    // command's sandbox only, and runs as the server (`orgs::scope`).
    let router = Router::new()
        .route("/v1/attach/{cid}", get(data_plane::attach))
        .route("/v1/attach/{cid}/stdin", post(data_plane::stdin_write))
        .route("/v1/attach/{cid}/pty", get(pty::session))
        .route(
            "/v1/attach/{cid}/stdin:close",
            post(data_plane::stdin_close),
        )
        .route_layer(middleware::from_fn(as_system))
        .route("/healthz", get(|| async { "ok" }))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(cp);
    context::layers(router, "data")
}

/// Serves a request of a surface that authorises with a token of its own as the server.
async fn as_system(req: Request, next: Next) -> Response {
    scope::as_system(next.run(req)).await
}

/// The proxy listener's router (`cove server --proxy-listen`): every request goes to the sandbox
/// port its host names, `{port}-{sandbox id}.{domain}` (see [`cove_control_plane::ports`]);
/// any other host is `404 not_found`.
pub fn ports_router(cp: ControlPlane) -> Router {
    context::layers(
        Router::new().fallback(ports::by_host).with_state(cp),
        "proxy",
    )
}

/// `GET /metrics`: the Prometheus text format, without authentication (like `/healthz`).
async fn metrics(State(cp): State<ControlPlane>) -> Response {
    match cp.render_metrics().await {
        Ok(Some(text)) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Ok(None) => render::error_response(
            StatusCode::NOT_FOUND,
            cove_api_types::ErrorCode::NotFound,
            "metrics are not enabled on this server",
        ),
        Err(e) => ApiError(e).into_response(),
    }
}

async fn not_found() -> Response {
    render::error_response(
        StatusCode::NOT_FOUND,
        cove_api_types::ErrorCode::NotFound,
        "no such route",
    )
}

async fn method_not_allowed() -> Response {
    render::error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        cove_api_types::ErrorCode::MethodNotAllowed,
        "method not allowed on this route",
    )
}

/// Bearer token from an `Authorization` header.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let v = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Authenticates the bearer token and serves the request as its caller (see
/// [`cove_control_plane::orgs::scope`]); a request that may change something is then recorded
/// in the audit log with the resource its route names (the last path parameter).
async fn require_token(
    State(cp): State<ControlPlane>,
    matched: Option<MatchedPath>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer(req.headers()) else {
        return ApiError(ServiceError::Unauthorized("missing bearer token".into())).into_response();
    };
    let caller = match cp.authenticate(token).await {
        Ok(c) => c,
        Err(e) => return ApiError(e).into_response(),
    };
    if !audit::audited(req.method().as_str()) {
        return scope::scoped(caller, next.run(req)).await;
    }
    let action = format!(
        "{} {}",
        req.method(),
        matched.as_ref().map_or(req.uri().path(), |m| m.as_str())
    );
    let resource = params
        .ok()
        .and_then(|p| p.iter().last().map(|(_, v)| v.to_string()));
    let request_id = req
        .headers()
        .get(cove_api_types::REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let resp = scope::scoped(caller.clone(), next.run(req)).await;
    let status = resp.status().as_u16();
    cp.record_audit(audit::AuditRecord {
        caller,
        action,
        resource,
        status,
        outcome: audit::outcome(status, resp.extensions().get::<ErrorCode>().copied()),
        request_id,
    })
    .await;
    resp
}
