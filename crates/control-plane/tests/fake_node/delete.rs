//! Delete from every state: the node and the snapshot store keep nothing; destroy is asked for
//! exactly once; a failed destroy fails the sandbox, which can be deleted again.

use cove_api_types::{ErrorCode, EventType, OperationState, SandboxState};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::NodeError;
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::{code, Harness};

async fn deleted_cleanly(h: &Harness, id: &str) {
    let op =
        h.cp.delete_sandbox(id, None)
            .await
            .expect("delete accepted");
    h.succeeds(&op).await;
    assert_eq!(h.state(id).await, SandboxState::Deleted);
    assert_eq!(h.node.state_of(id), None);
    assert!(!h.node.snapshot_exists(id));
    assert_eq!(h.node.count_on(Call::Destroy, id), 1, "destroy asked once");
    assert_eq!(h.events(id).await.last(), Some(&EventType::SandboxDeleted));
    assert_eq!(code(h.cp.get_sandbox(id).await), ErrorCode::SandboxNotFound);
}

#[tokio::test]
async fn delete_removes_a_running_paused_or_suspended_sandbox() {
    as_system(async {
        let h = Harness::new().await;
        let running = h.running().await;
        deleted_cleanly(&h, &running).await;

        let paused = h.running().await;
        h.apply(&paused, Pause).await;
        deleted_cleanly(&h, &paused).await;

        let suspended = h.running().await;
        h.apply(&suspended, Suspend).await;
        assert!(h.node.snapshot_exists(&suspended));
        deleted_cleanly(&h, &suspended).await;

        // Gone: a second delete is not found, and nothing more is asked of the node.
        assert_eq!(
            code(h.cp.delete_sandbox(&running, None).await),
            ErrorCode::SandboxNotFound
        );
        assert_eq!(h.node.count_on(Call::Destroy, &running), 1);
    })
    .await;
}

#[tokio::test]
async fn delete_removes_a_failed_sandbox() {
    as_system(async {
        let h = Harness::new().await;
        h.node
            .inject(Call::Start, Fault::fail(NodeError::Runtime("boom".into())));
        let (s, op) = h.create_with(Default::default()).await;
        h.settle(&op.id).await;
        assert_eq!(h.state(&s.id).await, SandboxState::Failed);
        let del = h.cp.delete_sandbox(&s.id, None).await.expect("delete");
        h.succeeds(&del).await;
        assert_eq!(h.state(&s.id).await, SandboxState::Deleted);
        // One destroy cleaned up the failed start, one is the delete.
        assert_eq!(h.node.count_on(Call::Destroy, &s.id), 2);
    })
    .await;
}

#[tokio::test]
async fn delete_during_a_create_waits_for_it_and_then_removes_the_sandbox() {
    as_system(async {
        let h = Harness::new().await;
        h.node.inject(Call::Start, Fault::hang());
        let (s, create) = h.create_with(Default::default()).await;
        h.node.wait_for_calls(Call::Start, 1).await;
        let del = h.cp.delete_sandbox(&s.id, None).await.expect("delete");
        assert_eq!(h.state(&s.id).await, SandboxState::Deleting);
        h.node.release(Call::Start);
        h.settle(&create.id).await;
        h.succeeds(&del).await;
        assert_eq!(h.state(&s.id).await, SandboxState::Deleted);
        assert_eq!(h.node.state_of(&s.id), None);
        assert_eq!(
            h.node.lifecycle_calls(&s.id),
            vec![Call::Start, Call::Destroy]
        );
    })
    .await;
}

#[tokio::test]
async fn delete_during_a_suspend_runs_after_it_and_removes_the_snapshot() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Suspend, Fault::hang());
        let suspend = h.call(&id, Suspend).await.expect("suspend");
        h.node.wait_for_calls(Call::Suspend, 1).await;
        let del = h.cp.delete_sandbox(&id, None).await.expect("delete");
        // A second delete while one runs is refused.
        assert_eq!(
            code(h.cp.delete_sandbox(&id, None).await),
            ErrorCode::InvalidState
        );
        h.node.release(Call::Suspend);
        h.settle(&suspend.id).await;
        h.succeeds(&del).await;
        assert_eq!(h.state(&id).await, SandboxState::Deleted);
        assert_eq!(h.node.snapshot_ids(), Vec::<String>::new());
        assert_eq!(h.node.sandbox_ids(), Vec::<String>::new());
    })
    .await;
}

#[tokio::test]
async fn a_failed_destroy_fails_the_sandbox_and_a_second_delete_finishes() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(
            Call::Destroy,
            Fault::fail(NodeError::Runtime("busy mount".into())),
        );
        let del = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.ends(&del, OperationState::Failed, ErrorCode::Internal)
            .await;
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Failed);
        assert!(s.state_reason.expect("reason").starts_with("delete failed"));
        assert!(h.node.state_of(&id).is_some(), "the node still has it");

        deleted_again(&h, &id).await;
    })
    .await;
}

async fn deleted_again(h: &Harness, id: &str) {
    let op = h.cp.delete_sandbox(id, None).await.expect("delete again");
    h.succeeds(&op).await;
    assert_eq!(h.state(id).await, SandboxState::Deleted);
    assert_eq!(h.node.state_of(id), None);
}

#[tokio::test]
async fn a_delete_cannot_be_cancelled() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Destroy, Fault::hang());
        let del = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.node.wait_for_calls(Call::Destroy, 1).await;
        assert_eq!(
            code(h.cp.operations().cancel(&del.id).await),
            ErrorCode::FailedPrecondition
        );
        h.node.release(Call::Destroy);
        h.succeeds(&del).await;
        assert_eq!(h.state(&id).await, SandboxState::Deleted);
    })
    .await;
}

#[tokio::test]
async fn delete_during_a_wake_runs_after_it_and_leaves_nothing() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Suspend).await;
        h.node.inject(Call::Wake, Fault::hang());
        let wake = h.call(&id, Wake).await.expect("wake");
        h.node.wait_for_calls(Call::Wake, 1).await;
        let del = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.node.release(Call::Wake);
        h.settle(&wake.id).await;
        h.succeeds(&del).await;
        assert_eq!(h.state(&id).await, SandboxState::Deleted);
        assert!(h.node.sandbox_ids().is_empty());
        assert!(h.node.snapshot_ids().is_empty());
    })
    .await;
}
