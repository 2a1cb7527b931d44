//! Persistent volumes on this node ([`cove_node_api::NodeVolumes`]): images under
//! `<data-dir>/volumes` ([`VolumeDisks`]), mounted once on the node and bound into the sandboxes
//! that mount them; their files API without a sandbox (`volume_files.rs`, `volume_paths.rs`).

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, FileInfo, LaunchVolume, NodeError, NodeVolumes, VolumeEntry, VolumeEntryAttrs,
    VolumeUsage,
};
use cove_runtime::runc::volume_disks::VolumeDisks;
use cove_runtime::VolumeBind;
use futures::stream::BoxStream;
use futures::StreamExt;

use super::{runtime_err, volume_files, volume_paths, NodeAgent};

impl NodeAgent {
    fn volume_disks(&self) -> Result<&VolumeDisks, NodeError> {
        if !self.runtime.capabilities().volumes {
            return Err(NodeError::Unsupported(format!(
                "volumes are not supported on the {} runtime",
                self.runtime.kind().as_str()
            )));
        }
        Ok(&self.volumes)
    }

    /// Mounts every volume of a launch on the node (unless mounted) and returns the binds the
    /// runtime makes of them. Errors: `FileNotFound` for a volume the node does not have.
    pub(super) async fn volume_binds(
        &self,
        volumes: &[LaunchVolume],
    ) -> Result<Vec<VolumeBind>, NodeError> {
        let mut binds = Vec::with_capacity(volumes.len());
        for v in volumes {
            let source = self.mounted_volume(&v.id).await?;
            binds.push(VolumeBind {
                source,
                target: v.path.clone(),
                read_only: v.read_only,
            });
        }
        Ok(binds)
    }

    /// Mounts volume `id` unless it is; its mount point.
    async fn mounted_volume(&self, id: &str) -> Result<std::path::PathBuf, NodeError> {
        let disks = self.volume_disks()?;
        if !disks.exists(id) {
            return Err(NodeError::FileNotFound(format!(
                "volume {id} is not on this node"
            )));
        }
        let disks = self.volumes.clone();
        let id = id.to_string();
        tokio::task::spawn_blocking(move || disks.mount(&id))
            .await
            .map_err(join_err)?
            .map_err(runtime_err)
    }
}

fn join_err(e: tokio::task::JoinError) -> NodeError {
    NodeError::Internal(format!("volume task: {e}"))
}

#[async_trait]
impl NodeVolumes for NodeAgent {
    async fn create_volume(&self, id: &str, size_mib: u64) -> Result<(), NodeError> {
        let disks = self.volume_disks()?;
        if disks.exists(id) {
            return Err(NodeError::AlreadyExists(format!("volume {id} exists")));
        }
        let disks = self.volumes.clone();
        let id_owned = id.to_string();
        tokio::task::spawn_blocking(move || disks.create(&id_owned, size_mib))
            .await
            .map_err(join_err)?
            .map_err(runtime_err)?;
        tracing::info!(volume_id = %id, size_mib, "volume created");
        Ok(())
    }

    async fn delete_volume(&self, id: &str) -> Result<(), NodeError> {
        self.volume_disks()?;
        self.drop_volume(id, None).await?;
        tracing::info!(volume_id = %id, "volume deleted");
        Ok(())
    }

    async fn download_volume(
        &self,
        id: &str,
        size_mib: u64,
        generation: u64,
    ) -> Result<(), NodeError> {
        self.volume_disks()?;
        self.fetch_volume(id, size_mib, generation).await
    }

    async fn upload_volume(&self, id: &str, generation: u64) -> Result<u64, NodeError> {
        self.volume_disks()?;
        self.store_volume(id, generation).await
    }

    async fn release_volume(&self, id: &str, keep: u64) -> Result<(), NodeError> {
        self.volume_disks()?;
        self.drop_volume(id, Some(keep)).await?;
        tracing::info!(volume_id = %id, generation = keep, "volume released");
        Ok(())
    }

    async fn attach_volumes(
        &self,
        sandbox_id: &str,
        volumes: Vec<LaunchVolume>,
    ) -> Result<(), NodeError> {
        if self.runtime.kind() != cove_runtime::RuntimeKind::Runc {
            return Err(NodeError::Unsupported(format!(
                "the {} runtime cannot attach volumes to a running sandbox",
                self.runtime.kind().as_str()
            )));
        }
        let binds = self.volume_binds(&volumes).await?;
        let dir = self.sandbox_dir(sandbox_id);
        match self.runtime.attach_volumes(sandbox_id, &dir, &binds).await {
            Ok(()) => {
                tracing::info!(sandbox_id, volumes = binds.len(), "volumes attached");
                Ok(())
            }
            Err(cove_runtime::RuntimeError::NotFound { id }) => Err(NodeError::SandboxNotFound(id)),
            Err(cove_runtime::RuntimeError::Unavailable(m)) => Err(NodeError::Unsupported(m)),
            // A path the sandbox's tree refuses (a link or a non-directory on the way): the
            // message names the path in the sandbox and why, nothing of the host.
            Err(cove_runtime::RuntimeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::InvalidInput =>
            {
                Err(NodeError::InvalidArgument {
                    field: "volumes".into(),
                    message: source.to_string(),
                })
            }
            Err(e) => Err(runtime_err(e)),
        }
    }

    async fn volume_usage(&self, id: &str) -> Result<VolumeUsage, NodeError> {
        self.mounted_volume(id).await?;
        let disks = self.volumes.clone();
        let id = id.to_string();
        let usage = tokio::task::spawn_blocking(move || disks.usage(&id))
            .await
            .map_err(join_err)?
            .map_err(runtime_err)?;
        Ok(VolumeUsage {
            used_bytes: usage.used_bytes,
            free_bytes: usage.free_bytes,
        })
    }

    async fn read_volume_file(
        &self,
        id: &str,
        path: String,
    ) -> Result<(FileInfo, BoxStream<'static, Result<Bytes, NodeError>>), NodeError> {
        let root = self.mounted_volume(id).await?;
        let (info, file) =
            tokio::task::spawn_blocking(move || volume_files::open_read(&root, &path))
                .await
                .map_err(join_err)??;
        let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file))
            .map(|chunk| chunk.map_err(|e| NodeError::Internal(format!("read volume file: {e}"))))
            .boxed();
        Ok((info, stream))
    }

    async fn write_volume_file(
        &self,
        id: &str,
        path: String,
        attrs: VolumeEntryAttrs,
        body: ByteStream,
    ) -> Result<VolumeEntry, NodeError> {
        let root = self.mounted_volume(id).await?;
        volume_files::write(&root, &path, attrs, body).await
    }

    async fn list_volume_dir(
        &self,
        id: &str,
        path: String,
        depth: u32,
    ) -> Result<Vec<VolumeEntry>, NodeError> {
        let root = self.mounted_volume(id).await?;
        tokio::task::spawn_blocking(move || volume_files::list(&root, &path, depth))
            .await
            .map_err(join_err)?
    }

    async fn stat_volume_path(&self, id: &str, path: String) -> Result<VolumeEntry, NodeError> {
        let root = self.mounted_volume(id).await?;
        tokio::task::spawn_blocking(move || volume_paths::stat(&root, &path))
            .await
            .map_err(join_err)?
    }

    async fn remove_volume_path(&self, id: &str, path: String) -> Result<(), NodeError> {
        let root = self.mounted_volume(id).await?;
        tokio::task::spawn_blocking(move || volume_paths::remove(&root, &path))
            .await
            .map_err(join_err)?
    }

    async fn make_volume_dir(
        &self,
        id: &str,
        path: String,
        parents: bool,
        attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        let root = self.mounted_volume(id).await?;
        tokio::task::spawn_blocking(move || volume_paths::make_dir(&root, &path, parents, attrs))
            .await
            .map_err(join_err)?
    }

    async fn set_volume_attrs(
        &self,
        id: &str,
        path: String,
        attrs: VolumeEntryAttrs,
    ) -> Result<VolumeEntry, NodeError> {
        let root = self.mounted_volume(id).await?;
        tokio::task::spawn_blocking(move || volume_paths::set_attrs(&root, &path, attrs))
            .await
            .map_err(join_err)?
    }
}
