//! The controller with paused time: idle sandboxes suspend, sandboxes past their TTL are
//! deleted, finished operations and events older than the retention are purged.

use std::time::Duration;

use cove_api_types::{
    CreateCommandRequest, CreateSandboxRequest, ErrorCode, EventType, LifecycleRequest,
    OperationKind, OperationState, SandboxState,
};
use cove_control_plane::{LifecycleVerb::*, PathQuery};
use cove_test_support::{Call, FakeNode, Fault, Script};

use crate::harness::{code, Harness};

const SECOND: Duration = Duration::from_secs(1);

async fn harness() -> Harness {
    Harness::with(FakeNode::new(), |cfg| {
        cfg.controller_interval = SECOND;
        cfg.retention = Duration::from_secs(3600);
    })
    .await
}

async fn with_idle_timeout(h: &Harness, s: u64) -> String {
    let req = CreateSandboxRequest {
        idle_timeout_s: Some(s),
        ..Default::default()
    };
    h.running_with(req).await
}

/// Waits for the idle suspend the controller started, if any; returns whether there was one.
async fn idle_suspended(h: &Harness, id: &str) -> bool {
    let ops = h.ops_of(id, OperationKind::SuspendSandbox).await;
    for op in &ops {
        h.succeeds(op).await;
    }
    !ops.is_empty()
}

#[tokio::test]
async fn idle_sandboxes_suspend_after_their_idle_timeout() {
    let h = harness().await;
    let running = with_idle_timeout(&h, 60).await;
    let paused = with_idle_timeout(&h, 60).await;
    h.apply(&paused, Pause).await;
    let never = with_idle_timeout(&h, 0).await;

    h.advance(50 * SECOND).await;
    h.controller_pass().await;
    assert!(!idle_suspended(&h, &running).await);
    assert!(!idle_suspended(&h, &paused).await);

    h.advance(10 * SECOND).await;
    h.controller_pass().await;
    assert!(idle_suspended(&h, &running).await);
    assert!(idle_suspended(&h, &paused).await);
    assert!(!idle_suspended(&h, &never).await);
    assert_eq!(h.state(&running).await, SandboxState::Suspended);
    assert_eq!(h.state(&paused).await, SandboxState::Suspended);
    assert_eq!(h.state(&never).await, SandboxState::Running);
    let log = h.event_log(&running).await;
    assert_eq!(
        log.last(),
        Some(&(EventType::SandboxSuspended, Some("idle".to_string())))
    );
}

#[tokio::test]
async fn api_access_and_running_commands_keep_a_sandbox_awake() {
    let h = harness().await;
    let touched = with_idle_timeout(&h, 60).await;
    let busy = with_idle_timeout(&h, 60).await;
    h.node.script("sleep 1000", Script::running());
    let cmd =
        h.cp.create_command(
            &busy,
            CreateCommandRequest {
                shell: Some("sleep 1000".into()),
                ..Default::default()
            },
        )
        .await
        .expect("command");

    h.advance(45 * SECOND).await;
    let q = PathQuery {
        path: Some("/tmp".into()),
        ..Default::default()
    };
    h.cp.stat_file(&touched, q).await.expect("stat");
    h.advance(30 * SECOND).await;
    h.controller_pass().await;
    assert!(!idle_suspended(&h, &touched).await, "touched 30 s ago");
    assert!(!idle_suspended(&h, &busy).await, "a command runs");
    assert!(h.node.count_on(Call::Commands, &busy) >= 1);

    // Both go idle once nothing happens for the timeout.
    h.node.finish_command(&busy, &cmd.command.id, 0);
    h.advance(61 * SECOND).await;
    h.controller_pass().await;
    assert!(idle_suspended(&h, &touched).await);
    assert!(idle_suspended(&h, &busy).await);
}

#[tokio::test]
async fn sandboxes_past_their_ttl_are_deleted() {
    let h = harness().await;
    let req = CreateSandboxRequest {
        ttl_s: Some(120),
        ..Default::default()
    };
    let short = h.running_with(req).await;
    let long = h.running().await;
    let suspended = h
        .running_with(CreateSandboxRequest {
            ttl_s: Some(120),
            ..Default::default()
        })
        .await;
    h.apply(&suspended, Suspend).await;

    h.advance(100 * SECOND).await;
    h.controller_pass().await;
    assert!(h
        .ops_of(&short, OperationKind::DeleteSandbox)
        .await
        .is_empty());

    h.advance(20 * SECOND).await;
    h.controller_pass().await;
    for id in [&short, &suspended] {
        let del = h.ops_of(id, OperationKind::DeleteSandbox).await;
        assert_eq!(del.len(), 1, "{id}");
        h.succeeds(&del[0]).await;
        assert_eq!(h.state(id).await, SandboxState::Deleted);
    }
    assert!(!h.node.snapshot_exists(&suspended));
    assert_eq!(h.state(&long).await, SandboxState::Running);
}

#[tokio::test]
async fn finished_operations_and_events_older_than_the_retention_are_purged() {
    let h = harness().await;
    let id = h.running().await;
    let create = h.ops_of(&id, OperationKind::CreateSandbox).await;
    let busy = h.running().await;
    h.node.inject(Call::Pause, Fault::hang());
    let long = LifecycleRequest {
        deadline_s: Some(86_400),
    };
    let unfinished =
        h.cp.lifecycle(&busy, Pause, long, None)
            .await
            .expect("pause");
    h.node.wait_for_calls(Call::Pause, 1).await;

    h.advance(Duration::from_secs(3500)).await;
    h.controller_pass().await;
    h.cp.operations().get(&create[0].id).await.expect("kept");
    assert!(!h.events(&id).await.is_empty());

    h.advance(Duration::from_secs(120)).await;
    h.controller_pass().await;
    assert_eq!(
        code(h.cp.operations().get(&create[0].id).await),
        ErrorCode::OperationNotFound
    );
    assert!(h.events(&id).await.is_empty());
    // Unfinished operations stay whatever their age; the sandbox itself stays.
    let op = h.cp.operations().get(&unfinished.id).await.expect("kept");
    assert_eq!(op.state, OperationState::Running);
    assert_eq!(h.state(&id).await, SandboxState::Running);
    h.node.release(Call::Pause);
    h.settle(&unfinished.id).await;
}
