//! Streamed upload (`PUT .../files`) and download (`GET .../files`).

use bytes::Bytes;
use cove_api_types::{FileInfo, MAX_UPLOAD_BYTES};
use cove_domain::validate;
use cove_node_api::{ByteStream, WriteFileRequest};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::Deserialize;
use tracing::info;

use super::{guest_path, parse_mode, to_api};
use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// Query of `PUT /v1/sandboxes/{id}/files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WriteFileQuery {
    /// Destination path (UTF-8); relative paths are under the user's home.
    pub path: Option<String>,
    /// Destination path as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// Owner of the file and of created parents (default: the sandbox's user).
    pub user: Option<String>,
    /// Permission bits: octal with a leading `0`/`0o` (`0755`) or decimal (`493`); default
    /// 0644, or the replaced file's mode.
    pub mode: Option<String>,
}

/// Query of `GET /v1/sandboxes/{id}/files`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReadFileQuery {
    /// Path to read (UTF-8); symlinks are followed inside the sandbox.
    pub path: Option<String>,
    /// Path as base64 bytes (instead of `path`).
    pub path_b64: Option<String>,
    /// User whose home resolves a relative path (default: the sandbox's user).
    pub user: Option<String>,
    /// First byte to read (default 0).
    pub offset: Option<u64>,
    /// Bytes to read at most (default: to the end).
    pub length: Option<u64>,
}

impl ControlPlane {
    /// Writes a file from a byte stream: the file appears complete or not at all (the guest
    /// writes a temporary file next to it and renames it into place). `declared_len` is the
    /// request's `Content-Length`, refused at once beyond [`MAX_UPLOAD_BYTES`]; a body that
    /// grows past it without one is cut off with the same `payload_too_large`.
    pub async fn write_file(
        &self,
        sandbox_id: &str,
        q: WriteFileQuery,
        declared_len: Option<u64>,
        body: ByteStream,
    ) -> Result<FileInfo, ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let path = guest_path("path", q.path, q.path_b64)?;
        let mode = q.mode.as_deref().map(parse_mode).transpose()?;
        let user = q.user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        if let Some(len) = declared_len {
            if len > MAX_UPLOAD_BYTES {
                return Err(ServiceError::TooLarge(format!(
                    "upload of {len} bytes exceeds the maximum of {MAX_UPLOAD_BYTES} bytes"
                )));
            }
        }
        let req = WriteFileRequest {
            path,
            user: Some(user),
            mode,
            max_bytes: Some(MAX_UPLOAD_BYTES),
        };
        let info = self
            .node()
            .write_file(sandbox_id, req, body)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        info!(sandbox_id, bytes = info.size, "file written");
        Ok(to_api(info))
    }

    /// Reads a file: its metadata and a stream of its bytes from `offset` (at most `length`).
    pub async fn read_file(
        &self,
        sandbox_id: &str,
        q: ReadFileQuery,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, std::io::Error>>), ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let path = guest_path("path", q.path, q.path_b64)?;
        let user = q.user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        let (info, stream) = self
            .node()
            .read_file(
                sandbox_id,
                path,
                Some(user),
                q.offset.unwrap_or(0),
                q.length,
            )
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        let stream = stream.map(|r| r.map_err(std::io::Error::other)).boxed();
        Ok((to_api(info), stream))
    }
}
