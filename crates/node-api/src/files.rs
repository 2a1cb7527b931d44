//! Files in a sandbox. Paths are the sandbox's, as raw bytes; the guest agent resolves them
//! inside the sandbox's own root (relative ones against `user`'s home).

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::{
    ByteStream, FileEvent, FileInfo, NodeError, SandboxPath, SetXattrsRequest, WatchRequest,
    WriteFileRequest, XattrsRequest,
};

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
        path: SandboxPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError>;

    /// `lstat` of a path (a final symlink is described, not followed).
    async fn stat(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError>;

    /// The entries below a directory, `depth` levels deep (1 = its own entries), in name order
    /// with each directory's contents right after it; symlinks are listed, never descended.
    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, NodeError>;

    /// `mkdir -p`: creates a directory and its missing parents, owned by `user`.
    async fn make_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError>;

    /// Removes a file, a symlink (never its target) or a directory tree.
    async fn remove(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<(), NodeError>;

    /// Renames `from` to `to`; returns the destination's metadata.
    async fn rename(
        &self,
        sandbox_id: &str,
        from: SandboxPath,
        to: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError>;

    /// Replaces the extended attributes of `req.path` under `req.namespace` with
    /// `req.entries`, as `req.user` (the kernel's rights for `setxattr` apply).
    ///
    /// Errors: `FileNotFound`; `PermissionDenied`; `InvalidArgument` (a namespace outside
    /// `user.`, an empty or over-long key, more than 8 KiB of keys and values);
    /// `FailedPrecondition` (a symlink, a filesystem without extended attributes); `NoSpace`;
    /// `Unsupported` (an agent or node that predates extended attributes).
    async fn set_xattrs(&self, sandbox_id: &str, req: SetXattrsRequest) -> Result<(), NodeError>;

    /// The extended attributes under `req.namespace` of each of `req.paths`, in order, keys
    /// without the namespace (at most 8 KiB per path). A path that is gone, unreadable or a
    /// symlink has none. Errors: `InvalidArgument` (the namespace, an unknown user),
    /// `Unsupported` (an agent or node that predates extended attributes).
    async fn xattrs(
        &self,
        sandbox_id: &str,
        req: XattrsRequest,
    ) -> Result<Vec<BTreeMap<String, Vec<u8>>>, NodeError>;

    /// Watches a directory. Returns once the watch is in place; the stream yields batches of
    /// events until the directory is gone or the watch fails (the last item). Dropping the
    /// stream stops the watch in the guest.
    async fn watch(
        &self,
        sandbox_id: &str,
        req: WatchRequest,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, NodeError>>, NodeError>;
}
