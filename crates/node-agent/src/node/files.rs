//! Files, passed through to the sandbox's guest agent (which resolves every path inside the
//! sandbox's own root).

use async_trait::async_trait;
use cove_node_api::{FileEvent, WatchRequest};

use super::convert::{self, guest_err, Call};
use super::*;

const PATH: Call<'static> = Call::File("path");

#[async_trait]
impl NodeFiles for NodeAgent {
    async fn write_file(
        &self,
        sandbox_id: &str,
        req: WriteFileRequest,
        body: ByteStream,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .write_file(convert::write(req), body)
            .await
            .map(convert::file)
            .map_err(|e| guest_err(PATH, e))
    }

    async fn read_file(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        let g = self.guest(sandbox_id)?;
        let (info, data) = g
            .read_file(convert::path(path), user, offset, length)
            .await
            .map_err(|e| guest_err(PATH, e))?;
        let data = data.map(|r| r.map_err(|e| guest_err(PATH, e)));
        Ok((convert::file(info), data.boxed()))
    }

    async fn stat(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .stat(convert::path(path), user)
            .await
            .map(convert::file)
            .map_err(|e| guest_err(PATH, e))
    }

    async fn list_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        depth: u32,
    ) -> Result<Vec<FileInfo>, NodeError> {
        self.guest(sandbox_id)?
            .list_dir(convert::path(path), user, depth)
            .await
            .map(|v| v.into_iter().map(convert::file).collect())
            .map_err(|e| guest_err(PATH, e))
    }

    async fn make_dir(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .make_dir(convert::path(path), user)
            .await
            .map(convert::file)
            .map_err(|e| guest_err(PATH, e))
    }

    async fn remove(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .remove(convert::path(path), user)
            .await
            .map_err(|e| guest_err(PATH, e))
    }

    async fn rename(
        &self,
        sandbox_id: &str,
        from: SandboxPath,
        to: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, NodeError> {
        self.guest(sandbox_id)?
            .rename(convert::path(from), convert::path(to), user)
            .await
            .map(convert::file)
            .map_err(|e| guest_err(Call::File("from"), e))
    }

    async fn watch(
        &self,
        sandbox_id: &str,
        req: WatchRequest,
    ) -> Result<BoxStream<'static, Result<Vec<FileEvent>, NodeError>>, NodeError> {
        let events = self
            .guest(sandbox_id)?
            .watch(convert::watch(req))
            .await
            .map_err(|e| guest_err(PATH, e))?;
        let events = events.map(|r| {
            r.map(|batch| batch.into_iter().map(convert::event).collect())
                .map_err(|e| guest_err(PATH, e))
        });
        Ok(events.boxed())
    }
}
