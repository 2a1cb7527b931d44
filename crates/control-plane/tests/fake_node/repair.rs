//! The repair controller (`repair.rs`): a sandbox whose guest agent died or hangs goes
//! `degraded` with the reason, is repaired by the node and runs again; repeated failed repairs
//! end it `failed` with a reason; healthy, paused and busy sandboxes are left alone.

use std::time::Duration;

use cove_api_types::{CreateCommandRequest, ErrorCode, EventType, SandboxState};
use cove_control_plane::LifecycleVerb::*;
use cove_node_api::{NodeError, NodeSandboxState};
use cove_test_support::{Call, FakeNode, Fault, Script};

use crate::harness::as_system;
use crate::harness::{code, Harness};

async fn harness() -> Harness {
    Harness::with(FakeNode::new(), |cfg| {
        cfg.agent_repair.max_attempts = 2;
    })
    .await
}

fn sleeper() -> CreateCommandRequest {
    CreateCommandRequest {
        argv: Some(vec!["sleep".into(), "100".into()]),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_dead_agent_is_reported_degraded_then_repaired() {
    as_system(async {
        let h = harness().await;
        let id = h.running().await;
        let healthy = h.running().await;
        h.node.script("sleep 100", Script::running());
        let cmd = h.cp.create_command(&id, sleeper()).await.expect("spawn");

        // The agent hangs: two missed pings are tolerated (a busy agent), the third degrades the
        // sandbox, then it is repaired.
        h.node.inject(Call::Repair, Fault::hang().on(&id));
        h.node.hang_agent(&id);
        for _ in 0..2 {
            h.cp.repair_pass().await.expect("pass");
            assert_eq!(h.state(&id).await, SandboxState::Running);
        }
        let cp = h.cp.clone();
        let pass = tokio::spawn(async move { cp.repair_pass().await });
        h.node.wait_for_calls(Call::Repair, 1).await;
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Degraded);
        let why = "the guest agent did not answer a ping in time (3 checks in a row)";
        assert_eq!(s.state_reason.as_deref(), Some(why));
        // Commands and files wait for the repair: the sandbox does not serve them.
        assert_eq!(
            code(h.cp.create_command(&id, sleeper()).await),
            ErrorCode::SandboxNotRunning
        );
        h.node.release(Call::Repair);
        pass.await.expect("join").expect("pass");

        assert_eq!(h.state(&id).await, SandboxState::Running);
        assert_eq!(h.state(&healthy).await, SandboxState::Running);
        let log = h.event_log(&id).await;
        let n = log.len();
        assert_eq!(log[n - 2].0, EventType::SandboxDegraded);
        assert_eq!(log[n - 2].1.as_deref(), Some(why));
        assert_eq!(log[n - 1].0, EventType::SandboxRepaired);
        assert_eq!(h.node.count_on(Call::Repair, &healthy), 0);
        // The command that ran ended with the agent: asking for it says why.
        let err =
            h.cp.get_command(&id, &cmd.command.id, None)
                .await
                .expect_err("gone");
        assert_eq!(err.code(), ErrorCode::GuestRestarted, "{err:?}");
        assert!(err.to_string().contains("did not answer a ping"), "{err}");
        // New commands run.
        h.node.script("echo hi", Script::exit(0).stdout("hi\n"));
        let req = CreateCommandRequest {
            argv: Some(vec!["echo".into(), "hi".into()]),
            ..Default::default()
        };
        h.cp.create_command(&id, req).await.expect("runs again");
    })
    .await;
}

#[tokio::test]
async fn an_exited_init_is_repaired_and_not_failed_by_reconciliation() {
    as_system(async {
        let h = Harness::with(FakeNode::new(), |cfg| {
            cfg.agent_repair.interval = Duration::from_secs(1);
            cfg.controller_interval = Duration::from_secs(1);
            cfg.reconcile_interval = Duration::from_secs(1);
        })
        .await;
        let id = h.running().await;
        h.node.set_state(&id, NodeSandboxState::Stopped);
        let controller = cove_control_plane::Controller::start(h.cp.clone());
        h.advance(Duration::ZERO).await;
        for _ in 0..3 {
            h.advance(Duration::from_secs(1)).await;
        }
        controller.stop().await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
        let events = h.events(&id).await;
        assert!(events.contains(&EventType::SandboxDegraded), "{events:?}");
        assert!(events.contains(&EventType::SandboxRepaired), "{events:?}");
        assert!(!events.contains(&EventType::SandboxFailed), "{events:?}");
        assert_eq!(h.node.state_of(&id), Some(NodeSandboxState::Running));
    })
    .await;
}

#[tokio::test]
async fn repeated_failed_repairs_end_failed_with_a_reason() {
    as_system(async {
        let h = harness().await;
        let id = h.running().await;
        h.node.set_state(&id, NodeSandboxState::Stopped);
        h.node.inject(
            Call::Repair,
            Fault::fail(NodeError::Runtime("runc create: host detail".into())).always(),
        );

        h.cp.repair_pass().await.expect("pass 1");
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Degraded);
        assert_eq!(
            s.state_reason.as_deref(),
            Some("the guest agent (the sandbox's init) exited")
        );
        h.cp.repair_pass().await.expect("pass 2");
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Failed);
        let why = s.state_reason.unwrap_or_default();
        assert!(why.starts_with("repair failed 2 times"), "{why}");
        assert!(!why.contains("host detail"), "no node detail leaks: {why}");
        assert_eq!(h.node.count_on(Call::Repair, &id), 2);
        assert_eq!(h.events(&id).await.last(), Some(&EventType::SandboxFailed));
        // A failed sandbox is deleted as usual.
        let op = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.succeeds(&op).await;
    })
    .await;
}

#[tokio::test]
async fn a_degraded_sandbox_can_be_deleted_and_paused_ones_are_not_checked() {
    as_system(async {
        let h = harness().await;
        let id = h.running().await;
        let paused = h.running().await;
        h.apply(&paused, Pause).await;
        h.node.set_state(&id, NodeSandboxState::Stopped);
        h.node.inject(
            Call::Repair,
            Fault::fail(NodeError::Runtime("busy".into())).on(&id),
        );
        h.cp.repair_pass().await.expect("pass");
        assert_eq!(h.state(&id).await, SandboxState::Degraded);
        assert_eq!(h.node.count_on(Call::CheckAgent, &paused), 0);
        let op = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.succeeds(&op).await;
        assert_eq!(h.state(&id).await, SandboxState::Deleted);
        assert_eq!(h.state(&paused).await, SandboxState::Paused);
    })
    .await;
}
