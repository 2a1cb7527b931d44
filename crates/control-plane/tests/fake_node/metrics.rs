//! `sandbox_metrics` through the services: the node's samples mapped to the API's shape,
//! which states can be measured, and node errors mapped to API codes; the Prometheus render
//! without a recorder.

use cove_api_types::{CreateSandboxRequest, ErrorCode, ResourcesRequest};
use cove_control_plane::LifecycleVerb;
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault, FAKE_SANDBOX_MEMORY_BYTES};

use crate::harness::as_system;
use crate::harness::{code, Harness};

#[tokio::test]
async fn metrics_carry_the_nodes_samples() {
    as_system(async {
        let h = Harness::new().await;
        let id = h
            .running_with(CreateSandboxRequest {
                resources: Some(ResourcesRequest {
                    memory_mib: Some(256),
                    disk_mib: Some(128),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await;
        let m = h.cp.sandbox_metrics(&id).await.expect("metrics");
        assert_eq!(m.sandbox_id, id);
        assert_eq!(m.interval_s, 5);
        assert_eq!(m.history.len(), 1);
        let (cur, old) = (&m.current, &m.history[0]);
        assert_eq!(cur.memory.bytes, FAKE_SANDBOX_MEMORY_BYTES);
        assert_eq!(cur.memory.peak_bytes, Some(FAKE_SANDBOX_MEMORY_BYTES));
        assert_eq!(cur.memory.limit_bytes, Some(256 << 20));
        assert_eq!(cur.disk.used_bytes, Some(0));
        assert_eq!(cur.disk.limit_bytes, Some(128 << 20));
        assert_eq!(cur.cpu.rate, Some(0.0));
        assert_eq!(old.cpu.rate, None);
        assert_eq!(cur.network, None);
        // Unix milliseconds became times, 5 s apart.
        assert_eq!((cur.at - old.at).num_milliseconds(), 5000);
        assert!(cur.at.timestamp() > 1_600_000_000);
    })
    .await;
}

#[tokio::test]
async fn paused_sandboxes_are_measured_suspended_ones_are_not() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, LifecycleVerb::Pause).await;
        h.cp.sandbox_metrics(&id).await.expect("paused");
        h.apply(&id, LifecycleVerb::Suspend).await;
        assert_eq!(
            code(h.cp.sandbox_metrics(&id).await),
            ErrorCode::SandboxNotRunning
        );
        assert_eq!(
            code(h.cp.sandbox_metrics("sb-doesnotexist0000").await),
            ErrorCode::SandboxNotFound
        );
        // Not asking the node about a sandbox it does not hold.
        let asked = h
            .node
            .calls()
            .iter()
            .filter(|c| c.call == Call::SandboxMetrics)
            .count();
        assert_eq!(asked, 1);
    })
    .await;
}

#[tokio::test]
async fn node_errors_map_to_api_codes() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(
            Call::SandboxMetrics,
            Fault::fail(NodeError::SandboxNotFound(id.clone())),
        );
        assert_eq!(
            code(h.cp.sandbox_metrics(&id).await),
            ErrorCode::Unavailable
        );
        h.node.inject(
            Call::SandboxMetrics,
            Fault::fail(NodeError::Runtime("read /sys/fs/cgroup/x: gone".into())),
        );
        let err = h.cp.sandbox_metrics(&id).await.expect_err("runtime error");
        assert_eq!(err.code(), ErrorCode::Internal);
        assert!(!err.public_message().contains("/sys/fs"), "{err:?}");
    })
    .await;
}

#[tokio::test]
async fn without_a_recorder_there_is_nothing_to_render() {
    as_system(async {
        let h = Harness::new().await;
        assert_eq!(h.cp.render_metrics().await.expect("render"), None);
    })
    .await;
}
