//! `/v1/sandboxes/{id}/ports/{port}/{path}`: HTTP to a port of a sandbox, proxied through its
//! node's gateway namespace. Private by default: the admin bearer token, or the sandbox's port
//! token (`x-cove-port-token` header or `cove_port_token` query; `GET /v1/sandboxes/{id}/ports`
//! gives it). With the admin token the `Authorization` header is not passed on; with a port
//! token it is (it belongs to the application). Nothing listening is `502 bad_gateway` (JSON).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cove_api_types::SandboxPorts;
use cove_domain::InvalidInput;
use futures::StreamExt;

use crate::network::{passes, PORT_TOKEN_HEADER, PORT_TOKEN_QUERY};
use crate::{ControlPlane, ServiceError};

/// `GET /v1/sandboxes/{id}/ports` (admin token).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/ports",
    tag = "sandboxes",
    description = "How to reach the sandbox's ports: any method on `{path}{port}/{rest}` is proxied to that port inside the sandbox. Ports are private: send the admin token, or the port token as header `x-cove-port-token` or query `cove_port_token`. Nothing listening answers `502 bad_gateway`.",
    params(("id" = String, Path, description = "Sandbox id")),
    responses((status = 200, body = cove_api_types::SandboxPorts, description = "Its port path and token")),
)]
pub(super) async fn access(
    State(cp): State<ControlPlane>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ServiceError> {
    let token = cp.port_token(&id).await?;
    Ok(Json(SandboxPorts {
        path: format!("/v1/sandboxes/{id}/ports/"),
        sandbox_id: id,
        token,
    }))
}

/// Any method on `/v1/sandboxes/{id}/ports/{port}` and `.../{port}/{*path}`.
pub(super) async fn proxy(
    State(cp): State<ControlPlane>,
    Path(params): Path<HashMap<String, String>>,
    req: Request,
) -> Response {
    match forward(&cp, params, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn forward(
    cp: &ControlPlane,
    params: HashMap<String, String>,
    req: Request,
) -> Result<Response, ServiceError> {
    let id = params.get("id").cloned().unwrap_or_default();
    let port: u16 = params
        .get("port")
        .and_then(|p| p.parse().ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| InvalidInput::new("port", "must be 1-65535"))?;
    let path = params.get("path").cloned().unwrap_or_default();
    let (parts, body) = req.into_parts();

    // The query without the port token.
    let mut query_token = None;
    let query: Vec<String> = parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .filter(
            |kv| match kv.strip_prefix(&format!("{PORT_TOKEN_QUERY}=")) {
                Some(t) => {
                    query_token = Some(t.to_string());
                    false
                }
                None => true,
            },
        )
        .map(str::to_string)
        .collect();
    let header_token = parts
        .headers
        .get(PORT_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let by_admin = match super::bearer(&parts.headers) {
        Some(t) if cp.check_token(t).await.is_ok() => true,
        _ => {
            let token = header_token.or(query_token).ok_or_else(|| {
                ServiceError::Unauthorized(
                    "a sandbox port needs the admin token or its port token".into(),
                )
            })?;
            if !cp.is_port_token(&id, &token) {
                return Err(ServiceError::Unauthorized("invalid port token".into()));
            }
            false
        }
    };

    let mut path_and_query = format!("/{path}");
    if !query.is_empty() {
        path_and_query.push('?');
        path_and_query.push_str(&query.join("&"));
    }
    let mut headers: Vec<(String, Vec<u8>)> = parts
        .headers
        .iter()
        .filter(|(k, _)| passes(k.as_str()))
        .filter(|(k, _)| !(by_admin && *k == axum::http::header::AUTHORIZATION))
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    headers.push((
        "x-forwarded-prefix".into(),
        format!("/v1/sandboxes/{id}/ports/{port}").into_bytes(),
    ));
    let request = cove_node_api::PortRequest {
        port,
        method: parts.method.as_str().to_string(),
        path_and_query,
        headers,
    };
    let body = body
        .into_data_stream()
        .map(|r| r.map_err(std::io::Error::other))
        .boxed();
    let (head, body) = cp.forward_port(&id, request, body).await?;
    let mut resp = Response::new(Body::from_stream(body));
    *resp.status_mut() = StatusCode::from_u16(head.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (k, v) in head.headers {
        if !passes(&k) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(&v),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    Ok(resp)
}
