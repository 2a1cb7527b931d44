//! `NodeCheckpoints` of the fake node: a checkpoint copies a sandbox's files under the
//! checkpoint's id; a restore replaces a sandbox (or creates one) with those files, its
//! commands gone.

use async_trait::async_trait;
use bytes::Bytes;
use cove_node_api::{
    ByteStream, CheckpointInfo, ImportedCheckpoint, NodeCheckpoints, NodeError, NodeSandboxState,
    SandboxLaunch, WakeInfo,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::lifecycle::new_sandbox;
use crate::{Call, FakeNode, Snapshot};

/// Separates a fake archive's header from the checkpoint id it stands for.
const FAKE_SEPARATOR: &[u8] = b"\n--fake-archive--\n";

#[async_trait]
impl NodeCheckpoints for FakeNode {
    async fn checkpoint_sandbox(
        &self,
        id: &str,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<CheckpointInfo, NodeError> {
        self.run(Call::Checkpoint, id, Some(&cancel), |st| {
            let sb = st.sandbox(id)?;
            if sb.state == NodeSandboxState::Stopped {
                return Err(NodeError::Runtime(format!(
                    "cannot checkpoint sandbox {id}: it is stopped"
                )));
            }
            let files = sb.files.clone();
            let file_bytes = files.file_bytes();
            st.checkpoints
                .insert(checkpoint_id.to_string(), Snapshot { files });
            Ok(CheckpointInfo {
                file_bytes,
                memory: false,
                pause_ms: 1,
            })
        })
        .await
    }

    async fn restore_checkpoint(
        &self,
        launch: SandboxLaunch,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        let workdir = self.workdir_of(&launch.template);
        let id = launch.id.clone();
        self.run(Call::RestoreCheckpoint, &id, Some(&cancel), move |st| {
            st.sandboxes.remove(&launch.id);
            let Some(checkpoint) = st.checkpoints.get(checkpoint_id) else {
                return Err(NodeError::InvalidArgument {
                    field: "checkpoint".into(),
                    message: format!("checkpoint {checkpoint_id} is not in the snapshot store"),
                });
            };
            let files = checkpoint.files.clone();
            let file_bytes = files.file_bytes();
            let mut sb = new_sandbox(launch, &workdir);
            sb.files = files;
            st.sandboxes.insert(sb.launch.id.clone(), sb);
            Ok(WakeInfo {
                memory_restored: false,
                file_bytes,
            })
        })
        .await
    }

    async fn export_checkpoint(
        &self,
        checkpoint_id: &str,
        header: Bytes,
    ) -> Result<ByteStream, NodeError> {
        // The fake archive: the header, a separator line, the checkpoint id whose files it
        // stands for.
        self.run(Call::ExportCheckpoint, checkpoint_id, None, |st| {
            if !st.checkpoints.contains_key(checkpoint_id) {
                return Err(NodeError::InvalidArgument {
                    field: "checkpoint".into(),
                    message: format!("checkpoint {checkpoint_id} is not in the snapshot store"),
                });
            }
            let mut body = header.to_vec();
            body.extend_from_slice(FAKE_SEPARATOR);
            body.extend_from_slice(checkpoint_id.as_bytes());
            Ok(futures::stream::iter([Ok(Bytes::from(body))]).boxed())
        })
        .await
    }

    async fn import_checkpoint(
        &self,
        checkpoint_id: &str,
        mut body: ByteStream,
        max_bytes: u64,
        cancel: CancellationToken,
    ) -> Result<ImportedCheckpoint, NodeError> {
        let mut all = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| NodeError::Internal(e.to_string()))?;
            all.extend_from_slice(&chunk);
            if all.len() as u64 > max_bytes {
                return Err(NodeError::TooLarge("archive too large".into()));
            }
        }
        let runtime = self.capabilities_now().runtime;
        self.run(
            Call::ImportCheckpoint,
            checkpoint_id,
            Some(&cancel),
            move |st| {
                let refused = || NodeError::InvalidArgument {
                    field: "archive".into(),
                    message: "archive refused: not a fake archive".into(),
                };
                let at = all
                    .windows(FAKE_SEPARATOR.len())
                    .position(|w| w == FAKE_SEPARATOR)
                    .ok_or_else(refused)?;
                let source =
                    String::from_utf8_lossy(&all[at + FAKE_SEPARATOR.len()..]).into_owned();
                let files = st
                    .checkpoints
                    .get(&source)
                    .ok_or_else(refused)?
                    .files
                    .clone();
                let file_bytes = files.file_bytes();
                st.checkpoints
                    .insert(checkpoint_id.to_string(), Snapshot { files });
                Ok(ImportedCheckpoint {
                    header: Bytes::copy_from_slice(&all[..at]),
                    runtime,
                    file_bytes,
                    memory: false,
                })
            },
        )
        .await
    }

    async fn delete_checkpoint(&self, checkpoint_id: &str) -> Result<(), NodeError> {
        self.run(Call::DeleteCheckpoint, checkpoint_id, None, |st| {
            st.checkpoints.remove(checkpoint_id);
            Ok(())
        })
        .await
    }
}

impl FakeNode {
    /// Ids of every checkpoint in the fake snapshot store.
    pub fn checkpoint_ids(&self) -> Vec<String> {
        self.lock().checkpoints.keys().cloned().collect()
    }
}
