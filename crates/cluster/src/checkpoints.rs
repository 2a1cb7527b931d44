//! The [`NodeCheckpoints`] of a [`Cluster`]: a checkpoint is taken on the node that holds the
//! sandbox; a restore goes to the node that holds the sandbox (a rollback) or is placed like a
//! create (a fork or a create from a checkpoint; one that mounts volumes on their node only);
//! archives and deletes go to any reachable node,
//! since the snapshot store is shared.

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, CheckpointInfo, ImportedCheckpoint, NodeCheckpoints, NodeError, SandboxLaunch,
    WakeInfo,
};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::Cluster;

#[async_trait]
impl NodeCheckpoints for Cluster {
    async fn checkpoint_sandbox(
        &self,
        id: &str,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<CheckpointInfo, NodeError> {
        self.api_of(id)?
            .checkpoint_sandbox(id, checkpoint_id, cancel)
            .await
    }

    async fn restore_checkpoint(
        &self,
        launch: SandboxLaunch,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        if let Ok(api) = self.api_of(&launch.id) {
            return api.restore_checkpoint(launch, checkpoint_id, cancel).await;
        }
        let id = launch.id.clone();
        let (node, api) = self.place(&launch)?;
        info!(sandbox_id = %id, node = %node, checkpoint_id, "restore of a checkpoint placed");
        let result = api.restore_checkpoint(launch, checkpoint_id, cancel).await;
        self.placed_result(&id, &node, &result);
        result
    }

    async fn export_checkpoint(
        &self,
        checkpoint_id: &str,
        header: Bytes,
    ) -> Result<ByteStream, NodeError> {
        self.snapshot_node()?
            .export_checkpoint(checkpoint_id, header)
            .await
    }

    async fn import_checkpoint(
        &self,
        checkpoint_id: &str,
        body: ByteStream,
        max_bytes: u64,
        cancel: CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError> {
        self.snapshot_node()?
            .import_checkpoint(checkpoint_id, body, max_bytes, cancel)
            .await
    }

    async fn delete_checkpoint(&self, checkpoint_id: &str) -> Result<(), NodeError> {
        self.snapshot_node()?.delete_checkpoint(checkpoint_id).await
    }
}
