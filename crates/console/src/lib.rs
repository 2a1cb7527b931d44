//! The web console, served at `/console/` by `cove server`.
//!
//! The console is plain JavaScript in `console/src` (repo root) that calls only the public REST
//! API and the data plane, bundled with its npm dependencies (xterm.js) by `npm ci && npm run
//! build` into `console/dist`. That directory is checked in and embedded here at compile time,
//! so `cargo build` needs no npm; `scripts/test-console.sh` rebuilds it and fails when the
//! checked-in bundle is not what the sources give.
//!
//! Routes: `GET /console` (a redirect to `/console/`), `GET /console/` (`index.html`) and
//! `GET /console/{file}` (an asset); an unknown asset is `404 not_found` with the API's error
//! body. No authentication: the assets are public, the console signs in to the API with a token
//! the user types.

use axum::extract::{Path, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use cove_api_types::{ErrorBody, ErrorCode, REQUEST_ID_HEADER};
use include_dir::{include_dir, Dir};

/// The built console (`console/dist`).
static DIST: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../console/dist");

/// Where the console is served.
pub const CONSOLE_PATH: &str = "/console";

/// What the console's pages may load and connect to: its own assets; the API (same origin) and
/// the data plane, which may listen on another port (`connect-src` for the PTY WebSocket);
/// inline styles, which xterm.js sets on the terminal.
const CSP: &str = "default-src 'self'; connect-src 'self' http: https: ws: wss:; \
style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; frame-ancestors 'none'";

/// The console's routes, for `cove server` to merge into its management listener.
pub fn router() -> Router {
    Router::new()
        .route(
            CONSOLE_PATH,
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(|| async { asset("index.html") }))
        .route("/console/{*file}", get(file))
}

async fn file(Path(name): Path<String>, request: Request) -> Response {
    match DIST.get_file(&name) {
        Some(_) => asset(&name),
        None => {
            let request_id = request
                .headers()
                .get(REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = ErrorBody {
                code: ErrorCode::NotFound,
                message: format!("the console has no file {name:?}"),
                request_id,
            };
            (StatusCode::NOT_FOUND, Json(body)).into_response()
        }
    }
}

/// The embedded file `name` (which exists) with its type and the console's headers.
fn asset(name: &str) -> Response {
    let bytes = DIST
        .get_file(name)
        .map(|f| f.contents())
        .unwrap_or_default();
    let kind = match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    };
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Assets change with the binary and have no hashed names: always revalidate.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str) -> Response {
        let request = axum::http::Request::get(path)
            .body(Body::empty())
            .expect("request");
        router().oneshot(request).await.expect("answer")
    }

    #[tokio::test]
    async fn the_console_is_served_with_its_types() {
        let index = get("/console/").await;
        assert_eq!(index.status(), StatusCode::OK);
        assert_eq!(
            index.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert!(index
            .headers()
            .contains_key(header::CONTENT_SECURITY_POLICY));
        let body = index.into_body().collect().await.expect("body").to_bytes();
        assert!(std::str::from_utf8(&body)
            .expect("utf-8")
            .contains("console.js"));
        let script = get("/console/console.js").await;
        assert_eq!(script.status(), StatusCode::OK);
        assert_eq!(
            script.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            get("/console").await.status(),
            StatusCode::PERMANENT_REDIRECT
        );
    }

    #[tokio::test]
    async fn unknown_files_are_api_404s() {
        let missing = get("/console/nope.js").await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let body = missing
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(body["code"], "not_found");
    }
}
