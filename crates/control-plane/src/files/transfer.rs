//! Streamed upload (`PUT .../files`) and download (`GET .../files`).

use bytes::Bytes;
use cove_api_types::{FileInfo, MAX_UPLOAD_BYTES};
use cove_domain::validate;
use cove_node_api::{ByteStream, SandboxPath, WriteFileRequest};
use futures::stream::BoxStream;
use futures::StreamExt;
use tracing::info;

use super::{checked, parse_mode, to_api};
use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// How [`ControlPlane::write_file`] writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Permission bits: octal with a leading `0`/`0o` (`0755`) or decimal (`493`); default
    /// 0644, or the replaced file's mode.
    pub mode: Option<String>,
}

/// Which bytes [`ControlPlane::read_file`] reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
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
        path: SandboxPath,
        user: Option<String>,
        options: WriteOptions,
        declared_len: Option<u64>,
        body: ByteStream,
    ) -> Result<FileInfo, ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let WriteOptions { mode } = options;
        let path = checked("path", path)?;
        let mode = mode.as_deref().map(parse_mode).transpose()?;
        let user = user.unwrap_or(sandbox.user);
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
        path: SandboxPath,
        user: Option<String>,
        options: ReadOptions,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, std::io::Error>>), ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let ReadOptions { offset, length } = options;
        let path = checked("path", path)?;
        let user = user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        let (info, stream) = self
            .node()
            .read_file(sandbox_id, path, Some(user), offset.unwrap_or(0), length)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        let stream = stream.map(|r| r.map_err(std::io::Error::other)).boxed();
        Ok((to_api(info), stream))
    }
}
