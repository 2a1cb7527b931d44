//! Files, passed through to the sandbox's guest agent (which resolves every path inside the
//! sandbox's own root).

use async_trait::async_trait;
use cove_node_api::{FileEvent, WatchRequest};

use super::*;

#[async_trait]
impl NodeFiles for NodeAgent {
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .write_file(req, body)
            .await
            .map_err(guest_err)
    }

    async fn read_file(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        let g = self.guest(sandbox_id)?;
        let (info, data) = g
            .read_file(path, user, offset, length)
            .await
            .map_err(guest_err)?;
        Ok((info, data.map(|r| r.map_err(guest_err)).boxed()))
    }

    async fn stat(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .stat(path, user)
            .await
            .map_err(guest_err)
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, NodeError> {
        self.guest(sandbox_id)?
            .list_dir(path, user, depth)
            .await
            .map_err(guest_err)
    }

    async fn make_dir(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .make_dir(path, user)
            .await
            .map_err(guest_err)
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: GuestPath,
        user: Option<String>,
    ) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .remove(path, user)
            .await
            .map_err(guest_err)
    }

    async fn rename(
        &self,
        sandbox_id: &str,
        from: GuestPath,
        to: GuestPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .rename(from, to, user)
            .await
            .map_err(guest_err)
    }

    async fn watch(
        &self,
        sandbox_id: &str,
        req: WatchRequest,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, NodeError>>, NodeError> {
        let events = self
            .guest(sandbox_id)?
            .watch(req)
            .await
            .map_err(guest_err)?;
        Ok(events.map(|r| r.map_err(guest_err)).boxed())
    }
}
