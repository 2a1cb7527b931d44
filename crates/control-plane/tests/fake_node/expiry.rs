//! Sandbox expiry in paused time: a sandbox is deleted or suspended when its `expires_at`
//! passes, with the reason recorded; a live sandbox's expiry is set, extended and cleared; the
//! expiry survives a restart; two replicas on one store act on one expiry once.

use std::time::Duration;

use chrono::Duration as ChronoDuration;
use cove_api_types::{
    CreateSandboxRequest, ErrorCode, EventType, OnExpiry, OperationKind, SandboxState,
    SetExpiryRequest,
};
use cove_control_plane::{Expiry, LifecycleVerb::*};
use cove_test_support::FakeNode;

use crate::harness::as_system;
use crate::harness::{code, Harness};

const SECOND: Duration = Duration::from_secs(1);

async fn harness() -> Harness {
    Harness::with(FakeNode::new(), |cfg| cfg.controller_interval = SECOND).await
}

fn in_s(secs: u64, on_expiry: Option<OnExpiry>) -> SetExpiryRequest {
    SetExpiryRequest {
        in_s: Some(secs),
        on_expiry,
        ..Default::default()
    }
}

/// The operations of `kind` on sandbox `id`, each waited for.
async fn settled_ops(h: &Harness, id: &str, kind: OperationKind) -> usize {
    let ops = h.ops_of(id, kind).await;
    for op in &ops {
        h.succeeds(op).await;
    }
    ops.len()
}

#[tokio::test]
async fn an_expiry_suspends_or_deletes_and_says_why() {
    as_system(async {
        let h = harness().await;
        let now = h.cfg.clock.now();
        let suspend = CreateSandboxRequest {
            expires_at: Some(now + ChronoDuration::seconds(30)),
            on_expiry: Some(OnExpiry::Suspend),
            ..Default::default()
        };
        let running = h.running_with(suspend.clone()).await;
        let paused = h.running_with(suspend).await;
        h.apply(&paused, Pause).await;
        let deleted = h
            .running_with(CreateSandboxRequest {
                expires_at: Some(now + ChronoDuration::seconds(30)),
                ..Default::default()
            })
            .await;
        let s = h.sandbox(&running).await;
        assert_eq!(s.expires_at, Some(now + ChronoDuration::seconds(30)));
        assert_eq!(s.on_expiry, OnExpiry::Suspend);

        h.advance(20 * SECOND).await;
        h.controller_pass().await;
        for id in [&running, &paused, &deleted] {
            assert_eq!(settled_ops(&h, id, OperationKind::SuspendSandbox).await, 0);
            assert_eq!(settled_ops(&h, id, OperationKind::DeleteSandbox).await, 0);
        }

        h.advance(10 * SECOND).await;
        h.controller_pass().await;
        for id in [&running, &paused] {
            assert_eq!(settled_ops(&h, id, OperationKind::SuspendSandbox).await, 1);
            let s = h.sandbox(id).await;
            assert_eq!(s.state, SandboxState::Suspended);
            // A suspend by expiry leaves no expiry behind: it stays suspended.
            assert_eq!(s.expires_at, None);
            assert_eq!(
                h.event_log(id).await.last(),
                Some(&(EventType::SandboxSuspended, Some("expired".to_string())))
            );
        }
        assert_eq!(
            settled_ops(&h, &deleted, OperationKind::DeleteSandbox).await,
            1
        );
        assert_eq!(h.state(&deleted).await, SandboxState::Deleted);
        assert_eq!(
            h.event_log(&deleted).await.last(),
            Some(&(EventType::SandboxDeleted, Some("expired".to_string())))
        );

        // Later passes do nothing more.
        h.advance(60 * SECOND).await;
        h.controller_pass().await;
        assert_eq!(
            settled_ops(&h, &running, OperationKind::SuspendSandbox).await,
            1
        );
    })
    .await;
}

#[tokio::test]
async fn a_live_sandboxes_expiry_is_set_moved_and_cleared() {
    as_system(async {
        let h = harness().await;
        let id = h.running().await;
        assert_eq!(h.sandbox(&id).await.expires_at, None);

        let s = h.cp.set_expiry(&id, in_s(60, None)).await.expect("set");
        assert_eq!(
            s.expires_at,
            Some(h.cfg.clock.now() + ChronoDuration::seconds(60))
        );
        assert_eq!(s.on_expiry, OnExpiry::Delete);
        // Set may shorten; extend only lengthens.
        h.cp.set_expiry(&id, in_s(10, Some(OnExpiry::Suspend)))
            .await
            .expect("shorten");
        h.cp.extend_expiry(&id, 5, OnExpiry::Suspend)
            .await
            .expect("extend");
        let s = h.sandbox(&id).await;
        assert_eq!(
            s.expires_at,
            Some(h.cfg.clock.now() + ChronoDuration::seconds(10))
        );
        assert_eq!(s.on_expiry, OnExpiry::Suspend);
        h.cp.extend_expiry(&id, 40, OnExpiry::Suspend)
            .await
            .expect("extend");

        h.advance(30 * SECOND).await;
        h.controller_pass().await;
        assert_eq!(settled_ops(&h, &id, OperationKind::SuspendSandbox).await, 0);
        h.advance(15 * SECOND).await;
        h.controller_pass().await;
        assert_eq!(settled_ops(&h, &id, OperationKind::SuspendSandbox).await, 1);

        // A cleared expiry does nothing.
        h.apply(&id, Wake).await;
        h.cp.set_expiry(&id, in_s(5, Some(OnExpiry::Delete)))
            .await
            .expect("set");
        let s = h.cp.clear_expiry(&id).await.expect("clear");
        assert_eq!(s.expires_at, None);
        h.advance(30 * SECOND).await;
        h.controller_pass().await;
        assert_eq!(h.state(&id).await, SandboxState::Running);

        // Exactly one of `expires_at` and `in_s`; bounds; unknown sandboxes.
        let both = SetExpiryRequest {
            expires_at: Some(h.cfg.clock.now()),
            in_s: Some(5),
            on_expiry: None,
        };
        for bad in [both, SetExpiryRequest::default(), in_s(315_360_001, None)] {
            assert_eq!(
                code(h.cp.set_expiry(&id, bad).await),
                ErrorCode::InvalidArgument
            );
        }
        assert_eq!(
            code(h.cp.set_expiry("sb-0000000000000000", in_s(5, None)).await),
            ErrorCode::SandboxNotFound
        );
    })
    .await;
}

#[tokio::test]
async fn an_expiry_outlives_a_restart() {
    as_system(async {
        let mut h = harness().await;
        let id = h
            .running_with(CreateSandboxRequest {
                ttl_s: Some(120),
                ..Default::default()
            })
            .await;
        h.advance(60 * SECOND).await;
        h.restart();
        h.controller_pass().await;
        assert_eq!(h.state(&id).await, SandboxState::Running);
        h.advance(60 * SECOND).await;
        h.restart();
        h.controller_pass().await;
        assert_eq!(settled_ops(&h, &id, OperationKind::DeleteSandbox).await, 1);
        assert_eq!(h.sandbox(&id).await.state_reason.as_deref(), Some("ttl"));
    })
    .await;
}

#[tokio::test]
async fn two_replicas_act_on_one_expiry_once() {
    as_system(async {
        let h = harness().await;
        let other = h.replica();
        let mut ids = Vec::new();
        // Two of each (six in all, as many as the store's pool serves at once in paused time).
        for on_expiry in [OnExpiry::Delete, OnExpiry::Suspend, OnExpiry::Pause] {
            for _ in 0..2 {
                let id = h.running().await;
                // Set through the other replica: both read it from the store.
                other
                    .set_expiry(&id, in_s(10, Some(on_expiry)))
                    .await
                    .expect("set");
                ids.push((id, on_expiry));
            }
        }
        h.advance(11 * SECOND).await;
        // Both passes run at the same instant, racing for every expiry.
        let loops = [Expiry::start(h.cp.clone()), Expiry::start(other.clone())];
        h.advance(Duration::ZERO).await;
        h.advance(SECOND).await;
        for l in loops {
            l.stop().await;
        }
        for (id, on_expiry) in &ids {
            let (kind, state) = match on_expiry {
                OnExpiry::Delete => (OperationKind::DeleteSandbox, SandboxState::Deleted),
                OnExpiry::Suspend => (OperationKind::SuspendSandbox, SandboxState::Suspended),
                OnExpiry::Pause => (OperationKind::PauseSandbox, SandboxState::Paused),
            };
            assert_eq!(settled_ops(&h, id, kind).await, 1, "{id}");
            assert_eq!(h.state(id).await, state, "{id}");
        }
    })
    .await;
}
