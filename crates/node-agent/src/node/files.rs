//! Files, passed through to the sandbox's guest agent.

use async_trait::async_trait;

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
}
