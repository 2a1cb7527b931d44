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
//! not found"; for a port other than envd's, a `502` "port is not open" (Cove does not forward
//! sandbox ports here yet).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use cove_api_types::SandboxState;
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

async fn dispatch(e2b: E2b, envd: Router, rest: Router, mut req: Request) -> Response {
    let sandbox = match sandbox_of(&e2b, req.headers()) {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let (id, port, signed) = match sandbox {
        Some((id, port)) => (id, port, false),
        None if req.uri().path() == "/files" && has_signature(req.uri().query()) => {
            match crate::envd::files::signed_sandbox(&e2b, req.method(), req.uri().query()).await {
                Ok(id) => (id, ENVD_PORT, true),
                Err(e) => return e.into_response(),
            }
        }
        None => return serve(rest, req).await,
    };
    let Some(cove_id) = crate::cove_id(&id) else {
        return sandbox_not_found(&id);
    };
    let sandbox = match e2b.cp.get_sandbox(&cove_id).await {
        Ok(s) if s.state == SandboxState::Running => s,
        _ => return sandbox_not_found(&id),
    };
    if port != ENVD_PORT {
        return port_not_open(&id, port);
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

async fn serve(router: Router, req: Request<Body>) -> Response {
    match router.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// The sandbox id and port named by the headers or the host, if any.
#[allow(clippy::result_large_err)]
fn sandbox_of(e2b: &E2b, headers: &HeaderMap) -> Result<Option<(String, u16)>, Response> {
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
    Ok(get("host").and_then(|h| host_target(h, e2b.cfg.domain.as_deref())))
}

/// `{port}-{id}.{domain}[:listen-port]` → (id, port).
pub(crate) fn host_target(host: &str, domain: Option<&str>) -> Option<(String, u16)> {
    let host = host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    let (label, rest) = host.split_once('.')?;
    if let Some(d) = domain {
        if !rest.eq_ignore_ascii_case(d) {
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
        assert_eq!(host_target("api.e2b.test", None), None);
        assert_eq!(host_target("x-abc.e2b.test", None), None);
    }
}
