//! Operation deadlines with paused time: a node call that hangs makes its operation fail with
//! `deadline_exceeded` at its deadline (cooperative work: the node call is told to stop then;
//! work that cannot be told is dropped 30 s later), and the sandbox is left as documented.

use std::time::Duration;

use cove_api_types::{ErrorCode, LifecycleRequest, OperationState, SandboxState};
use cove_control_plane::LifecycleVerb::{self, *};
use cove_node_api::NodeSandboxState;
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::Harness;

const SECOND: Duration = Duration::from_secs(1);

async fn call_with_deadline(h: &Harness, id: &str, verb: LifecycleVerb, s: u64) -> String {
    let req = LifecycleRequest {
        deadline_s: Some(s),
    };
    h.cp.lifecycle(id, verb, req, None)
        .await
        .expect("accepted")
        .id
}

async fn op_state(h: &Harness, op_id: &str) -> OperationState {
    h.cp.operations().get(op_id).await.expect("op").state
}

#[tokio::test]
async fn a_hung_suspend_fails_at_its_deadline_and_rolls_back() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Suspend, Fault::hang());
        let op = call_with_deadline(&h, &id, Suspend, 10).await;
        h.node.wait_for_calls(Call::Suspend, 1).await;
        h.advance(9 * SECOND).await;
        assert_eq!(op_state(&h, &op).await, OperationState::Running);
        assert_eq!(h.state(&id).await, SandboxState::Suspending);

        h.advance(SECOND).await;
        let done = h.settle(&op).await;
        assert_eq!(done.state, OperationState::Failed);
        assert_eq!(
            done.error.map(|e| e.code),
            Some(ErrorCode::DeadlineExceeded)
        );
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Running, "rolled back");
        assert!(s
            .state_reason
            .expect("reason")
            .starts_with("suspend rolled back"));
        assert_eq!(h.node.state_of(&id), Some(NodeSandboxState::Running));
        assert!(!h.node.snapshot_exists(&id));
    })
    .await;
}

#[tokio::test]
async fn a_hung_wake_fails_at_its_deadline_and_keeps_the_snapshot() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Suspend).await;
        h.node.inject(Call::Wake, Fault::hang());
        let op = call_with_deadline(&h, &id, Wake, 5).await;
        h.node.wait_for_calls(Call::Wake, 1).await;
        h.advance(5 * SECOND).await;
        let done = h.settle(&op).await;
        assert_eq!(
            done.error.map(|e| e.code),
            Some(ErrorCode::DeadlineExceeded)
        );
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        assert!(h.node.snapshot_exists(&id));
        assert_eq!(h.node.state_of(&id), None);
        // It can be woken again.
        h.apply(&id, Wake).await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn a_hung_pause_is_dropped_30_s_after_its_deadline_and_the_queue_moves_on() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Pause, Fault::hang());
        let op = call_with_deadline(&h, &id, Pause, 10).await;
        h.node.wait_for_calls(Call::Pause, 1).await;
        // A pause cannot be told to stop: it gets 30 s of grace after its deadline.
        h.advance(10 * SECOND).await;
        h.advance(29 * SECOND).await;
        assert_eq!(op_state(&h, &op).await, OperationState::Running);
        h.advance(SECOND).await;
        let done = h.settle(&op).await;
        assert_eq!(done.state, OperationState::Failed);
        assert_eq!(
            done.error.map(|e| e.code),
            Some(ErrorCode::DeadlineExceeded)
        );
        assert_eq!(h.state(&id).await, SandboxState::Running);
        // The sandbox's queue is free again.
        h.apply(&id, Pause).await;
        assert_eq!(h.state(&id).await, SandboxState::Paused);
    })
    .await;
}

#[tokio::test]
async fn a_delayed_node_call_that_ends_before_the_deadline_succeeds() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Suspend, Fault::delay(8 * SECOND));
        let op = call_with_deadline(&h, &id, Suspend, 10).await;
        h.node.wait_for_calls(Call::Suspend, 1).await;
        h.advance(8 * SECOND).await;
        let done = h.settle(&op).await;
        assert_eq!(done.state, OperationState::Succeeded);
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
    })
    .await;
}

#[tokio::test]
async fn a_create_whose_start_hangs_fails_at_its_deadline_and_leaves_nothing() {
    as_system(async {
        let h = Harness::new().await;
        h.node.inject(Call::Start, Fault::hang().after_effect());
        let (s, op) = h.create_with(Default::default()).await;
        h.node.wait_for_calls(Call::Start, 1).await;
        // Creates have the default deadline (30 min); a start is not cancellable, so it is
        // dropped after 30 s of grace.
        h.advance(Duration::from_secs(30 * 60)).await;
        assert_eq!(op_state(&h, &op.id).await, OperationState::Running);
        h.advance(30 * SECOND).await;
        let done = h.settle(&op.id).await;
        assert_eq!(
            done.error.map(|e| e.code),
            Some(ErrorCode::DeadlineExceeded)
        );
        crate::harness::eventually("the abandoned create to be cleaned up", || async {
            h.sandbox(&s.id).await.state == SandboxState::Failed
        })
        .await;
        assert_eq!(
            h.node.state_of(&s.id),
            None,
            "the half-started sandbox is removed"
        );
        assert_eq!(h.node.count_on(Call::Destroy, &s.id), 1);
        assert_eq!(
            h.sandbox(&s.id).await.state_reason.as_deref(),
            Some("the sandbox did not start before the create's deadline")
        );
    })
    .await;
}
