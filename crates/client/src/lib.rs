//! Typed Rust client of the Cove REST API (v1) and its data plane.
//!
//! ```no_run
//! # async fn demo() -> cove_client::Result<()> {
//! use std::time::Duration;
//! use cove_client::{types::*, AttachEvent, Client};
//! use futures::StreamExt;
//!
//! let client = Client::new("http://127.0.0.1:7700", "TOKEN")?;
//! let created = client.create_sandbox(&CreateSandboxRequest::default(), None).await?;
//! client.wait_operation(&created.operation.id, Duration::from_secs(600)).await?;
//! let cmd = client
//!     .create_command(
//!         &created.sandbox.id,
//!         &CreateCommandRequest { shell: Some("echo hi".into()), ..Default::default() },
//!     )
//!     .await?;
//! let mut events = std::pin::pin!(client.attach(&cmd.attachment, 0));
//! while let Some(event) = events.next().await {
//!     if let AttachEvent::Exit(command) = event? {
//!         println!("exit code {:?}", command.exit_code);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Modules, one per resource:
//! - [`sandboxes`]: create, get, list, delete.
//! - [`commands`]: start, get (long-poll), list, signal, kill, new attachment.
//! - [`attach`]: the data plane: output as a resumable stream of events, stdin.
//! - [`pty`]: the data plane's WebSocket to a command on a pseudo-terminal.
//! - [`files`]: streamed upload and download, multi-file upload, list, stat, exists, mkdir,
//!   move, remove, watch.
//! - [`templates`]: list, get, build a release.
//! - [`operations`]: get, wait until final, follow a build's log, cancel, list.
//! - [`lifecycle`]: pause, resume, suspend, wake a sandbox; runtime capabilities.
//! - [`events`]: the lifecycle event stream.
//! - [`volumes`]: persistent volumes: create, list, get, delete; their files without a
//!   sandbox.
//! - [`error`]: [`ClientError`], API errors apart from transport errors.

pub mod attach;
pub mod checkpoints;
pub mod commands;
pub mod error;
pub mod events;
pub mod files;
pub mod lifecycle;
pub mod nodes;
pub mod operations;
pub mod orgs;
pub mod pools;
pub mod pty;
pub mod sandboxes;
mod sse;
pub mod templates;
pub mod volumes;

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, Url};
use serde::de::DeserializeOwned;

pub use attach::AttachEvent;
pub use error::{ClientError, Result};
pub use files::{DownloadOptions, SandboxPath, UploadFile, UploadOptions};
pub use pty::{PtyEvent, PtyReader, PtyWriter};
pub use sandboxes::ListSandboxes;

/// The wire types of the API, re-exported.
pub use cove_api_types as types;
/// A request body, for [`Client::upload`]: from bytes, a `tokio::fs::File`, or a stream
/// (`Body::wrap_stream`).
pub use reqwest::Body;

/// The longest single long-poll the client asks for; longer waits loop.
const MAX_LONG_POLL: Duration = Duration::from_secs(30);
/// How much longer than its long-poll a request may take before the client gives up on it.
const LONG_POLL_SLACK: Duration = Duration::from_secs(30);

/// A client of one Cove server, holding its base URL and a management token.
///
/// Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: String,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:7700`), authenticating with
    /// the management bearer `token`.
    pub fn new(base_url: &str, token: impl Into<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("cove-client/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .tcp_keepalive(Duration::from_secs(30))
            .build()
            .map_err(ClientError::Transport)?;
        Self::with_http_client(http, base_url, token)
    }

    /// Like [`Client::new`], with a caller-built `reqwest::Client` (proxies, timeouts, ...).
    /// Do not give it a total request timeout: long-polls and streams outlive it.
    pub fn with_http_client(
        http: reqwest::Client,
        base_url: &str,
        token: impl Into<String>,
    ) -> Result<Self> {
        let base = parse_http_url(base_url)?;
        Ok(Client {
            http,
            base,
            token: token.into(),
        })
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// `GET /healthz`: succeeds when the server answers `200`.
    pub async fn health(&self) -> Result<()> {
        let url = self.url(&["healthz"]);
        self.send(self.http.get(url)).await.map(drop)
    }

    /// The URL of `segments` under the base URL; each segment is percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// A management request carrying the bearer token.
    fn request(&self, method: Method, url: Url) -> RequestBuilder {
        self.http.request(method, url).bearer_auth(&self.token)
    }

    /// Sends a request and maps an error answer to [`ClientError`].
    async fn send(&self, request: RequestBuilder) -> Result<Response> {
        send(request).await
    }

    /// Sends a request and decodes its JSON answer.
    async fn json<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T> {
        let response = self.send(request).await?;
        decode_json(response).await
    }
}

/// Parses an absolute `http`/`https` URL.
fn parse_http_url(s: &str) -> Result<Url> {
    match Url::parse(s) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(url),
        _ => Err(ClientError::InvalidUrl { url: s.to_owned() }),
    }
}

/// Sends a request; an answer with an error status becomes a [`ClientError`].
async fn send(request: RequestBuilder) -> Result<Response> {
    let response = request.send().await.map_err(ClientError::Transport)?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let url = url_without_query(response.url());
    let body = response.bytes().await.unwrap_or_default();
    Err(error::from_error_answer(status.as_u16(), &url, &body))
}

/// Reads a whole answer and decodes it as JSON.
async fn decode_json<T: DeserializeOwned>(response: Response) -> Result<T> {
    let url = url_without_query(response.url());
    let body = response.bytes().await.map_err(ClientError::Transport)?;
    serde_json::from_slice(&body).map_err(|source| ClientError::Decode { url, source })
}

/// A URL as text without its query (which may carry offsets, never secrets, but is noise).
fn url_without_query(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.to_string()
}

/// The `?wait=` value of a long-poll: whole seconds, rounded up.
fn wait_param(wait: Duration) -> String {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    format!("{secs}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_built_under_the_base() {
        let c = Client::new("http://127.0.0.1:7700", "t").expect("client");
        assert_eq!(
            c.url(&["v1", "sandboxes", "sb-1"]).as_str(),
            "http://127.0.0.1:7700/v1/sandboxes/sb-1"
        );
        let c = Client::new("http://h/prefix/", "t").expect("client");
        assert_eq!(
            c.url(&["v1", "templates", "a b/c"]).as_str(),
            "http://h/prefix/v1/templates/a%20b%2Fc"
        );
    }

    #[test]
    fn bad_base_urls_are_refused() {
        for url in ["", "127.0.0.1:7700", "ftp://h/", "unix:/tmp/x"] {
            assert!(
                matches!(Client::new(url, "t"), Err(ClientError::InvalidUrl { .. })),
                "{url}"
            );
        }
    }

    #[test]
    fn wait_rounds_up_to_seconds() {
        assert_eq!(wait_param(Duration::from_secs(30)), "30s");
        assert_eq!(wait_param(Duration::from_millis(1500)), "2s");
        assert_eq!(wait_param(Duration::ZERO), "0s");
    }
}
