//! Files: streamed upload and download, `/v1/sandboxes/{id}/files`.

use bytes::Bytes;
use cove_api_types::FileInfo;
use futures::{Stream, TryStreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::{Body, Method};

use crate::{Client, ClientError, Result};

/// Options of [`Client::upload`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadOptions {
    /// User who owns the written file (default: the sandbox's).
    pub user: Option<String>,
    /// Permission bits of a new file (e.g. `0o644`).
    pub mode: Option<u32>,
}

/// Options of [`Client::download`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownloadOptions {
    /// User whose permissions apply (default: the sandbox's).
    pub user: Option<String>,
    /// First byte to read.
    pub offset: Option<u64>,
    /// Most bytes to read.
    pub length: Option<u64>,
}

impl Client {
    /// `PUT /v1/sandboxes/{sandbox}/files?path=`: writes `body` to `path`, replacing the file.
    /// The body is streamed: pass a `tokio::fs::File` or `Body::wrap_stream(..)` for large
    /// files.
    pub async fn upload(
        &self,
        sandbox: &str,
        path: &str,
        body: impl Into<Body>,
        options: &UploadOptions,
    ) -> Result<FileInfo> {
        let mut query = vec![("path", path.to_owned())];
        if let Some(user) = &options.user {
            query.push(("user", user.clone()));
        }
        if let Some(mode) = options.mode {
            query.push(("mode", mode.to_string()));
        }
        let request = self
            .request(
                Method::PUT,
                self.url(&["v1", "sandboxes", sandbox, "files"]),
            )
            .query(&query)
            .header(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            )
            .body(body);
        self.json(request).await
    }

    /// `GET /v1/sandboxes/{sandbox}/files?path=`: the file's bytes as a stream. Errors found
    /// before the first byte (no such file, ...) are returned here; the stream yields transport
    /// errors only.
    pub async fn download(
        &self,
        sandbox: &str,
        path: &str,
        options: &DownloadOptions,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + 'static> {
        let mut query = vec![("path", path.to_owned())];
        if let Some(user) = &options.user {
            query.push(("user", user.clone()));
        }
        if let Some(offset) = options.offset {
            query.push(("offset", offset.to_string()));
        }
        if let Some(length) = options.length {
            query.push(("length", length.to_string()));
        }
        let request = self
            .request(
                Method::GET,
                self.url(&["v1", "sandboxes", sandbox, "files"]),
            )
            .query(&query);
        let response = self.send(request).await?;
        Ok(response.bytes_stream().map_err(ClientError::Transport))
    }
}
