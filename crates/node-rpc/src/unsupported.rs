//! Node calls the protocol does not carry yet: checkpoints and file extended attributes. A remote node answers them with `NodeError::Unsupported` naming the call, so a
//! cluster reports it instead of silently doing nothing (the in-process node does them all).

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, CheckpointInfo, ImportedCheckpoint, NodeCheckpoints, NodeError, SandboxLaunch,
    WakeInfo,
};
use tokio_util::sync::CancellationToken;

use crate::RemoteNode;

/// The error of a call a remote node does not take yet.
pub(crate) fn not_carried(what: &str) -> NodeError {
    NodeError::Unsupported(format!(
        "{what} on a remote node (node protocol v{}) is not supported yet; use the in-process node",
        crate::PROTOCOL_VERSION
    ))
}

#[async_trait]
impl NodeCheckpoints for RemoteNode {
    async fn checkpoint_sandbox(
        &self,
        _id: &str,
        _checkpoint_id: &str,
        _cancel: CancellationToken,
    ) -> Result<CheckpointInfo, NodeError> {
        Err(not_carried("checkpoints"))
    }

    async fn restore_checkpoint(
        &self,
        _launch: SandboxLaunch,
        _checkpoint_id: &str,
        _cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        Err(not_carried("restoring a checkpoint"))
    }

    async fn export_checkpoint(
        &self,
        _checkpoint_id: &str,
        _header: Bytes,
    ) -> Result<ByteStream, NodeError> {
        Err(not_carried("checkpoint archives"))
    }

    async fn import_checkpoint(
        &self,
        _checkpoint_id: &str,
        _body: ByteStream,
        _max_bytes: u64,
        _cancel: CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError> {
        Err(not_carried("checkpoint archives"))
    }

    async fn delete_checkpoint(&self, _checkpoint_id: &str) -> Result<(), NodeError> {
        Err(not_carried("checkpoints"))
    }
}

/// Volumes are node-local disks in this version: a remote node answers every volume call with
/// `Unsupported` (the trait's defaults).
impl cove_node_api::NodeVolumes for RemoteNode {}
