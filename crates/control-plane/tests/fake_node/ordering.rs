//! Calls on one sandbox run one at a time in the order they were acknowledged.

use cove_api_types::SandboxState;
use cove_control_plane::LifecycleVerb::*;
use cove_test_support::{Call, Fault};

use crate::harness::as_system;
use crate::harness::Harness;

#[tokio::test]
async fn calls_run_in_the_order_they_were_acknowledged() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.node.inject(Call::Pause, Fault::hang());
        let mut ops = vec![h.call(&id, Pause).await.expect("pause")];
        h.node.wait_for_calls(Call::Pause, 1).await;
        // While the first pause hangs, the sandbox is still running: all of these are accepted.
        for verb in [Resume, Pause, Suspend, Wake] {
            ops.push(h.call(&id, verb).await.expect("accepted"));
        }
        assert_eq!(h.node.lifecycle_calls(&id), vec![Call::Start, Call::Pause]);
        h.node.release(Call::Pause);
        for op in &ops {
            h.succeeds(op).await;
        }
        assert_eq!(
            h.node.lifecycle_calls(&id),
            vec![
                Call::Start,
                Call::Pause,
                Call::Resume,
                Call::Pause,
                Call::Suspend,
                Call::Wake
            ]
        );
        assert_eq!(h.state(&id).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn five_concurrent_resumes_resume_once() {
    as_system(async {
        let h = Harness::new().await;
        let id = h.running().await;
        h.apply(&id, Pause).await;
        h.node.inject(Call::Resume, Fault::hang());
        let mut ops = Vec::new();
        for _ in 0..5 {
            ops.push(h.call(&id, Resume).await.expect("resume"));
        }
        h.node.wait_for_calls(Call::Resume, 1).await;
        h.node.release(Call::Resume);
        for op in &ops {
            h.succeeds(op).await;
        }
        assert_eq!(h.node.count_on(Call::Resume, &id), 1);
        assert_eq!(h.state(&id).await, SandboxState::Running);
    })
    .await;
}

#[tokio::test]
async fn sandboxes_do_not_wait_for_each_other() {
    as_system(async {
        let h = Harness::new().await;
        let a = h.running().await;
        let b = h.running().await;
        h.node.inject(Call::Pause, Fault::hang().on(&a));
        let pause_a = h.call(&a, Pause).await.expect("pause a");
        h.node.wait_for_calls(Call::Pause, 1).await;
        h.apply(&b, Pause).await;
        assert_eq!(h.state(&b).await, SandboxState::Paused);
        assert_eq!(h.state(&a).await, SandboxState::Running);
        h.node.release(Call::Pause);
        h.succeeds(&pause_a).await;
    })
    .await;
}
