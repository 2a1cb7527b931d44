//! Which side of the compatibility listener a request is for:
//!
//! 1. An `E2b-Sandbox-Id` header: envd traffic for that sandbox, on the port of
//!    `E2b-Sandbox-Port` (one without the other is `400 Missing header: …`).
//! 2. A `Host` of `{port}-{id}.{domain}` (the configured domain, or any when none is set):
//!    the same, from the host name.
//! 3. `/files` with a `signature` query parameter and neither of the above: a signed URL from
//!    `download_url()`/`upload_url()`; the sandbox is the one whose access token makes the
//!    signature valid.
//! 4. Anything else: the REST control API.
//!
//! envd traffic for a sandbox that is not running answers the proxy's `502` "The sandbox was
//! not found" (a paused one created with `autoResume` is woken first: E2B's auto-resume). A
//! port other than envd's (E2B's `sandbox.get_host(port)`) goes to Cove's port proxy
//! ([`cove_http::serve_port`]) with its rules: a sandbox created through E2B is
//! public unless its create said `network.allowPublicTraffic: false`, and then E2B's
//! `e2b-traffic-access-token` header (the sandbox's port token) lets a request in; nothing
//! listening answers the proxy's `502` "The sandbox is running but port is not open" (with
//! `sandboxId` and `port`, as E2B's proxy words it).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use cove_api_types::SandboxState;
use cove_control_plane::orgs::scope;
use tower::ServiceExt;

use crate::error::{port_not_open, sandbox_not_found, EnvdHttpError};
use crate::{e2b_id, E2b, ENVD_PORT};

/// The sandbox an envd request is for, put in the request's extensions by the dispatcher.
#[derive(Debug, Clone)]
pub struct Target {
    /// Cove sandbox id.
    pub cove_id: String,
    /// E2B sandbox id.
    pub e2b_id: String,
    /// The sandbox's default user (for relative paths and `~`).
    pub default_user: String,
    /// Set when the sandbox was found through a valid `/files` signature.
    pub signed: bool,
}

/// The combined router.
pub fn router(e2b: E2b) -> Router {
    let envd = crate::envd::router(e2b.clone());
    let rest = crate::rest::router(e2b.clone());
    Router::new()
        .fallback(move |State(e2b): State<E2b>, req: Request| {
            let (envd, rest) = (envd.clone(), rest.clone());
            async move { dispatch(e2b, envd, rest, req).await }
        })
        .with_state(e2b)
}

async fn dispatch(e2b: E2b, envd: Router, rest: Router, req: Request) -> Response {
    let sandbox = match sandbox_of(&e2b, req.headers(), req.uri().authority()) {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let (id, port, signed) = match sandbox {
        Some((id, port)) => (id, port, false),
        None if req.uri().path() == "/files" && has_signature(req.uri().query()) => {
            let signed = crate::envd::files::signed_sandbox(&e2b, req.method(), req.uri().query());
            match scope::as_system(signed).await {
                Ok(id) => (id, ENVD_PORT, true),
                Err(e) => return e.into_response(),
            }
        }
        None => return serve(rest, req).await,
    };
    // envd and port traffic authorise with the sandbox's own tokens (envd's access token, a
    // `/files` signature, the port token), not with a caller: once the sandbox is named it
    // runs as the server (`cove_control_plane::orgs::scope`).
    scope::as_system(sandbox_traffic(e2b, envd, id, port, signed, req)).await
}

/// envd traffic, or a request for another port, of sandbox `id` (E2B's id).
async fn sandbox_traffic(
    e2b: E2b,
    envd: Router,
    id: String,
    port: u16,
    signed: bool,
    mut req: Request,
) -> Response {
    let Some(cove_id) = crate::cove_id(&id) else {
        return sandbox_not_found(&id);
    };
    let sandbox = match e2b.cp.get_sandbox(&cove_id).await {
        Ok(s) if s.state == SandboxState::Running => s,
        // A paused sandbox created with `autoResume` wakes for the request.
        Ok(s) => match crate::rest::lifecycle::resume_for_traffic(&e2b, s).await {
            Some(s) => s,
            None => return sandbox_not_found(&id),
        },
        Err(_) => return sandbox_not_found(&id),
    };
    if port != ENVD_PORT {
        return sandbox_port(&e2b, &cove_id, port, req).await;
    }
    if !signed {
        if let Err(resp) = crate::envd::check_access_token(&e2b, &cove_id, &req) {
            return resp;
        }
    }
    req.extensions_mut().insert(Target {
        e2b_id: e2b_id(&cove_id).to_string(),
        cove_id,
        default_user: sandbox.user,
        signed,
    });
    serve(envd, req).await
}

/// E2B traffic header carrying the sandbox's port token (E2B's `trafficAccessToken`).
const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// A request for `port` (not envd's) of a running sandbox: Cove's port proxy, E2B's traffic
/// token taken as the port token.
async fn sandbox_port(e2b: &E2b, cove_id: &str, port: u16, mut req: Request) -> Response {
    let headers = req.headers_mut();
    for name in ["e2b-sandbox-id", "e2b-sandbox-port"] {
        headers.remove(name);
    }
    if let Some(token) = headers.remove(TRAFFIC_TOKEN_HEADER) {
        headers.insert(cove_control_plane::ports::PORT_TOKEN_HEADER, token);
    }
    let path = req.uri().path().to_string();
    let e2b_id = e2b_id(cove_id);
    let resp = cove_http::serve_port(
        &e2b.cp,
        cove_http::PortSurface::Host,
        cove_id,
        port,
        &path,
        req,
    )
    .await;
    // Cove's port proxy answers 502 only when nothing answers on the port (or the sandbox has
    // no network there); the E2B SDKs and their users know the proxy's own wording for it.
    if resp.status() == StatusCode::BAD_GATEWAY {
        return port_not_open(e2b_id, port);
    }
    resp
}

async fn serve(router: Router, req: Request<Body>) -> Response {
    match router.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// The sandbox id and port named by the headers or the host, if any. The host is the `Host`
/// header (HTTP/1.1), else the request's authority (HTTP/2 over TLS sends `:authority`).
#[allow(clippy::result_large_err)]
fn sandbox_of(
    e2b: &E2b,
    headers: &HeaderMap,
    authority: Option<&axum::http::uri::Authority>,
) -> Result<Option<(String, u16)>, Response> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match (get("e2b-sandbox-id"), get("e2b-sandbox-port")) {
        (Some(id), Some(port)) => {
            let port = port.trim().parse::<u16>().map_err(|_| {
                EnvdHttpError::new(StatusCode::BAD_REQUEST, "Invalid header: E2b-Sandbox-Port")
                    .into_response()
            })?;
            return Ok(Some((id.trim().to_string(), port)));
        }
        (Some(_), None) => {
            return Err(EnvdHttpError::new(
                StatusCode::BAD_REQUEST,
                "Missing header: E2b-Sandbox-Port",
            )
            .into_response())
        }
        (None, Some(_)) => {
            return Err(EnvdHttpError::new(
                StatusCode::BAD_REQUEST,
                "Missing header: E2b-Sandbox-Id",
            )
            .into_response())
        }
        (None, None) => {}
    }
    let host = get("host").or(authority.map(|a| a.as_str()));
    Ok(host.and_then(|h| host_target(h, e2b.cfg.domain.as_deref())))
}

/// `name[:port]` → `name`.
fn without_port(host: &str) -> &str {
    host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    })
}

/// `{port}-{id}.{domain}[:listen-port]` → (id, port); the domain's own port, if it has one,
/// is not compared (a client may omit a default port, a proxy may rewrite it).
pub(crate) fn host_target(host: &str, domain: Option<&str>) -> Option<(String, u16)> {
    let host = without_port(host);
    let (label, rest) = host.split_once('.')?;
    if let Some(d) = domain {
        if !rest.eq_ignore_ascii_case(without_port(d).trim_end_matches('.')) {
            return None;
        }
    }
    let (port, id) = label.split_once('-')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return None;
    }
    Some((id.to_string(), port.parse().ok()?))
}

fn has_signature(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("signature=")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_name_port_and_sandbox() {
        assert_eq!(
            host_target("49983-abc123.e2b.test:7703", Some("e2b.test")),
            Some(("abc123".to_string(), 49983))
        );
        assert_eq!(
            host_target("49983-abc123.other.test", Some("e2b.test")),
            None
        );
        assert_eq!(
            host_target("8080-abc.example.org", None),
            Some(("abc".to_string(), 8080))
        );
        assert_eq!(host_target("127.0.0.1:7703", None), None);
        // A domain given with the listener's port routes with or without it in Host.
        for host in ["8080-abc.localhost:7703", "8080-abc.localhost"] {
            assert_eq!(
                host_target(host, Some("localhost:7703")),
                Some(("abc".to_string(), 8080)),
                "{host}"
            );
        }
        assert_eq!(
            host_target("8080-abc.other:7703", Some("localhost:7703")),
            None
        );
        assert_eq!(host_target("api.e2b.test", None), None);
        assert_eq!(host_target("x-abc.e2b.test", None), None);
    }

    #[test]
    fn answered_domains_reach_the_listener() {
        use crate::sandbox_domain;
        assert_eq!(sandbox_domain(None, 7703), "localhost:7703");
        assert_eq!(sandbox_domain(Some("localhost"), 7703), "localhost:7703");
        assert_eq!(sandbox_domain(Some("e2b.localhost"), 9), "e2b.localhost:9");
        assert_eq!(
            sandbox_domain(Some("localhost:8000"), 7703),
            "localhost:8000"
        );
        assert_eq!(
            sandbox_domain(Some("sbx.example.com"), 7703),
            "sbx.example.com"
        );
        assert_eq!(
            sandbox_domain(Some("sbx.example.com:8443"), 7703),
            "sbx.example.com:8443"
        );
    }
}
