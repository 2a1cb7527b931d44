//! The [`NodeVolumes`] of a [`RemoteNode`]: unary calls (create, delete, usage, list since
//! protocol v5; the path calls stat, remove, mkdir, owner and mode since v6; an object volume's
//! download, upload and release since v7; attaching volumes to a running sandbox since v9), a file read as a
//! server stream (its `FileInfo`, then its bytes) and a file write as a client stream (the
//! call, then the bytes), as the sandbox files calls do. The control plane addresses each call
//! to the node that keeps the volume.

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, FileInfo, NodeError, NodeVolumes, VolumeEntry, VolumeEntryAttrs, VolumeUsage,
};
use futures::stream::BoxStream;

use crate::client::{bytes_after_head, next};
use crate::wire::decode;
use crate::Method;
use crate::RemoteNode;

#[async_trait]
impl NodeVolumes for RemoteNode {
    async fn create_volume(&self, id: &str, size_mib: u64) -> Result<(), NodeError> {
        self.call(Method::CreateVolume, (id, size_mib)).await
    }

    async fn delete_volume(&self, id: &str) -> Result<(), NodeError> {
        self.call(Method::DeleteVolume, (id,)).await
    }

    async fn download_volume(
        &self,
        id: &str,
        size_mib: u64,
        generation: u64,
    ) -> Result<(), NodeError> {
        self.call(Method::DownloadVolume, (id, size_mib, generation))
            .await
    }

    async fn upload_volume(&self, id: &str, generation: u64) -> Result<u64, NodeError> {
        self.call(Method::UploadVolume, (id, generation)).await
    }

    async fn release_volume(&self, id: &str, keep: u64) -> Result<(), NodeError> {
        self.call(Method::ReleaseVolume, (id, keep)).await
    }

    async fn attach_volumes(
        &self,
        sandbox_id: &str,
        volumes: Vec<cove_node_api::LaunchVolume>,
    ) -> Result<(), NodeError> {
        self.call(Method::AttachVolumes, (sandbox_id, volumes))
            .await
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

    async fn stat_volume_path(&self, id: &str, path: String) -> Result<VolumeEntry, NodeError> {
        self.call(Method::StatVolumePath, (id, path)).await
    }

    async fn remove_volume_path(&self, id: &str, path: String) -> Result<(), NodeError> {
        self.call(Method::RemoveVolumePath, (id, path)).await
    }

    async fn make_volume_dir(
        &self,
        id: &str,
        path: String,
        parents: bool,
        attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        self.call(Method::MakeVolumeDir, (id, path, parents, attrs))
            .await
    }

    async fn set_volume_attrs(
        &self,
        id: &str,
        path: String,
        attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        self.call(Method::SetVolumeAttrs, (id, path, attrs)).await
    }
}
