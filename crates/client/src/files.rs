//! Files: streamed upload and download, multi-file upload, list, stat, exists, mkdir, move,
//! remove, and watching a directory (`/v1/sandboxes/{id}/files...`).
//!
//! Paths are [`SandboxPath`]s: text (`&str`) or raw bytes (`&[u8]`, for names that are not
//! UTF-8; they travel base64-encoded as `path_b64`).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use cove_api_types::{
    ErrorBody, FileEvent, FileExists, FileInfo, FileList, MakeDirRequest, MoveRequest,
    UploadedFiles,
};
use futures::{Stream, StreamExt, TryStreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::{Body, Method};

use crate::{sse, Client, ClientError, Result};

/// A path inside a sandbox: UTF-8 text or raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxPath<'a> {
    /// A UTF-8 path.
    Text(&'a str),
    /// A path as bytes (any bytes but NUL).
    Bytes(&'a [u8]),
}

impl<'a> From<&'a str> for SandboxPath<'a> {
    fn from(s: &'a str) -> Self {
        SandboxPath::Text(s)
    }
}

impl<'a> From<&'a String> for SandboxPath<'a> {
    fn from(s: &'a String) -> Self {
        SandboxPath::Text(s)
    }
}

impl<'a> From<&'a [u8]> for SandboxPath<'a> {
    fn from(b: &'a [u8]) -> Self {
        SandboxPath::Bytes(b)
    }
}

impl<'a> From<&'a Vec<u8>> for SandboxPath<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        SandboxPath::Bytes(b)
    }
}

impl SandboxPath<'_> {
    /// `(text, base64)`: exactly one is set; bytes that are UTF-8 go as text.
    fn split(self) -> (Option<String>, Option<String>) {
        match self {
            SandboxPath::Text(s) => (Some(s.to_owned()), None),
            SandboxPath::Bytes(b) => match std::str::from_utf8(b) {
                Ok(s) => (Some(s.to_owned()), None),
                Err(_) => (None, Some(B64.encode(b))),
            },
        }
    }

    /// The query pair naming this path (`path` or `path_b64`).
    fn query(self) -> (&'static str, String) {
        match self.split() {
            (Some(t), _) => ("path", t),
            (None, Some(b)) => ("path_b64", b),
            (None, None) => ("path", String::new()),
        }
    }

    /// The path as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            SandboxPath::Text(s) => s.as_bytes(),
            SandboxPath::Bytes(b) => b,
        }
    }
}

/// Options of [`Client::upload`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadOptions {
    /// User who owns the written file and created parents (default: the sandbox's).
    pub user: Option<String>,
    /// Permission bits (e.g. `0o644`; default 0644, or the replaced file's mode).
    pub mode: Option<u32>,
}

/// Options of [`Client::download`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownloadOptions {
    /// User whose home resolves a relative path (default: the sandbox's).
    pub user: Option<String>,
    /// First byte to read.
    pub offset: Option<u64>,
    /// Most bytes to read.
    pub length: Option<u64>,
}

/// One file of [`Client::upload_files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadFile {
    /// Destination path as bytes (UTF-8 or not).
    pub path: Vec<u8>,
    /// Permission bits (default 0644, or the replaced file's mode).
    pub mode: Option<u32>,
    /// Content.
    pub data: Bytes,
}

impl Client {
    /// `PUT /v1/sandboxes/{sandbox}/files?path=`: writes `body` to `path` atomically (the file is
    /// complete or absent), creating missing parents. The body is streamed: pass a
    /// `tokio::fs::File` or `Body::wrap_stream(..)` for large files. At most
    /// [`cove_api_types::MAX_UPLOAD_BYTES`].
    pub async fn upload<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
        body: impl Into<Body>,
        options: &UploadOptions,
    ) -> Result<FileInfo> {
        let mut query = vec![path.into().query()];
        if let Some(user) = &options.user {
            query.push(("user", user.clone()));
        }
        if let Some(mode) = options.mode {
            query.push(("mode", mode.to_string()));
        }
        let request = self
            .request(Method::PUT, self.files_url(sandbox, ""))
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
    pub async fn download<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
        options: &DownloadOptions,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + 'static> {
        let mut query = vec![path.into().query()];
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
            .request(Method::GET, self.files_url(sandbox, ""))
            .query(&query);
        let response = self.send(request).await?;
        Ok(response.bytes_stream().map_err(ClientError::Transport))
    }

    /// [`Client::download`] collected into memory.
    pub async fn read_file<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
    ) -> Result<Vec<u8>> {
        let stream = self
            .download(sandbox, path, &DownloadOptions::default())
            .await?;
        stream
            .try_fold(Vec::new(), |mut acc, b| async move {
                acc.extend_from_slice(&b);
                Ok(acc)
            })
            .await
    }

    /// `POST /v1/sandboxes/{sandbox}/files:upload`: several files in one multipart request,
    /// each written atomically, in order. On an error, the files before the failing one are
    /// written; the error names the failing one.
    pub async fn upload_files(
        &self,
        sandbox: &str,
        files: &[UploadFile],
        user: Option<&str>,
    ) -> Result<UploadedFiles> {
        let boundary = format!("cove-{:032x}", rand_u128());
        let body = multipart_body(&boundary, files);
        let mut request = self
            .request(Method::POST, self.files_url(sandbox, ":upload"))
            .header(
                CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        if let Some(user) = user {
            request = request.query(&[("user", user)]);
        }
        self.json(request).await
    }

    /// `GET /v1/sandboxes/{sandbox}/files:list?path=&depth=`: entries below a directory,
    /// `depth` levels deep (1 = its own entries).
    pub async fn list_files<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
        depth: u32,
    ) -> Result<FileList> {
        let request = self
            .request(Method::GET, self.files_url(sandbox, ":list"))
            .query(&[path.into().query(), ("depth", depth.to_string())]);
        self.json(request).await
    }

    /// `GET /v1/sandboxes/{sandbox}/files:stat?path=`: metadata, without following a final
    /// symlink.
    pub async fn stat_file<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
    ) -> Result<FileInfo> {
        let request = self
            .request(Method::GET, self.files_url(sandbox, ":stat"))
            .query(&[path.into().query()]);
        self.json(request).await
    }

    /// `GET /v1/sandboxes/{sandbox}/files:exists?path=`.
    pub async fn file_exists<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
    ) -> Result<bool> {
        let request = self
            .request(Method::GET, self.files_url(sandbox, ":exists"))
            .query(&[path.into().query()]);
        let answer: FileExists = self.json(request).await?;
        Ok(answer.exists)
    }

    /// `POST /v1/sandboxes/{sandbox}/files:mkdir`: `mkdir -p`, owned by `user` (default: the
    /// sandbox's).
    pub async fn make_dir<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
        user: Option<&str>,
    ) -> Result<FileInfo> {
        let (path, path_b64) = path.into().split();
        let body = MakeDirRequest {
            path,
            path_b64,
            user: user.map(str::to_owned),
        };
        let request = self
            .request(Method::POST, self.files_url(sandbox, ":mkdir"))
            .json(&body);
        self.json(request).await
    }

    /// `POST /v1/sandboxes/{sandbox}/files:move`: renames `from` to `to`.
    pub async fn move_file<'a, 'b>(
        &self,
        sandbox: &str,
        from: impl Into<SandboxPath<'a>>,
        to: impl Into<SandboxPath<'b>>,
    ) -> Result<FileInfo> {
        let (from, from_b64) = from.into().split();
        let (to, to_b64) = to.into().split();
        let body = MoveRequest {
            from,
            from_b64,
            to,
            to_b64,
            user: None,
        };
        let request = self
            .request(Method::POST, self.files_url(sandbox, ":move"))
            .json(&body);
        self.json(request).await
    }

    /// `DELETE /v1/sandboxes/{sandbox}/files?path=`: removes a file, a symlink (not its
    /// target) or a directory tree.
    pub async fn remove_file<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
    ) -> Result<()> {
        let request = self
            .request(Method::DELETE, self.files_url(sandbox, ""))
            .query(&[path.into().query()]);
        self.send(request).await.map(drop)
    }

    /// `GET /v1/sandboxes/{sandbox}/files:watch?path=&recursive=`: returns once the directory
    /// is watched (a missing directory is an error here), then yields its changes. The stream
    /// ends when the directory is removed, or with an error item when the watch fails; drop it
    /// to stop watching (the sandbox then frees its watches).
    pub async fn watch_files<'p>(
        &self,
        sandbox: &str,
        path: impl Into<SandboxPath<'p>>,
        recursive: bool,
    ) -> Result<impl Stream<Item = Result<FileEvent>> + Send + 'static> {
        let url = self.files_url(sandbox, ":watch");
        let url_text = url.to_string();
        let request = self
            .request(Method::GET, url)
            .query(&[path.into().query(), ("recursive", recursive.to_string())]);
        let events = sse::open(request).await?;
        let state = (events, url_text, false);
        Ok(futures::stream::unfold(
            state,
            |(mut events, url, done)| async move {
                if done {
                    return None;
                }
                loop {
                    let item = match events.next().await? {
                        Ok(ev) if ev.data.trim().is_empty() => continue,
                        Ok(ev) if ev.event == "error" => {
                            let err = match serde_json::from_str::<ErrorBody>(&ev.data) {
                                Ok(body) => ClientError::Api {
                                    status: body.code.http_status(),
                                    body,
                                },
                                Err(source) => ClientError::Decode {
                                    url: url.clone(),
                                    source,
                                },
                            };
                            return Some((Err(err), (events, url, true)));
                        }
                        Ok(ev) => match serde_json::from_str::<FileEvent>(&ev.data) {
                            Ok(e) => Ok(e),
                            Err(source) => {
                                let err = ClientError::Decode {
                                    url: url.clone(),
                                    source,
                                };
                                return Some((Err(err), (events, url, true)));
                            }
                        },
                        Err(e) => {
                            let err = sse::stream_error(&url, e);
                            return Some((Err(err), (events, url, true)));
                        }
                    };
                    return Some((item, (events, url, false)));
                }
            },
        ))
    }

    /// `/v1/sandboxes/{sandbox}/files{suffix}` (`suffix` = `""`, `":list"`, ...).
    fn files_url(&self, sandbox: &str, suffix: &str) -> reqwest::Url {
        self.url(&["v1", "sandboxes", sandbox, &format!("files{suffix}")])
    }
}

/// A `multipart/form-data` body: for each file a `path` (or `path_b64`) part, an optional
/// `mode` part, and a `file` part.
fn multipart_body(boundary: &str, files: &[UploadFile]) -> Vec<u8> {
    let mut out = Vec::new();
    let part = |out: &mut Vec<u8>, name: &str, extra: &str, data: &[u8]| {
        out.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n\r\n"
            )
            .as_bytes(),
        );
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    };
    for f in files {
        match SandboxPath::Bytes(&f.path).split() {
            (Some(text), _) => part(&mut out, "path", "", text.as_bytes()),
            (None, Some(b64)) => part(&mut out, "path_b64", "", b64.as_bytes()),
            (None, None) => {}
        }
        if let Some(mode) = f.mode {
            part(&mut out, "mode", "", mode.to_string().as_bytes());
        }
        part(
            &mut out,
            "file",
            "; filename=\"file\"\r\nContent-Type: application/octet-stream",
            &f.data,
        );
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    out
}

/// A boundary seed: the standard library's randomly keyed hasher over the clock (not a secret;
/// it only has to be absent from the content).
fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    let a = h.finish();
    h.write_u64(a);
    (u128::from(a) << 64) | u128::from(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_go_as_text_or_base64() {
        assert_eq!(
            SandboxPath::from("/tmp/é").query(),
            ("path", "/tmp/é".to_string())
        );
        assert_eq!(
            SandboxPath::from(&b"/tmp/\xff"[..]).query(),
            ("path_b64", B64.encode(b"/tmp/\xff"))
        );
        assert_eq!(
            SandboxPath::from(&b"/ok"[..]).query(),
            ("path", "/ok".to_string())
        );
    }

    #[test]
    fn multipart_body_names_each_file() {
        let files = [
            UploadFile {
                path: b"/a".to_vec(),
                mode: Some(0o755),
                data: Bytes::from_static(b"x"),
            },
            UploadFile {
                path: b"/\xff".to_vec(),
                mode: None,
                data: Bytes::new(),
            },
        ];
        let body = String::from_utf8(multipart_body("B", &files)).expect("utf8");
        assert!(
            body.starts_with("--B\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n/a\r\n")
        );
        assert!(body.contains("name=\"mode\"\r\n\r\n493\r\n"));
        assert!(body.contains(&format!(
            "name=\"path_b64\"\r\n\r\n{}\r\n",
            B64.encode(b"/\xff")
        )));
        assert!(body.ends_with("--B--\r\n"));
        assert_eq!(body.matches("; name=\"file\";").count(), 2);
    }
}
