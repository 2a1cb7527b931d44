//! The [`NodeCheckpoints`] of a [`RemoteNode`] (protocol v5): checkpoint and restore are unary
//! calls cancelled by dropping them (which resets their HTTP/2 stream, and the node's handler
//! cancels its work); an export is a server stream (an acknowledgement, then the archive's
//! bytes); an import is a client stream (the call, then the archive's bytes).

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, CheckpointInfo, ImportedCheckpoint, NodeCheckpoints, NodeError, SandboxLaunch,
    WakeInfo,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::client::bytes_after_head;
use crate::Method;
use crate::RemoteNode;

#[async_trait]
impl NodeCheckpoints for RemoteNode {
    async fn checkpoint_sandbox(
        &self,
        id: &str,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<CheckpointInfo, NodeError> {
        tokio::select! {
            () = cancel.cancelled() => Err(NodeError::Cancelled),
            r = self.call(Method::CheckpointSandbox, (id, checkpoint_id)) => r,
        }
    }

    async fn restore_checkpoint(
        &self,
        launch: SandboxLaunch,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        tokio::select! {
            () = cancel.cancelled() => Err(NodeError::Cancelled),
            r = self.call(Method::RestoreCheckpoint, (launch, checkpoint_id)) => r,
        }
    }

    /// A failure on the node mid-stream (or a broken link) ends the stream with an error, so a
    /// short archive is never taken for a whole one.
    async fn export_checkpoint(
        &self,
        checkpoint_id: &str,
        header: Bytes,
    ) -> Result<ByteStream, NodeError> {
        let items = self
            .open(Method::ExportCheckpoint, (checkpoint_id, header.to_vec()))
            .await?;
        Ok(Box::pin(bytes_after_head(items).map(|b| {
            b.map_err(|e| std::io::Error::other(e.to_string()))
        })))
    }

    async fn import_checkpoint(
        &self,
        checkpoint_id: &str,
        body: ByteStream,
        max_bytes: u64,
        cancel: CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError> {
        // Cancelled or with a broken body, the call is reset: the node then cancels the import
        // and keeps nothing of it.
        let args = (checkpoint_id, max_bytes);
        self.upload(Method::ImportCheckpoint, args, body, Some(cancel))
            .await
    }

    async fn delete_checkpoint(&self, checkpoint_id: &str) -> Result<(), NodeError> {
        self.call(Method::DeleteCheckpoint, (checkpoint_id,)).await
    }
}
