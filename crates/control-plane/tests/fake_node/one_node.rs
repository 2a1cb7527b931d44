//! A single server is a cluster of one (`OneNode`): its one in-process node is listed as
//! `local`, ready, with what the node reports now, and cannot be drained; a node that cannot
//! report its capacity fails the listing.

use cove_api_types::{ErrorCode, NodeState};
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault};

use crate::harness::{as_system, code, Harness};

#[tokio::test]
async fn a_single_server_lists_its_one_node_and_cannot_drain_it() {
    as_system(async {
        let h = Harness::new().await;
        h.running().await;
        let listed = h.cp.list_nodes().await.expect("nodes").nodes;
        assert_eq!(listed.len(), 1);
        let local = &listed[0];
        assert_eq!(
            (local.name.as_str(), local.address.as_str(), local.state),
            ("local", "in-process", NodeState::Ready)
        );
        assert_eq!(local.sandboxes, 1, "what the node holds now");
        assert!(local.releases.contains(&"base/1".to_string()));
        assert_eq!(local.last_heartbeat_ms, 0);

        assert_eq!(
            code(h.cp.set_node_state("local", NodeState::Draining).await),
            ErrorCode::FailedPrecondition
        );
        assert_eq!(
            code(h.cp.set_node_state("other", NodeState::Draining).await),
            ErrorCode::NodeNotFound
        );

        h.node.inject(
            Call::Capacity,
            Fault::fail(NodeError::Runtime("read /sys/fs/cgroup/x: gone".into())),
        );
        assert_eq!(code(h.cp.list_nodes().await), ErrorCode::Internal);
    })
    .await;
}
