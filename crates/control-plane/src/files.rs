//! Files: streamed upload and download.

use bytes::Bytes;
use cove_api_types::{FileInfo, FileType};
use cove_domain::{validate, InvalidInput};
use cove_node_api::{ByteStream, GuestPath, WriteFileRequest};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::Deserialize;

use crate::error::{from_node, Subject};
use crate::{ControlPlane, ServiceError};

/// Query of `PUT /v1/sandboxes/{id}/files`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFileQuery {
    /// Destination path; relative paths are under the user's home.
    pub path: String,
    /// Owner of the file and of created parents (default: the sandbox's user).
    pub user: Option<String>,
    /// Permission bits as a decimal number (420 = 0o644; default 0o644).
    pub mode: Option<u32>,
}

/// Query of `GET /v1/sandboxes/{id}/files`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileQuery {
    /// Path to read.
    pub path: String,
    /// User whose home resolves a relative path (default: the sandbox's user).
    pub user: Option<String>,
    /// First byte to read.
    pub offset: Option<u64>,
    /// Bytes to read at most.
    pub length: Option<u64>,
}

impl ControlPlane {
    /// Writes a file from a byte stream: the file appears complete or not at all.
    pub async fn write_file(
        &self,
        sandbox_id: &str,
        q: WriteFileQuery,
        body: ByteStream,
    ) -> Result<FileInfo, ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        validate::path("path", q.path.as_bytes())?;
        if let Some(mode) = q.mode {
            if mode > 0o7777 {
                return Err(InvalidInput::new("mode", "must be at most 0o7777 (4095)").into());
            }
        }
        let user = q.user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        let req = WriteFileRequest {
            path: GuestPath(q.path.clone().into_bytes()),
            user: Some(user),
            mode: q.mode,
            max_bytes: None,
        };
        let info = self
            .node()
            .write_file(sandbox_id, req, body)
            .await
            .map_err(|e| from_node(e, sandbox_id, Subject::File, "path"))?;
        Ok(to_api(info))
    }

    /// Reads a file: its metadata and a stream of its bytes.
    pub async fn read_file(
        &self,
        sandbox_id: &str,
        q: ReadFileQuery,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, std::io::Error>>), ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        validate::path("path", q.path.as_bytes())?;
        let user = q.user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        let (info, stream) = self
            .node()
            .read_file(
                sandbox_id,
                GuestPath(q.path.into_bytes()),
                Some(user),
                q.offset.unwrap_or(0),
                q.length,
            )
            .await
            .map_err(|e| from_node(e, sandbox_id, Subject::File, "path"))?;
        let stream = stream.map(|r| r.map_err(std::io::Error::other)).boxed();
        Ok((to_api(info), stream))
    }
}

/// Converts the guest's file metadata to the API's.
pub(crate) fn to_api(i: cove_node_api::FileInfo) -> FileInfo {
    use chrono::TimeZone;
    FileInfo {
        name: String::from_utf8_lossy(&i.name.0).into_owned(),
        path: String::from_utf8_lossy(&i.path.0).into_owned(),
        file_type: match i.file_type {
            cove_node_api::FileType::File => FileType::File,
            cove_node_api::FileType::Dir => FileType::Dir,
            cove_node_api::FileType::Symlink => FileType::Symlink,
            cove_node_api::FileType::Other => FileType::Other,
        },
        size: i.size,
        mode: i.mode,
        owner: i.owner,
        group: i.group,
        mtime: chrono::Utc
            .timestamp_millis_opt(i.mtime_ms)
            .single()
            .unwrap_or_default(),
        symlink_target: i
            .symlink_target
            .map(|t| String::from_utf8_lossy(&t.0).into_owned()),
    }
}
