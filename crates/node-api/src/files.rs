//! Files in a sandbox.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::{ByteStream, FileInfo, GuestPath, NodeError, WriteFileRequest};

/// Files in a sandbox.
#[async_trait]
pub trait NodeFiles: Send + Sync + 'static {
    /// Writes a file atomically from a byte stream.
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError>;

    /// Reads a file: its metadata, then its bytes.
    async fn read_file(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError>;
}
