//! `NodeVolumes` of the fake node: volumes are ids with a size and no bytes (their files API
//! keeps the default `Unsupported`); usage is always zero.

use async_trait::async_trait;
use cove_node_api::{NodeError, NodeVolumes, VolumeUsage};

use crate::FakeNode;

impl FakeNode {
    /// Ids of the volumes the fake node holds, in id order.
    pub fn volume_ids(&self) -> Vec<String> {
        self.lock().volumes.keys().cloned().collect()
    }
}

#[async_trait]
impl NodeVolumes for FakeNode {
    async fn create_volume(&self, id: &str, size_mib: u64) -> Result<(), NodeError> {
        let mut st = self.lock();
        if st.volumes.contains_key(id) {
            return Err(NodeError::AlreadyExists(format!("volume {id} exists")));
        }
        st.volumes.insert(id.to_string(), size_mib);
        Ok(())
    }

    async fn delete_volume(&self, id: &str) -> Result<(), NodeError> {
        self.lock().volumes.remove(id);
        Ok(())
    }

    async fn volume_usage(&self, id: &str) -> Result<VolumeUsage, NodeError> {
        let size_mib =
            self.lock().volumes.get(id).copied().ok_or_else(|| {
                NodeError::FileNotFound(format!("volume {id} is not on this node"))
            })?;
        Ok(VolumeUsage {
            used_bytes: 0,
            free_bytes: size_mib << 20,
        })
    }
}
