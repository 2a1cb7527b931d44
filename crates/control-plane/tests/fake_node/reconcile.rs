//! Reconciliation. At start-up: sandboxes the node lost end `failed`, survivors are
//! re-adopted, leftovers nobody wants are destroyed, interrupted operations are finished or
//! rolled back and end `succeeded` or `failed` (`unavailable`). While serving: sandboxes that
//! vanish end `failed`, leftovers go, sandboxes with a call in flight are left alone.
//!
//! A "restart" is a new control plane over the same store and node; the old one's work stays
//! where it hung.

use std::time::Duration;

use cove_api_types::{ErrorCode, OperationState, ReleaseState, SandboxState};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::{NodeLifecycle, NodeSandboxState};
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::Harness;

async fn reason(h: &Harness, id: &str) -> String {
    h.sandbox(id).await.state_reason.unwrap_or_default()
}

#[tokio::test]
async fn lost_sandboxes_fail_survivors_are_adopted_and_leftovers_are_removed() {
    as_system(async {
        let mut h = Harness::new().await;
        let kept = h.running().await;
        let lost = h.running().await;
        let lost_paused = h.running().await;
        h.apply(&lost_paused, Pause).await;
        let kept_paused = h.running().await;
        h.apply(&kept_paused, Pause).await;
        let stopped = h.running().await;
        let suspended = h.running().await;
        h.apply(&suspended, Suspend).await;
        h.node.lose(&lost);
        h.node.lose(&lost_paused);
        h.node.set_state(&stopped, NodeSandboxState::Stopped);
        h.node.add_leftover("sb-leftover");
        h.node.add_snapshot("sb-orphan-snapshot");
        // A running sandbox's snapshot is left over from an interrupted wake.
        h.node.add_snapshot(&kept);
        h.node.add_partial_uploads(3);

        h.restart();
        h.cp.reconcile().await.expect("reconcile");

        assert_eq!(h.state(&kept).await, SandboxState::Running);
        assert_eq!(h.state(&kept_paused).await, SandboxState::Paused);
        assert_eq!(h.state(&suspended).await, SandboxState::Suspended);
        assert!(h.node.snapshot_exists(&suspended));
        for id in [&lost, &lost_paused, &stopped] {
            assert_eq!(h.state(id).await, SandboxState::Failed, "{id}");
            assert_eq!(
                reason(&h, id).await,
                "the sandbox stopped while the server was down"
            );
        }
        assert_eq!(
            h.node.state_of(&stopped),
            None,
            "a stopped sandbox is removed"
        );
        assert_eq!(h.node.count_on(Call::Destroy, "sb-leftover"), 1);
        assert_eq!(h.node.state_of("sb-leftover"), None);
        assert_eq!(h.node.snapshot_ids(), vec![suspended.clone()]);
        assert_eq!(h.node.count(Call::SweepSnapshots), 1);
        // Survivors still serve.
        let true_ = cove_api_types::CreateCommandRequest {
            argv: Some(vec!["true".into()]),
            ..Default::default()
        };
        h.cp.create_command(&kept, true_).await.expect("command");
    })
    .await;
}

#[tokio::test]
async fn an_interrupted_create_is_adopted_or_failed() {
    as_system(async {
        let mut h = Harness::new().await;
        // Before the node started it / after.
        h.node.inject(Call::Start, Fault::hang());
        let (never, never_op) = h.create_with(Default::default()).await;
        h.node.wait_for_calls(Call::Start, 1).await;
        h.node.inject(Call::Start, Fault::hang().after_effect());
        let (started, started_op) = h.create_with(Default::default()).await;
        h.node.wait_for_calls(Call::Start, 2).await;

        h.restart();
        h.cp.reconcile().await.expect("reconcile");

        assert_eq!(h.state(&never.id).await, SandboxState::Failed);
        assert_eq!(h.state(&started.id).await, SandboxState::Running);
        let ops = h.cp.operations();
        let failed = ops.get(&never_op.id).await.expect("op");
        assert_eq!(failed.state, OperationState::Failed);
        assert_eq!(failed.error.map(|e| e.code), Some(ErrorCode::Unavailable));
        let done = ops.get(&started_op.id).await.expect("op");
        assert_eq!(done.state, OperationState::Succeeded);
    })
    .await;
}

#[tokio::test]
async fn an_interrupted_suspend_is_finished_or_rolled_back() {
    as_system(async {
        let mut h = Harness::new().await;
        // Snapshot complete when the server stopped.
        let saved = h.running().await;
        h.node.inject(Call::Suspend, Fault::hang().after_effect());
        let saved_op = h.call(&saved, Suspend).await.expect("suspend");
        h.node.wait_for_calls(Call::Suspend, 1).await;
        // Frozen for the snapshot, not saved yet.
        let frozen = h.running().await;
        h.node.inject(Call::Suspend, Fault::hang());
        let frozen_op = h.call(&frozen, Suspend).await.expect("suspend");
        h.node.wait_for_calls(Call::Suspend, 2).await;
        h.node.set_state(&frozen, NodeSandboxState::Paused);
        // Paused before the suspend.
        let paused = h.running().await;
        h.apply(&paused, Pause).await;
        h.node.inject(Call::Suspend, Fault::hang());
        h.call(&paused, Suspend).await.expect("suspend");
        h.node.wait_for_calls(Call::Suspend, 3).await;
        // Gone from the node with no snapshot.
        let vanished = h.running().await;
        h.node.inject(Call::Suspend, Fault::hang());
        h.call(&vanished, Suspend).await.expect("suspend");
        h.node.wait_for_calls(Call::Suspend, 4).await;
        h.node.lose(&vanished);

        h.restart();
        h.cp.reconcile().await.expect("reconcile");

        assert_eq!(h.state(&saved).await, SandboxState::Suspended);
        assert_eq!(
            h.cp.operations().get(&saved_op.id).await.expect("op").state,
            OperationState::Succeeded
        );
        assert_eq!(h.state(&frozen).await, SandboxState::Running);
        assert_eq!(
            h.node.state_of(&frozen),
            Some(NodeSandboxState::Running),
            "thawed"
        );
        assert_eq!(h.node.count_on(Call::Resume, &frozen), 1);
        let op = h.cp.operations().get(&frozen_op.id).await.expect("op");
        assert_eq!(op.state, OperationState::Failed);
        let err = op.error.expect("error");
        assert_eq!(err.code, ErrorCode::Unavailable);
        assert!(
            err.message.contains("the sandbox is running"),
            "{}",
            err.message
        );
        assert_eq!(h.state(&paused).await, SandboxState::Paused);
        assert_eq!(h.state(&vanished).await, SandboxState::Failed);
    })
    .await;
}

#[tokio::test]
async fn an_interrupted_wake_is_finished_or_left_suspended() {
    as_system(async {
        let mut h = Harness::new().await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let id = h.running().await;
            h.apply(&id, Suspend).await;
            ids.push(id);
        }
        let (woken, unwoken, no_snapshot) = (&ids[0], &ids[1], &ids[2]);
        h.node.inject(Call::Wake, Fault::hang().after_effect());
        let woken_op = h.call(woken, Wake).await.expect("wake");
        h.node.wait_for_calls(Call::Wake, 1).await;
        for (n, id) in [(2, unwoken), (3, no_snapshot)] {
            h.node.inject(Call::Wake, Fault::hang());
            h.call(id, Wake).await.expect("wake");
            h.node.wait_for_calls(Call::Wake, n).await;
        }
        h.node
            .delete_snapshot(no_snapshot)
            .await
            .expect("drop snapshot");

        h.restart();
        h.cp.reconcile().await.expect("reconcile");

        let s = h.sandbox(woken).await;
        assert_eq!(s.state, SandboxState::Running);
        assert_eq!(s.memory_restored, Some(false));
        assert!(!h.node.snapshot_exists(woken));
        assert_eq!(
            h.cp.operations().get(&woken_op.id).await.expect("op").state,
            OperationState::Succeeded
        );
        assert_eq!(h.state(unwoken).await, SandboxState::Suspended);
        assert!(h.node.snapshot_exists(unwoken));
        assert_eq!(
            reason(&h, unwoken).await,
            "wake interrupted by a server restart; wake it again"
        );
        assert_eq!(h.state(no_snapshot).await, SandboxState::Failed);
        h.apply(unwoken, Wake).await;
    })
    .await;
}

#[tokio::test]
async fn an_interrupted_delete_finishes_and_a_lost_snapshot_fails_its_sandbox() {
    as_system(async {
        let mut h = Harness::new().await;
        let deleting = h.running().await;
        h.node.inject(Call::Destroy, Fault::hang());
        let del = h.cp.delete_sandbox(&deleting, None).await.expect("delete");
        h.node.wait_for_calls(Call::Destroy, 1).await;
        let suspended = h.running().await;
        h.apply(&suspended, Suspend).await;
        h.node.delete_snapshot(&suspended).await.expect("lose it");

        h.restart();
        h.cp.reconcile().await.expect("reconcile");

        assert_eq!(h.state(&deleting).await, SandboxState::Deleted);
        assert_eq!(h.node.state_of(&deleting), None);
        assert_eq!(
            h.cp.operations().get(&del.id).await.expect("op").state,
            OperationState::Succeeded
        );
        assert_eq!(h.state(&suspended).await, SandboxState::Failed);
        assert_eq!(
            reason(&h, &suspended).await,
            "the snapshot of the suspended sandbox is missing"
        );
    })
    .await;
}

#[tokio::test]
async fn an_interrupted_build_fails_its_release() {
    as_system(async {
        let mut h = Harness::new().await;
        h.node.inject(Call::BuildRelease, Fault::hang());
        let built =
            h.cp.build_release("base", Default::default())
                .await
                .expect("build");
        h.node.wait_for_calls(Call::BuildRelease, 2).await;
        h.restart();
        h.cp.reconcile().await.expect("reconcile");
        let t = h.cp.get_template("base").await.expect("template");
        let r = t
            .releases
            .iter()
            .find(|r| r.number == built.release.number)
            .expect("release");
        assert_eq!(r.state, ReleaseState::Failed);
        assert_eq!(t.latest_release, Some(1));
        assert_eq!(h.node.count(Call::RemoveRelease), 1);
    })
    .await;
}

#[tokio::test]
async fn while_serving_vanished_sandboxes_fail_and_leftovers_go() {
    as_system(async {
        let h = Harness::with(Default::default(), |cfg| {
            cfg.controller_interval = Duration::from_secs(1);
            cfg.reconcile_interval = Duration::from_secs(1);
        })
        .await;
        let vanished = h.running().await;
        let busy = h.running().await;
        let fine = h.running().await;
        let suspended = h.running().await;
        h.apply(&suspended, Suspend).await;
        // A call in flight: the periodic check leaves the sandbox alone.
        h.node.inject(Call::Pause, Fault::hang());
        let pause = h.call(&busy, Pause).await.expect("pause");
        h.node.wait_for_calls(Call::Pause, 1).await;
        h.node.lose(&vanished);
        h.node.lose(&busy);
        h.node.add_leftover("sb-stray");
        h.node.add_snapshot("sb-stray-snapshot");

        h.controller_pass().await;
        assert_eq!(h.state(&vanished).await, SandboxState::Failed);
        assert_eq!(h.node.state_of("sb-stray"), None);
        assert!(!h.node.snapshot_exists("sb-stray-snapshot"));
        assert_eq!(
            reason(&h, &vanished).await,
            "the sandbox vanished from its node"
        );
        assert_eq!(h.state(&busy).await, SandboxState::Running);
        assert_eq!(h.state(&fine).await, SandboxState::Running);
        assert_eq!(h.state(&suspended).await, SandboxState::Suspended);
        assert!(h.node.snapshot_exists(&suspended));
        h.node.release(Call::Pause);
        h.settle(&pause.id).await;
    })
    .await;
}
