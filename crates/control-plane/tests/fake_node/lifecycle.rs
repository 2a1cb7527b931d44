//! Pause, resume, suspend and wake: each moves the sandbox and the node; a call for the state
//! the sandbox is already in is a no-op; an illegal one is `invalid_state`.

use bytes::Bytes;
use cove_api_types::{ErrorCode, EventType, OperationKind, SandboxState};
use cove_control_plane::{LifecycleVerb, ReadOptions, SandboxPath, ServiceError, WriteOptions};
use cove_node_api::{NodeCapabilities, NodeError, NodeSandboxState};
use cove_test_support::{Call, FakeNode, Fault, Script};
use futures::StreamExt;

use crate::harness::as_system;
use crate::harness::{code, Harness};
use LifecycleVerb::*;

#[tokio::test]
async fn pause_freezes_and_resume_thaws() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        let op = h.call(&id, Pause).await.expect("pause");
        assert_eq!(op.kind, OperationKind::PauseSandbox);
        h.succeeds(&op).await;
        assert_eq!(h.state(&id).await, SandboxState::Paused);
        assert_eq!(h.node.state_of(&id), Some(NodeSandboxState::Paused));
        // A paused sandbox serves no commands.
        let cmd = h.cp.create_command(&id, Default::default()).await;
        assert_eq!(code(cmd), ErrorCode::SandboxNotRunning);

        h.apply(&id, Resume).await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
        assert_eq!(h.node.state_of(&id), Some(NodeSandboxState::Running));
        assert_eq!(
            h.events(&id).await,
            vec![
                EventType::SandboxCreated,
                EventType::SandboxRunning,
                EventType::SandboxPaused,
                EventType::SandboxResumed
            ]
        );
    })
    .await;
}

async fn write(h: &Harness, id: &str, path: &str, data: &'static [u8]) {
    let q = SandboxPath(path.as_bytes().to_vec());
    let body = futures::stream::iter([Ok(Bytes::from_static(data))]).boxed();
    h.cp.write_file(id, q, None, WriteOptions::default(), None, body)
        .await
        .expect("write");
}

async fn read(h: &Harness, id: &str, path: &str) -> Vec<u8> {
    let q = SandboxPath(path.as_bytes().to_vec());
    let (_, mut body) =
        h.cp.read_file(id, q, None, ReadOptions::default())
            .await
            .expect("read");
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.expect("chunk"));
    }
    out
}

#[tokio::test]
async fn suspend_saves_the_files_and_wake_restores_them_without_memory() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        write(&h, &id, "/home/user/notes.txt", b"kept").await;
        h.node.script("sleep 100", Script::running());
        let cmd =
            h.cp.create_command(
                &id,
                cove_api_types::CreateCommandRequest {
                    shell: Some("sleep 100".into()),
                    ..Default::default()
                },
            )
            .await
            .expect("command");

        h.apply(&id, Suspend).await;
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        assert_eq!(h.node.state_of(&id), None, "node resources released");
        assert!(h.node.snapshot_exists(&id));

        h.apply(&id, Wake).await;
        let s = h.sandbox(&id).await;
        assert_eq!(s.state, SandboxState::Running);
        assert_eq!(s.memory_restored, Some(false));
        assert!(
            !h.node.snapshot_exists(&id),
            "a woken sandbox drops its snapshot"
        );
        assert_eq!(read(&h, &id, "/home/user/notes.txt").await, b"kept");
        // Commands do not survive a suspend without memory.
        let gone = h.cp.get_command(&id, &cmd.command.id, None).await;
        assert_eq!(code(gone), ErrorCode::CommandNotFound);
        let launch = h.node.launch_of(&id).expect("woken");
        assert_eq!(launch.resources, s.resources);
        assert_eq!(
            h.node.lifecycle_calls(&id),
            vec![Call::Start, Call::Suspend, Call::Wake]
        );
        let events = h.events(&id).await;
        assert_eq!(
            events[2..],
            [EventType::SandboxSuspended, EventType::SandboxWoken]
        );
    })
    .await;
}

#[tokio::test]
async fn wake_reports_restored_memory_when_the_runtime_saves_it() {
    as_system(async {
        let node = FakeNode::with_capabilities(NodeCapabilities {
            runtime: "fake-vm".into(),
            boundary: "vm".into(),
            pause: true,
            suspend_memory: true,
            snapshot_store: "file".into(),
            network: false,
            user_namespaces: false,
            volumes: false,
            attach_volumes: false,
        });
        let h = Harness::with(node, |_| {}).await;
        assert!(h.cp.capabilities().suspend_memory);
        let id = h.running().await;
        h.apply(&id, Suspend).await;
        h.apply(&id, Wake).await;
        assert_eq!(h.sandbox(&id).await.memory_restored, Some(true));
    })
    .await;
}

#[tokio::test]
async fn suspend_of_a_paused_sandbox_and_wake_end_running() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Pause).await;
        h.apply(&id, Suspend).await;
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        h.apply(&id, Wake).await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn a_call_for_the_state_the_sandbox_is_in_succeeds_without_a_node_call() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Resume).await;
        h.apply(&id, Wake).await;
        h.apply(&id, Pause).await;
        h.apply(&id, Pause).await;
        h.apply(&id, Suspend).await;
        h.apply(&id, Suspend).await;
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
        assert_eq!(
            h.node.lifecycle_calls(&id),
            vec![Call::Start, Call::Pause, Call::Suspend]
        );
    })
    .await;
}

/// One sandbox in each state, made through the services (hung node calls hold the
/// in-between states).
async fn one_in_each_state(h: &Harness) -> Vec<(SandboxState, String)> {
    let mut out = Vec::new();
    let running = h.running().await;
    out.push((SandboxState::Running, running));

    let paused = h.running().await;
    h.apply(&paused, Pause).await;
    out.push((SandboxState::Paused, paused));

    let suspended = h.running().await;
    h.apply(&suspended, Suspend).await;
    out.push((SandboxState::Suspended, suspended));

    h.node
        .inject(Call::Start, Fault::fail(NodeError::Runtime("no".into())));
    let (failed, op) = h.create_with(Default::default()).await;
    h.settle(&op.id).await;
    out.push((SandboxState::Failed, failed.id));

    h.node.inject(Call::Start, Fault::hang());
    let (creating, _) = h.create_with(Default::default()).await;
    h.node.wait_for_calls(Call::Start, 5).await;
    out.push((SandboxState::Creating, creating.id));

    let suspending = h.running().await;
    h.node.inject(Call::Suspend, Fault::hang());
    h.call(&suspending, Suspend).await.expect("suspend");
    h.node.wait_for_calls(Call::Suspend, 2).await;
    out.push((SandboxState::Suspending, suspending));

    let waking = h.running().await;
    h.apply(&waking, Suspend).await;
    h.node.inject(Call::Wake, Fault::hang());
    h.call(&waking, Wake).await.expect("wake");
    h.node.wait_for_calls(Call::Wake, 1).await;
    out.push((SandboxState::Waking, waking));

    let deleting = h.running().await;
    h.node.inject(Call::Destroy, Fault::hang());
    h.cp.delete_sandbox(&deleting, None).await.expect("delete");
    h.node.wait_for_calls(Call::Destroy, 2).await;
    out.push((SandboxState::Deleting, deleting));

    for (state, id) in &out {
        assert_eq!(h.state(id).await, *state, "setup of {state:?}");
    }
    out
}

#[tokio::test]
async fn every_illegal_call_is_invalid_state_and_changes_nothing() {
    as_system(async {
        use SandboxState as S;
        let h = Harness::new().await;
        let sandboxes = one_in_each_state(&h).await;
        // The verbs each state accepts (a no-op included); DESIGN.md §2.
        let legal = |verb: LifecycleVerb, state: S| match verb {
            Pause => matches!(state, S::Running | S::Paused),
            Resume => matches!(state, S::Running | S::Paused),
            Suspend => matches!(state, S::Running | S::Paused | S::Suspending | S::Suspended),
            // `wake` is the one verb for every resting state: paused too.
            Wake => matches!(state, S::Running | S::Paused | S::Suspended | S::Waking),
        };
        let mut refused = 0;
        for (state, id) in &sandboxes {
            let ops_before =
                h.cp.operations()
                    .list(Some(id), None)
                    .await
                    .expect("ops")
                    .len();
            for verb in [Pause, Resume, Suspend, Wake] {
                if legal(verb, *state) {
                    continue;
                }
                match h.call(id, verb).await {
                    Err(ServiceError::InvalidState { from, .. }) => assert_eq!(from, *state),
                    other => panic!("{verb:?} of a {state:?} sandbox: {other:?}"),
                }
                refused += 1;
            }
            assert_eq!(h.state(id).await, *state);
            let ops_after =
                h.cp.operations()
                    .list(Some(id), None)
                    .await
                    .expect("ops")
                    .len();
            assert_eq!(
                ops_before, ops_after,
                "no operation recorded for a refused call"
            );
        }
        assert_eq!(refused, 32 - 12);
        // A deleted sandbox is gone for lifecycle calls.
        let id = h.running().await;
        let del = h.cp.delete_sandbox(&id, None).await.expect("delete");
        h.succeeds(&del).await;
        assert_eq!(code(h.call(&id, Resume).await), ErrorCode::SandboxNotFound);
    })
    .await;
}

#[tokio::test]
async fn calls_are_checked_at_the_door_while_a_suspend_runs() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        // Suspend is accepted on a running sandbox; a pause queued behind it finds it suspended.
        h.node.inject(Call::Suspend, Fault::hang());
        let suspend = h.call(&id, Suspend).await.expect("suspend");
        h.node.wait_for_calls(Call::Suspend, 1).await;
        let pause = h.call(&id, Pause);
        // `suspending` does not accept a pause at the door.
        assert_eq!(code(pause.await), ErrorCode::InvalidState);
        h.node.release(Call::Suspend);
        h.succeeds(&suspend).await;
        assert_eq!(h.state(&id).await, SandboxState::Suspended);
    })
    .await;
}
