//! What every request gets, on both listeners: an id (the client's `x-request-id` when it is
//! sane, else a new `req-…`; tower-http's request-id layers set and echo it), a tracing span
//! carrying it (tower-http's trace layer), a bound on header bytes (`431 headers_too_large`),
//! the id in scope for error bodies, and a panic caught as a `500 internal` JSON body (tower-http's
//! catch-panic layer) instead of a dropped connection.

use std::any::Any;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use cove_api_types::{ErrorCode, REQUEST_ID_HEADER};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use super::render;

/// Largest total size of a request's header names and values (32 KiB); larger is `431
/// headers_too_large`.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// Longest client-chosen request id kept (longer ones are replaced).
const MAX_CLIENT_ID_BYTES: usize = 64;

tokio::task_local! {
    /// Id of the request being served, for error bodies.
    static REQUEST_ID: String;
}

/// The id of the request being served (empty outside a request).
pub(crate) fn current_request_id() -> String {
    REQUEST_ID.try_with(|id| id.clone()).unwrap_or_default()
}

/// Runs `serve` with a request id in scope: the current one, or (outside the per-request
/// layers, as on the E2B listener) a new one, which the response then carries in
/// `x-request-id`.
pub(crate) async fn with_request_id(
    serve: impl std::future::Future<Output = Response>,
) -> Response {
    if REQUEST_ID.try_with(|id| !id.is_empty()).unwrap_or(false) {
        return serve.await;
    }
    let id = cove_domain::ids::new_request_id();
    let mut resp = REQUEST_ID.scope(id.clone(), serve).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// Wraps a router in the per-request layers, outermost first: drop an unusable client id → set
/// an id → trace span → echo the id → header bound and id scope → request metrics (labelled
/// `listener`) → catch panics → routes.
pub(crate) fn layers(router: Router, listener: &'static str) -> Router {
    let header = HeaderName::from_static(REQUEST_ID_HEADER);
    router
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            count_request(listener, req, next)
        }))
        .layer(middleware::from_fn(scope_and_bound))
        .layer(PropagateRequestIdLayer::new(header.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let id = req
                .headers()
                .get(REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!("request", request_id = %id, method = %req.method(),
                path = %req.uri().path())
        }))
        .layer(SetRequestIdLayer::new(header, NewRequestId))
        .layer(middleware::map_request(drop_unusable_id))
}

/// Makes `req-…` ids.
#[derive(Debug, Clone, Copy)]
struct NewRequestId;

impl MakeRequestId for NewRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        cove_domain::ids::new_request_id()
            .parse()
            .ok()
            .map(RequestId::new)
    }
}

/// A client id is kept only when it is 1–64 of `[A-Za-z0-9_-]` (it ends up in logs and bodies).
fn usable_client_id(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_CLIENT_ID_BYTES
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

async fn drop_unusable_id(mut req: Request) -> Request {
    let unusable = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .is_some_and(|v| !v.to_str().is_ok_and(usable_client_id));
    if unusable {
        req.headers_mut().remove(REQUEST_ID_HEADER);
    }
    req
}

/// Records the request in the HTTP series of [`cove_control_plane::metrics`]: its route
/// template (axum's matched path; `unmatched` when no route matched), method, status and time
/// to the response head.
async fn count_request(listener: &'static str, req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let resp = next.run(req).await;
    cove_control_plane::metrics::http_request(
        listener,
        method.as_str(),
        route,
        resp.status().as_u16(),
        started.elapsed(),
    );
    resp
}

async fn scope_and_bound(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    REQUEST_ID
        .scope(id, async move {
            if header_bytes > MAX_HEADER_BYTES {
                // Refused before any handler runs; hyper itself answers 431 past 100 headers.
                let message = format!("request headers are larger than {MAX_HEADER_BYTES} bytes");
                return render::error_response(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    ErrorCode::HeadersTooLarge,
                    &message,
                );
            }
            // Every error answer gets the JSON error body, whoever made it (axum's extractor
            // rejections included); inside the scope, so it carries this request's id.
            render::json_error_body(next.run(req).await).await
        })
        .await
}

/// A handler that panicked: logged, and answered like any internal error.
fn panic_response(payload: Box<dyn Any + Send + 'static>) -> Response {
    let detail = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("non-string panic");
    tracing::error!(detail, "handler panicked");
    render::error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::Internal,
        "internal error; the server log has details under this request id",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    async fn boom() -> &'static str {
        panic!("boom")
    }

    fn app() -> Router {
        layers(
            Router::new()
                .route("/ok", get(|| async { "ok" }))
                .route("/boom", get(boom)),
            "api",
        )
    }

    async fn body_json(resp: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[tokio::test]
    async fn ids_are_kept_made_or_replaced_and_echoed() {
        let resp = app()
            .oneshot(
                Request::get("/ok")
                    .header(REQUEST_ID_HEADER, "my-id_1")
                    .body(Body::empty())
                    .expect("req"),
            )
            .await
            .expect("resp");
        assert_eq!(resp.headers()[REQUEST_ID_HEADER], "my-id_1");
        for bad in [Some("bad id!"), None] {
            let mut req = Request::get("/ok");
            if let Some(v) = bad {
                req = req.header(REQUEST_ID_HEADER, v);
            }
            let resp = app()
                .oneshot(req.body(Body::empty()).expect("req"))
                .await
                .expect("resp");
            let id = resp.headers()[REQUEST_ID_HEADER]
                .to_str()
                .expect("ascii")
                .to_string();
            assert!(id.starts_with("req-"), "{id}");
        }
    }

    #[tokio::test]
    async fn a_panic_is_a_json_500_with_the_request_id() {
        let resp = app()
            .oneshot(
                Request::get("/boom")
                    .header(REQUEST_ID_HEADER, "pan-1")
                    .body(Body::empty())
                    .expect("req"),
            )
            .await
            .expect("resp");
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.headers()[REQUEST_ID_HEADER], "pan-1");
        let body = body_json(resp).await;
        assert_eq!(body["code"], "internal");
        assert_eq!(body["request_id"], "pan-1");
    }

    #[tokio::test]
    async fn oversized_headers_are_431_with_a_body() {
        let big = "x".repeat(MAX_HEADER_BYTES);
        let resp = app()
            .oneshot(
                Request::get("/ok")
                    .header("x-big", big)
                    .body(Body::empty())
                    .expect("req"),
            )
            .await
            .expect("resp");
        assert_eq!(resp.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let id = resp.headers()[REQUEST_ID_HEADER]
            .to_str()
            .expect("ascii")
            .to_string();
        let body = body_json(resp).await;
        assert_eq!(body["code"], "headers_too_large");
        assert_eq!(body["request_id"], id.as_str());
    }
}
