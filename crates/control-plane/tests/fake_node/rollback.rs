//! Node failures in the middle of an operation roll back as `domain::lifecycle` and
//! docs/design-notes.md say: a suspend that fails before its snapshot is complete goes back
//! to the state before (no snapshot kept); one whose snapshot is complete finishes; a failed
//! wake stays `suspended` with its snapshot; a failed pause or resume changes nothing.

use cove_api_types::{ErrorCode, OperationState, SandboxState};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::{NodeError, NodeSandboxState};
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::Harness;

fn runtime(msg: &str) -> NodeError {
    NodeError::Runtime(msg.into())
}

#[tokio::test]
async fn a_suspend_that_fails_before_its_snapshot_goes_back_to_the_state_before() {
    as_system(async {
        let h = Harness::new().await;
        for paused in [false, true] {
            let id = h.running().await;
            if paused {
                h.apply(&id, Pause).await;
            }
            h.node
                .inject(Call::Suspend, Fault::fail(runtime("tar failed")));
            let op = h.call(&id, Suspend).await.expect("suspend");
            h.ends(&op, OperationState::Failed, ErrorCode::Internal)
                .await;
            let s = h.sandbox(&id).await;
            let want = if paused {
                SandboxState::Paused
            } else {
                SandboxState::Running
            };
            assert_eq!(s.state, want);
            assert!(s
                .state_reason
                .expect("reason")
                .starts_with("suspend rolled back"));
            assert!(!h.node.snapshot_exists(&id));
            assert_eq!(h.node.count_on(Call::DeleteSnapshot, &id), 1);
            assert!(h.node.state_of(&id).is_some());
        }
    })
    .await;
}

#[tokio::test]
async fn a_suspend_that_fails_after_its_snapshot_is_complete_finishes() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(
            Call::Suspend,
            Fault::fail(runtime("umount busy")).after_effect(),
        );
        let op = h.call(&id, Suspend).await.expect("suspend");
        h.succeeds(&op).await;
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        assert!(h.node.snapshot_exists(&id));
        assert_eq!(h.node.count_on(Call::Release, &id), 1, "resources released");
        h.apply(&id, Wake).await;
    })
    .await;
}

#[tokio::test]
async fn a_failed_wake_stays_suspended_with_its_snapshot_and_can_be_retried() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Suspend).await;
        h.node.inject(
            Call::Wake,
            Fault::fail(NodeError::AgentUnavailable("agent did not start".into())),
        );
        let op = h.call(&id, Wake).await.expect("wake");
        h.ends(&op, OperationState::Failed, ErrorCode::Unavailable)
            .await;
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Suspended);
        assert!(s.state_reason.expect("reason").starts_with("wake failed"));
        assert!(h.node.snapshot_exists(&id));
        h.apply(&id, Wake).await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
        assert!(!h.node.snapshot_exists(&id));
    })
    .await;
}

#[tokio::test]
async fn a_failed_pause_or_resume_changes_nothing() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(
            Call::Pause,
            Fault::fail(NodeError::AgentUnavailable("frozen".into())),
        );
        let op = h.call(&id, Pause).await.expect("pause");
        h.ends(&op, OperationState::Failed, ErrorCode::Unavailable)
            .await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
        assert_eq!(h.node.state_of(&id), Some(NodeSandboxState::Running));

        h.apply(&id, Pause).await;
        h.node
            .inject(Call::Resume, Fault::fail(runtime("thaw failed")));
        let op = h.call(&id, Resume).await.expect("resume");
        h.ends(&op, OperationState::Failed, ErrorCode::Internal)
            .await;
        assert_eq!(h.state(&id).await, SandboxState::Paused);
    })
    .await;
}

#[tokio::test]
async fn a_sandbox_its_node_lost_fails_calls_with_unavailable() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.lose(&id);
        let op = h.call(&id, Pause).await.expect("pause");
        let done = h
            .ends(&op, OperationState::Failed, ErrorCode::Unavailable)
            .await;
        assert!(done.error.expect("error").message.contains("not present"));
    })
    .await;
}
