//! The [`NodeVolumes`] of a [`RemoteNode`] (protocol v5): unary calls, a file read as a server
//! stream (its `FileInfo`, then its bytes) and a file write as a client stream (the call, then
//! the bytes), as the sandbox files calls do. The path calls of the volume files API (stat,
//! remove, mkdir, owner and mode) are not carried yet: a remote node answers them `Unsupported`. The control plane does not use them on a
//! cluster yet (volumes answer `400 unsupported` there), so they are carried for that step.

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, FileInfo, NodeError, NodeVolumes, VolumeEntry, VolumeEntryAttrs, VolumeUsage,
};
use futures::stream::BoxStream;

use crate::client::{bytes_after_head, next};
use crate::pb::Method;
use crate::wire::decode;
use crate::RemoteNode;

#[async_trait]
impl NodeVolumes for RemoteNode {
    async fn create_volume(&self, id: &str, size_mib: u64) -> Result<(), NodeError> {
        self.call(Method::CreateVolume, (id, size_mib)).await
    }

    async fn delete_volume(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::DeleteVolume, (id,)).await
    }

    async fn volume_usage(&self, id: &str) -> Result<VolumeUsage, NodeError> {
        self.call(Method::VolumeUsage, (id,)).await
    }

    async fn read_volume_file(
        &self,
        id: &str,
        path: String,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        let mut items = self.stream(Method::ReadVolumeFile, (id, path)).await?;
        let head = next(&mut items).await?;
        let info = decode::<Result<FileInfo, NodeError>>(&head.result)??;
        Ok((info, bytes_after_head(items)))
    }

    async fn write_volume_file(
        &self,
        id: &str,
        path: String,
        attrs: VolumeEntryAttrs,
        body: ByteStream,
    ) -> Result<VolumeEntry, NodeError> {
        let args = (id, path, attrs);
        self.upload(Method::WriteVolumeFile, args, body, None).await
    }

    async fn list_volume_dir(
        &self,
        id: &str,
        path: String,
        depth: u32,
    ) -> Result<Vec<VolumeEntry>, NodeError> {
        self.call(Method::ListVolumeDir, (id, path, depth)).await
    }
}
