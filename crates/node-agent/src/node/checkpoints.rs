//! Checkpoints on the node: a running sandbox frozen just long enough for the runtime's
//! artifacts to be written to the checkpoints' folder of the snapshot store, then thawed; and
//! a checkpoint restored into a sandbox directory (a rollback, a fork, a create from it).

use std::time::Instant;

use async_trait::async_trait;
use cove_node_api::{CheckpointInfo, NodeCheckpoints, WakeInfo};

use super::lifecycle::snapshot_err;
use super::*;
use crate::snapshot::SnapshotError;

#[async_trait]
impl NodeCheckpoints for NodeAgent {
    async fn checkpoint_sandbox(
        &self,
        id: &str,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<CheckpointInfo, NodeError> {
        let was_running = match self.runtime.state(id).await.map_err(runtime_err)? {
            None => return Err(NodeError::SandboxNotFound(id.to_string())),
            Some(RuntimeState::Running) => true,
            Some(RuntimeState::Paused) => false,
            Some(other) => {
                return Err(NodeError::Runtime(format!(
                    "cannot checkpoint a sandbox that is {other:?}"
                )))
            }
        };
        let store = self.cfg.snapshots.checkpoints();
        let frozen = Instant::now();
        // Frozen processes cannot change the files while they are saved.
        if was_running {
            self.runtime.pause(id).await.map_err(runtime_err)?;
        }
        // A runtime that keeps memory by stopping the sandbox (gVisor without a network) does
        // it now and carries the sandbox on from that memory once the artifacts are saved; a
        // paused sandbox keeps files-only checkpoints (it would not stay paused).
        let dir = self.sandbox_dir(id);
        let memory = if was_running {
            match self.runtime.checkpoint_memory_live(id, &dir).await {
                Ok(memory) => memory,
                Err(e) => {
                    warn!(sandbox_id = %id, error = %e, "memory checkpoint failed");
                    if let Err(thaw) = self.runtime.resume(id).await {
                        warn!(sandbox_id = %id, error = %thaw, "cannot thaw after a checkpoint");
                    }
                    return Err(runtime_err(e));
                }
            }
        } else {
            false
        };
        let extra = if memory {
            self.runtime.memory_artifacts()
        } else {
            &[]
        };
        let saved = self
            .save_snapshot_with(&store, checkpoint_id, id, None, extra, &cancel)
            .await;
        let carried_on = if memory {
            self.runtime.undo_checkpoint(id, &dir).await
        } else if was_running {
            self.runtime.resume(id).await
        } else {
            Ok(())
        };
        if let Err(e) = carried_on {
            warn!(sandbox_id = %id, error = %e, "cannot carry on after a checkpoint");
            let _ = store.delete(checkpoint_id).await;
            return Err(runtime_err(e));
        }
        let pause_ms = if was_running {
            // Rounded up: the sandbox was frozen (or stopped) at most this long.
            frozen.elapsed().as_micros().div_ceil(1000) as u64
        } else {
            0
        };
        let file_bytes = saved.map_err(snapshot_err)?;
        let memory = store
            .manifest(checkpoint_id)
            .await
            .map_err(snapshot_err)?
            .memory;
        info!(sandbox_id = %id, checkpoint_id, file_bytes, pause_ms, memory, "checkpoint saved");
        Ok(CheckpointInfo {
            file_bytes,
            memory,
            pause_ms,
        })
    }

    async fn restore_checkpoint(
        &self,
        launch: SandboxLaunch,
        checkpoint_id: &str,
        cancel: CancellationToken,
    ) -> Result<WakeInfo, NodeError> {
        let store = self.cfg.snapshots.checkpoints();
        let restored = self
            .restore_and_launch(&store, checkpoint_id, &launch, &cancel)
            .await;
        match restored {
            Ok(woken) => {
                info!(sandbox_id = %launch.id, checkpoint_id, file_bytes = woken.file_bytes,
                    memory_restored = woken.memory_restored, "sandbox restored from a checkpoint");
                Ok(woken)
            }
            Err(e) => {
                // Say which of the snapshot store's failures is the caller's: no such
                // checkpoint, or one this node's runtime cannot restore.
                match store.manifest(checkpoint_id).await {
                    Err(SnapshotError::Missing(_)) => Err(NodeError::InvalidArgument {
                        field: "checkpoint".into(),
                        message: format!("checkpoint {checkpoint_id} is not in the snapshot store"),
                    }),
                    Ok(m) if m.runtime != self.runtime.kind().as_str() => {
                        Err(NodeError::InvalidArgument {
                            field: "checkpoint".into(),
                            message: format!(
                                "checkpoint {checkpoint_id} was taken by runtime {}",
                                m.runtime
                            ),
                        })
                    }
                    _ => Err(e),
                }
            }
        }
    }

    async fn export_checkpoint(
        &self,
        checkpoint_id: &str,
        header: bytes::Bytes,
    ) -> Result<cove_node_api::ByteStream, NodeError> {
        self.export_archive(checkpoint_id, header).await
    }

    async fn import_checkpoint(
        &self,
        checkpoint_id: &str,
        body: cove_node_api::ByteStream,
        max_bytes: u64,
        cancel: CancellationToken,
    ) -> Result<cove_node_api::ImportedCheckpoint, NodeError> {
        self.import_archive(checkpoint_id, body, max_bytes, &cancel)
            .await
    }

    async fn delete_checkpoint(&self, checkpoint_id: &str) -> Result<(), NodeError> {
        self.cfg
            .snapshots
            .checkpoints()
            .delete(checkpoint_id)
            .await
            .map_err(snapshot_err)
    }
}
