//! Cancel: a running create ends `deleted`, a suspend rolls back to the state before, a wake
//! stays `suspended` with its snapshot, a queued call never reaches the node.

use std::time::Duration;

use cove_api_types::{ErrorCode, OperationState, SandboxState};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::NodeSandboxState;
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::Harness;

/// Lets the spawned cancel reach its cancel token: it first reads the operation from the
/// store, whose work runs on a thread of its own (nothing the test can wait on, so it gives
/// that thread 50 ms of real time).
async fn let_real_time_pass() {
    for _ in 0..50 {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1)))
            .await
            .expect("sleep");
    }
}

#[tokio::test]
async fn a_cancelled_create_ends_deleted_with_nothing_on_the_node() {
    as_system(async {
        let h = Harness::new().await;
        h.node.inject(Call::Start, Fault::hang().after_effect());
        let (s, op) = h.create_with(Default::default()).await;
        h.node.wait_for_calls(Call::Start, 1).await;
        let ops = h.cp.operations().clone();
        let op_id = op.id.clone();
        let cancel = tokio::spawn(as_system(async move { ops.cancel(&op_id).await }));
        // A start cannot be interrupted: the cancel lands while it runs, and once it returns
        // the create is undone.
        let_real_time_pass().await;
        h.node.release(Call::Start);
        let answered = cancel.await.expect("join").expect("cancel");
        assert_eq!(answered.state, OperationState::Cancelled);
        let done = h
            .ends(&op, OperationState::Cancelled, ErrorCode::Cancelled)
            .await;
        assert_eq!(done.id, op.id);
        let sb = h.sandbox(&s.id).await;
        assert_eq!(sb.state, SandboxState::Deleted);
        assert_eq!(sb.state_reason.as_deref(), Some("create cancelled"));
        assert_eq!(h.node.state_of(&s.id), None);
        assert_eq!(
            h.node.lifecycle_calls(&s.id),
            vec![Call::Start, Call::Destroy]
        );
    })
    .await;
}

#[tokio::test]
async fn a_cancelled_suspend_rolls_back_to_running_or_paused() {
    as_system(async {
        let h = Harness::new().await;
        for paused in [false, true] {
            let id = h.running().await;
            if paused {
                h.apply(&id, Pause).await;
            }
            h.node.inject(Call::Suspend, Fault::hang());
            let op = h.call(&id, Suspend).await.expect("suspend");
            h.node
                .wait_for_calls(Call::Suspend, 1 + usize::from(paused))
                .await;
            let done = h.cp.operations().cancel(&op.id).await.expect("cancel");
            assert_eq!(done.state, OperationState::Cancelled);
            let (want, on_node) = if paused {
                (SandboxState::Paused, NodeSandboxState::Paused)
            } else {
                (SandboxState::Running, NodeSandboxState::Running)
            };
            assert_eq!(h.state(&id).await, want);
            assert_eq!(h.node.state_of(&id), Some(on_node));
            assert!(!h.node.snapshot_exists(&id));
        }
    })
    .await;
}

#[tokio::test]
async fn a_cancelled_wake_stays_suspended_with_its_snapshot() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Suspend).await;
        h.node.inject(Call::Wake, Fault::hang());
        let op = h.call(&id, Wake).await.expect("wake");
        h.node.wait_for_calls(Call::Wake, 1).await;
        let done = h.cp.operations().cancel(&op.id).await.expect("cancel");
        assert_eq!(done.state, OperationState::Cancelled);
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        assert!(h.node.snapshot_exists(&id));
        assert_eq!(h.node.state_of(&id), None);
        h.apply(&id, Wake).await;
    })
    .await;
}

#[tokio::test]
async fn a_cancelled_queued_call_never_reaches_the_node() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Pause, Fault::hang());
        let pause = h.call(&id, Pause).await.expect("pause");
        h.node.wait_for_calls(Call::Pause, 1).await;
        let suspend = h.call(&id, Suspend).await.expect("suspend queued");
        let done = h.cp.operations().cancel(&suspend.id).await.expect("cancel");
        assert_eq!(done.state, OperationState::Cancelled);
        h.node.release(Call::Pause);
        h.succeeds(&pause).await;
        assert_eq!(h.state(&id).await, SandboxState::Paused);
        assert_eq!(h.node.count_on(Call::Suspend, &id), 0);
        // Cancelling a finished operation returns it unchanged.
        let again = h.cp.operations().cancel(&pause.id).await.expect("cancel");
        assert_eq!(again.state, OperationState::Succeeded);
    })
    .await;
}
