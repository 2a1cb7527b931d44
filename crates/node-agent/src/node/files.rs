//! Files, passed through to the sandbox's guest agent (which resolves every path inside the
//! sandbox's own root).

use std::collections::BTreeMap;

use async_trait::async_trait;
use cove_node_api::{FileEvent, SetXattrsRequest, WatchRequest, XattrsRequest};

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

    async fn set_xattrs(&self, sandbox_id: &str, req: SetXattrsRequest) -> Result<(), NodeError> {
        self.guest(sandbox_id)?
            .set_xattrs(convert::set_xattrs(req))
            .await
            .map_err(|e| guest_err(PATH, e))
    }

    async fn xattrs(
        &self,
        sandbox_id: &str,
        req: XattrsRequest,
    ) -> Result<Vec<BTreeMap<String, Vec<u8>>>, NodeError> {
        let paths = req.paths.into_iter().map(convert::path).collect();
        let maps = self
            .guest(sandbox_id)?
            .get_xattrs(paths, req.user, req.namespace)
            .await
            .map_err(|e| guest_err(PATH, e))?;
        Ok(maps
            .into_iter()
            .map(|m| m.into_iter().map(|(k, v)| (k, v.0)).collect())
            .collect())
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
