//! The controller with paused time: idle sandboxes suspend, sandboxes past their TTL are
//! deleted, finished operations and events older than the retention are purged.

use std::time::Duration;

use cove_api_types::{
    CreateCommandRequest, CreateSandboxRequest, ErrorCode, EventType, LifecycleRequest,
    OperationKind, OperationState, SandboxState,
};
use cove_control_plane::{LifecycleVerb::*, Retention, SandboxPath};
use cove_test_support::{Call, FakeNode, Fault, Script};

use crate::harness::as_system;
use crate::harness::{code, Harness};

const SECOND: Duration = Duration::from_secs(1);

async fn harness() -> Harness {
    Harness::with(FakeNode::new(), |cfg| {
        cfg.controller_interval = SECOND;
        cfg.retention = Retention {
            operations: Some(Duration::from_secs(3600)),
            events: Some(Duration::from_secs(3600)),
            commands: Some(Duration::from_secs(600)),
            snapshots: Some(Duration::from_secs(7200)),
            audit: None,
        };
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
    as_system(async {
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
    })
    .await;
}

#[tokio::test]
async fn api_access_and_running_commands_keep_a_sandbox_awake() {
    as_system(async {
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
        let tmp = SandboxPath(b"/tmp".to_vec());
        h.cp.stat_file(&touched, tmp, None).await.expect("stat");
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
    })
    .await;
}

#[tokio::test]
async fn sandboxes_past_their_ttl_are_deleted() {
    as_system(async {
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
        // A TTL delete says why (issue 32 item 6: it used to record `reason: null`).
        for id in [&short, &suspended] {
            assert_eq!(
                h.event_log(id).await.last(),
                Some(&(EventType::SandboxDeleted, Some("ttl".to_string())))
            );
            assert_eq!(h.sandbox(id).await.state_reason.as_deref(), Some("ttl"));
        }
    })
    .await;
}

#[tokio::test]
async fn finished_operations_and_events_older_than_the_retention_are_purged() {
    as_system(async {
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
    })
    .await;
}

#[tokio::test]
async fn ended_commands_past_their_retention_are_forgotten() {
    as_system(async {
        let h = harness().await;
        let id = h.running().await;
        h.node.script("sleep 1000", Script::running());
        let start = |line: &str| {
            let req = CreateCommandRequest {
                shell: Some(line.into()),
                ..Default::default()
            };
            let cp = h.cp.clone();
            let id = id.clone();
            async move {
                cp.create_command(&id, req)
                    .await
                    .expect("command")
                    .command
                    .id
            }
        };
        let old = start("sleep 1000").await;
        let recent = start("sleep 1000").await;
        let running = start("sleep 1000").await;
        let ms = |ago_s: i64| {
            (h.cfg.clock.now() - chrono::Duration::seconds(ago_s)).timestamp_millis() as u64
        };
        // Retention of commands is 600 s in this harness.
        h.node.finish_command_at(&id, &old, 0, ms(601));
        h.node.finish_command_at(&id, &recent, 0, ms(590));

        h.controller_pass().await;
        let left: Vec<String> =
            h.cp.list_commands(&id, None)
                .await
                .expect("list")
                .commands
                .into_iter()
                .map(|c| c.id)
                .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(
            left.contains(&recent) && left.contains(&running),
            "{left:?}"
        );
        assert_eq!(
            code(h.cp.get_command(&id, &old, None).await),
            ErrorCode::CommandNotFound,
            "the old command is forgotten, its row too"
        );
        h.cp.get_command(&id, &recent, None).await.expect("kept");
    })
    .await;
}

#[tokio::test]
async fn suspended_sandboxes_past_the_snapshot_retention_are_deleted() {
    as_system(async {
        let h = harness().await;
        let suspended = h.running().await;
        h.apply(&suspended, Suspend).await;
        let paused = h.running().await;
        h.apply(&paused, Pause).await;
        let running = h.running().await;

        // Snapshot retention is 7200 s in this harness.
        h.advance(Duration::from_secs(7100)).await;
        h.controller_pass().await;
        assert!(h
            .ops_of(&suspended, OperationKind::DeleteSandbox)
            .await
            .is_empty());

        h.advance(Duration::from_secs(120)).await;
        h.controller_pass().await;
        let del = h.ops_of(&suspended, OperationKind::DeleteSandbox).await;
        assert_eq!(del.len(), 1);
        h.succeeds(&del[0]).await;
        // Only suspended sandboxes are judged by it.
        for id in [&paused, &running] {
            assert!(h.ops_of(id, OperationKind::DeleteSandbox).await.is_empty());
        }
        assert_eq!(h.state(&paused).await, SandboxState::Paused);
        assert_eq!(h.state(&running).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn capabilities_state_the_retention() {
    as_system(async {
        let h = harness().await;
        let r = h.cp.capabilities().retention;
        assert_eq!(
            (r.operations_s, r.events_s, r.commands_s, r.snapshots_s),
            (Some(3600), Some(3600), Some(600), Some(7200))
        );
        let defaults = Retention::default().info();
        assert_eq!(
            defaults.snapshots_s, None,
            "suspended sandboxes are kept by default"
        );
        assert_eq!(defaults.commands_s, Some(86_400));
    })
    .await;
}
