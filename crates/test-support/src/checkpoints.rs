//! `NodeCheckpoints` of the fake node: a checkpoint copies a sandbox's files under the
//! checkpoint's id; a restore replaces a sandbox (or creates one) with those files, its
//! commands gone.

use async_trait::async_trait;
use cove_node_api::{
    CheckpointInfo, NodeCheckpoints, NodeError, NodeSandboxState, SandboxLaunch, WakeInfo,
};
use tokio_util::sync::CancellationToken;

use crate::lifecycle::new_sandbox;
use crate::{Call, FakeNode, Snapshot};

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
