//! Sandbox ports over HTTP: the access routes of the management API (`GET`/`PUT
//! /v1/sandboxes/{id}/ports`, `POST .../ports:link`), the path proxy
//! (`/v1/sandboxes/{id}/ports/{port}/{path}`) and the proxy listener's router, which routes by
//! host name (`{port}-{id}.{domain}`). Both proxies frame requests with [`serve_port`] (the E2B
//! listener too); who may pass is [`ControlPlane::authorize_port`]'s decision.
//!
//! The path proxy serves a sandbox's bytes on the management API's origin, the console's: it
//! answers them as a sandboxed document ([`PATH_PROXY_CSP`]), drops the response headers that
//! would act on that origin (a service worker's scope, cookies, `Clear-Site-Data`) and refuses
//! service-worker script fetches, so a sandbox page can neither install a worker over the
//! console nor read its storage. Browsers are sent to the proxy listener's host names.
//!
//! A request is HTTP/1.1 with its body streamed both ways. A WebSocket (any `Upgrade`) is passed
//! on with its upgrade headers; when the sandbox answers `101`, the client's upgraded
//! connection and the sandbox's are spliced until either side closes.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cove_api_types::{PortLinkRequest, SetPortsRequest};
use cove_control_plane::ports::{
    passes, PortAccess, PortCredentials, PORT_COOKIE, PORT_LINK_QUERY, PORT_TOKEN_HEADER,
    PORT_TOKEN_QUERY,
};
use cove_control_plane::{ControlPlane, ServiceError};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tracing::debug;

use super::extract::ApiJson;
use crate::render::ApiError;

/// Marks a response that came from a sandbox's port: it keeps its own body whatever its status
/// (the API's JSON error bodies are for Cove's own answers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FromSandboxPort;

/// Which surface a port request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSurface {
    /// `/v1/sandboxes/{id}/ports/{port}/..` on the management API: the admin token is accepted
    /// (and not passed on); `x-forwarded-prefix` tells the application its prefix.
    Path,
    /// `{port}-{id}.{domain}` on the proxy listener or the E2B listener.
    Host,
}

/// `GET /v1/sandboxes/{id}/ports` (admin token).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/ports",
    tag = "sandboxes",
    description = "How to reach the sandbox's ports: any method on `{path}{port}/{rest}` (this API) or on `host` with the port in place of `{port}` (the proxy listener) reaches that port inside the sandbox. Unless `public`, send the port token as header `x-cove-port-token` or query `cove_port_token`, the admin token (path proxy only), or visit a one-time link first (`POST .../ports:link`). Nothing listening answers `502 bad_gateway`. The path proxy is on this API's origin, so it answers every page as a sandboxed document (`Content-Security-Policy: sandbox`, an opaque origin), drops `Service-Worker-Allowed`, `Set-Cookie` and `Clear-Site-Data`, and refuses service-worker script fetches (`403`): a browser should use `host`.",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::SandboxPorts, description = "Its port path, host and token")),
)]
pub(super) async fn access(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.sandbox_ports(&id).await?))
}

/// `PUT /v1/sandboxes/{id}/ports` (admin token).
#[utoipa::path(
    put,
    path = "/v1/sandboxes/{id}/ports",
    tag = "sandboxes",
    description = "Makes the sandbox's ports public (reachable without a credential) or private again; the next request follows it.",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::SetPortsRequest,
    responses((status = 200, body = cove_api_types::SandboxPorts, description = "Its ports now")),
)]
pub(super) async fn set_access(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<SetPortsRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(cp.set_ports_public(&id, req.public).await?))
}

/// `POST /v1/sandboxes/{id}/ports:link` (admin token).
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/ports:link",
    tag = "sandboxes",
    description = "A one-time link to a port on the proxy listener, for a browser: the first visit within 5 minutes sets an HttpOnly cookie for that host (this sandbox and port, 24 h) and redirects to `path`; a second visit is `401 unauthorized`. `501 not_implemented` without a proxy listener.",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = cove_api_types::PortLinkRequest,
    responses((status = 201, body = cove_api_types::PortLink, description = "The link")),
)]
pub(super) async fn create_link(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<PortLinkRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(cp.create_port_link(&id, &req).await?),
    ))
}

/// Any method on `/v1/sandboxes/{id}/ports/{port}` and `.../{port}/{*path}`.
pub(super) async fn proxy(
    State(cp): State<ControlPlane>,
    Path(params): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    let id = params.get("id").cloned().unwrap_or_default();
    let Some(port) = params
        .get("port")
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p > 0)
    else {
        return ApiError::from(cove_domain::InvalidInput::new("port", "must be 1-65535"))
            .into_response();
    };
    // The path as sent (still percent-encoded), after the route's prefix.
    let prefix = format!(
        "/v1/sandboxes/{id}/ports/{}",
        params.get("port").map_or("", |p| p)
    );
    let path = match req.uri().path().strip_prefix(&prefix) {
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ => format!("/{}", params.get("path").cloned().unwrap_or_default()),
    };
    serve_port(&cp, PortSurface::Path, &id, port, &path, req).await
}

/// The proxy listener: every request is for the sandbox port its `Host` names
/// (`{port}-{id}.{domain}`); any other host is `404 not_found`.
pub(super) async fn by_host(State(cp): State<ControlPlane>, req: Request) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default()
        .to_string();
    let target = cp
        .ports_proxy()
        .and_then(|p| p.target(&host).map(|t| (t, p.domain.clone())));
    let Some(((id, port), _)) = target else {
        let domain = cp
            .ports_proxy()
            .map_or_else(|| "localhost".to_string(), |p| p.domain.clone());
        return super::render::error_response(
            StatusCode::NOT_FOUND,
            cove_api_types::ErrorCode::NotFound,
            &format!("not a sandbox port: ask for {{port}}-{{sandbox id}}.{domain}"),
        );
    };
    let path = req.uri().path().to_string();
    serve_port(&cp, PortSurface::Host, &id, port, &path, req).await
}

/// Serves one request for `port` of sandbox `id` arriving through `surface`, `path` being the
/// path to send (the query is the request's own, less Cove's parameters): authorises it, uses
/// a one-time link (cookie + `303`), passes it on (an upgrade included), and answers the
/// sandbox's response or a JSON error (`401`, `404`, `409 sandbox_not_running`, `502
/// bad_gateway` when nothing listens).
pub async fn serve_port(
    cp: &ControlPlane,
    surface: PortSurface,
    id: &str,
    port: u16,
    path: &str,
    req: Request,
) -> Response {
    // A port authorises with its own credentials ([`ControlPlane::authorize_port`], which
    // looks the sandbox up itself): the request runs as the server (`orgs::scope`).
    let served = cove_control_plane::orgs::scope::as_system(async move {
        match forward(cp, surface, id, port, path, req).await {
            Ok(r) => r,
            Err(e) => ApiError(e).into_response(),
        }
    });
    super::context::with_request_id(served).await
}

/// The query without Cove's parameters, and the values of those.
struct Query {
    rest: Vec<String>,
    token: Option<String>,
    link: Option<String>,
}

fn split_query(query: Option<&str>) -> Query {
    let mut q = Query {
        rest: Vec::new(),
        token: None,
        link: None,
    };
    for kv in query.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        if let Some(t) = kv.strip_prefix(&format!("{PORT_TOKEN_QUERY}=")) {
            q.token = Some(t.to_string());
        } else if let Some(t) = kv.strip_prefix(&format!("{PORT_LINK_QUERY}=")) {
            q.link = Some(t.to_string());
        } else {
            q.rest.push(kv.to_string());
        }
    }
    q
}

/// Cove's port cookie, and the `Cookie` header without it (`None` when nothing is left).
fn split_cookies(headers: &HeaderMap) -> (Option<String>, Option<String>) {
    let mut ours = None;
    let mut rest = Vec::new();
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for c in v.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            match c.strip_prefix(&format!("{PORT_COOKIE}=")) {
                Some(value) => ours = Some(value.to_string()),
                None => rest.push(c.to_string()),
            }
        }
    }
    (ours, (!rest.is_empty()).then(|| rest.join("; ")))
}

/// The protocol an upgrade request asks for (`Connection: upgrade` and `Upgrade: x`).
fn upgrade_of(headers: &HeaderMap) -> Option<String> {
    let connection_upgrade = headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    let protocol = headers.get(header::UPGRADE)?.to_str().ok()?;
    connection_upgrade.then(|| protocol.to_string())
}

/// What the path proxy answers with, whatever the sandbox sent: the page is a sandboxed
/// document with an opaque origin (scripts run, but it has no access to the API origin's
/// storage, cookies or service workers, and what it fetches from there is cross-origin).
pub const PATH_PROXY_CSP: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/// Response headers of a sandbox's port that the path proxy drops: they would act on the
/// management API's origin (a service worker's scope, its cookies, its stored data).
const PATH_PROXY_DROPPED: &[&str] = &["service-worker-allowed", "set-cookie", "clear-site-data"];

/// Whether `req` fetches a service worker's script (`Service-Worker: script`, which browsers
/// send with that fetch only).
fn is_service_worker_script(headers: &HeaderMap) -> bool {
    headers
        .get("service-worker")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("script"))
}

async fn forward(
    cp: &ControlPlane,
    surface: PortSurface,
    id: &str,
    port: u16,
    path: &str,
    mut req: Request,
) -> Result<Response, ServiceError> {
    // The path proxy serves sandbox bytes on the management API's origin (the console's): a
    // service worker registered from there would see every later request of the console,
    // the admin token included. Its script is never fetched through it.
    if surface == PortSurface::Path && is_service_worker_script(req.headers()) {
        return Err(ServiceError::Forbidden(
            "a service worker cannot be loaded through the path proxy: use the proxy \
             listener's host name ({port}-{id}.{domain})"
                .into(),
        ));
    }
    let query = split_query(req.uri().query());
    let mut path_and_query = path.to_string();
    if !query.rest.is_empty() {
        path_and_query.push('?');
        path_and_query.push_str(&query.rest.join("&"));
    }
    let (cookie, other_cookies) = split_cookies(req.headers());

    // A one-time link: set the cookie for this host and send the browser on without the ticket.
    if let Some(ticket) = &query.link {
        let value = cp.redeem_port_link(id, port, ticket)?;
        let cookie = format!(
            "{PORT_COOKIE}={value}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax",
            cove_control_plane::ports::COOKIE_TTL.as_secs()
        );
        let mut resp = StatusCode::SEE_OTHER.into_response();
        let headers = resp.headers_mut();
        headers.insert(
            header::SET_COOKIE,
            HeaderValue::from_str(&cookie)
                .map_err(|_| ServiceError::Internal("port cookie header".into()))?,
        );
        headers.insert(
            header::LOCATION,
            HeaderValue::from_str(&path_and_query).map_err(|_| {
                ServiceError::from(cove_domain::InvalidInput::new(
                    "path",
                    "not a valid location",
                ))
            })?,
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return Ok(resp);
    }

    let header_token = req
        .headers()
        .get(PORT_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bearer = match surface {
        PortSurface::Path => super::bearer(req.headers()).map(str::to_string),
        PortSurface::Host => None,
    };
    let creds = PortCredentials {
        bearer: bearer.as_deref(),
        token: header_token.as_deref().or(query.token.as_deref()),
        cookie: cookie.as_deref(),
    };
    let access = cp.authorize_port(id, port, creds).await?;

    let upgrade = upgrade_of(req.headers());
    let mut headers: Vec<(String, Vec<u8>)> = req
        .headers()
        .iter()
        .filter(|(k, _)| passes(k.as_str()) && *k != header::COOKIE)
        .filter(|(k, _)| !(access == PortAccess::Admin && *k == header::AUTHORIZATION))
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    if let Some(c) = other_cookies {
        headers.push(("cookie".into(), c.into_bytes()));
    }
    if let Some(protocol) = &upgrade {
        headers.push(("connection".into(), b"upgrade".to_vec()));
        headers.push(("upgrade".into(), protocol.clone().into_bytes()));
    }
    if surface == PortSurface::Path {
        headers.push((
            "x-forwarded-prefix".into(),
            format!("/v1/sandboxes/{id}/ports/{port}").into_bytes(),
        ));
    }
    let request = cove_node_api::PortRequest {
        port,
        method: req.method().as_str().to_string(),
        path_and_query,
        headers,
    };

    // An upgrade sends the upgraded connection's bytes as the body, once there is one.
    let (body, upgraded_tx, on_upgrade) = match &upgrade {
        Some(_) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(16);
            let on = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>();
            (
                tokio_stream::wrappers::ReceiverStream::new(rx).boxed(),
                Some(tx),
                on,
            )
        }
        None => (
            std::mem::take(req.body_mut())
                .into_data_stream()
                .map(|r| r.map_err(std::io::Error::other))
                .boxed(),
            None,
            None,
        ),
    };
    let (head, body) = cp.forward_port(id, request, body).await?;
    let status = StatusCode::from_u16(head.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let switching = status == StatusCode::SWITCHING_PROTOCOLS;
    let (mut resp, upgraded_body) = if switching {
        (Response::new(Body::empty()), Some(body))
    } else {
        (Response::new(Body::from_stream(body)), None)
    };
    *resp.status_mut() = status;
    for (k, v) in &head.headers {
        if !passes(k) {
            continue;
        }
        if surface == PortSurface::Path
            && PATH_PROXY_DROPPED.contains(&k.to_ascii_lowercase().as_str())
        {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    if surface == PortSurface::Path {
        resp.headers_mut().append(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PATH_PROXY_CSP),
        );
    }
    resp.extensions_mut().insert(FromSandboxPort);
    if !switching {
        return Ok(resp);
    }
    let (Some(protocol), Some(on_upgrade), Some(tx), Some(body)) = (
        head.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("upgrade"))
            .and_then(|(_, v)| String::from_utf8(v.clone()).ok()),
        on_upgrade,
        upgraded_tx,
        upgraded_body,
    ) else {
        return Err(ServiceError::BadGateway(format!(
            "port {port} switched protocols without an upgrade that was asked for"
        )));
    };
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(
        header::UPGRADE,
        HeaderValue::from_str(&protocol)
            .map_err(|_| ServiceError::BadGateway("a bad upgrade header".into()))?,
    );
    let sandbox_id = id.to_string();
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                debug!(sandbox_id = %sandbox_id, port, error = %e, "client upgrade failed");
                return;
            }
        };
        splice(hyper_util::rt::TokioIo::new(upgraded), tx, body).await;
        debug!(sandbox_id = %sandbox_id, port, "upgraded port connection closed");
    });
    Ok(resp)
}

/// Copies the client's upgraded connection into `to_sandbox` and `from_sandbox` into it, until
/// both directions ended.
async fn splice<IO>(
    client: IO,
    to_sandbox: tokio::sync::mpsc::Sender<std::io::Result<bytes::Bytes>>,
    mut from_sandbox: cove_node_api::ByteStream,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut read, mut write) = tokio::io::split(client);
    let upstream = async move {
        let mut reader = tokio_util::io::ReaderStream::new(&mut read);
        while let Some(chunk) = reader.next().await {
            if to_sandbox.send(chunk).await.is_err() {
                break;
            }
        }
    };
    let downstream = async move {
        while let Some(Ok(chunk)) = from_sandbox.next().await {
            if write.write_all(&chunk).await.is_err() || write.flush().await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cove_parameters_leave_the_query() {
        let q = split_query(Some("a=1&cove_port_token=t&b=2&cove_link=l"));
        assert_eq!(q.rest, vec!["a=1", "b=2"]);
        assert_eq!(q.token.as_deref(), Some("t"));
        assert_eq!(q.link.as_deref(), Some("l"));
    }

    #[test]
    fn the_port_cookie_leaves_the_cookies() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; cove_port=123.abc; b=2"),
        );
        let (ours, rest) = split_cookies(&h);
        assert_eq!(ours.as_deref(), Some("123.abc"));
        assert_eq!(rest.as_deref(), Some("a=1; b=2"));
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("cove_port=1.x"));
        assert_eq!(split_cookies(&h).1, None);
    }

    #[test]
    fn service_worker_script_fetches_are_recognised() {
        let mut h = HeaderMap::new();
        assert!(!is_service_worker_script(&h));
        h.insert("service-worker", HeaderValue::from_static("script"));
        assert!(is_service_worker_script(&h));
        assert!(!PATH_PROXY_CSP.contains("allow-same-origin"));
    }

    #[test]
    fn upgrades_need_connection_upgrade() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(upgrade_of(&h), None);
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert_eq!(upgrade_of(&h).as_deref(), Some("websocket"));
    }
}
