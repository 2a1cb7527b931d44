//! Transitions with events, the state left behind, activity and wake results.

use std::sync::Arc;

use chrono::Duration;
use cove_api_types::{EventType, SandboxState};
use cove_store::{NewEvent, Store, StoreError};

use crate::fixtures::{now, sandbox};

pub fn event(kind: EventType) -> NewEvent {
    NewEvent {
        kind,
        operation_id: Some("op-1".into()),
        reason: None,
        destination: None,
        host: None,
        port: None,
        rule: None,
    }
}

pub async fn transitions_record_events_and_remember_the_state_left(store: Arc<dyn Store>) {
    store
        .insert_sandbox(&sandbox("sb-1"))
        .await
        .expect("insert");
    assert_eq!(store.prior_state("sb-1").await.expect("prior"), None);
    let moved = store
        .transition_with_event(
            "sb-1",
            &[SandboxState::Running],
            SandboxState::Paused,
            None,
            Some(&event(EventType::SandboxPaused)),
        )
        .await
        .expect("pause");
    assert!(moved);
    assert_eq!(
        store.prior_state("sb-1").await.expect("prior"),
        None,
        "pausing is not remembered"
    );
    store
        .transition_with_event(
            "sb-1",
            &[SandboxState::Running, SandboxState::Paused],
            SandboxState::Suspending,
            None,
            None,
        )
        .await
        .expect("suspending");
    assert_eq!(
        store.prior_state("sb-1").await.expect("prior"),
        Some(SandboxState::Paused)
    );
    let suspended = NewEvent {
        reason: Some("idle".into()),
        ..event(EventType::SandboxSuspended)
    };
    store
        .transition_with_event(
            "sb-1",
            &[SandboxState::Suspending],
            SandboxState::Suspended,
            Some("idle"),
            Some(&suspended),
        )
        .await
        .expect("suspended");
    let s = store.get_sandbox("sb-1").await.expect("get");
    assert_eq!(
        (s.state, s.state_reason.as_deref()),
        (SandboxState::Suspended, Some("idle"))
    );
    assert_eq!((s.idle_timeout_s, s.ttl_s), (2, Some(60)));
    assert_eq!(
        store.prior_state("sb-1").await.expect("prior"),
        Some(SandboxState::Paused),
        "leaving `suspending` keeps what it left"
    );
    store
        .transition_with_event(
            "sb-1",
            &[SandboxState::Suspended],
            SandboxState::Deleting,
            None,
            None,
        )
        .await
        .expect("deleting");
    assert_eq!(
        store.prior_state("sb-1").await.expect("prior"),
        Some(SandboxState::Suspended)
    );

    let events = store.events_after(None, 0, 10).await.expect("events");
    let got: Vec<(EventType, &str, Option<&str>, Option<&str>)> = events
        .iter()
        .map(|e| {
            (
                e.kind,
                e.sandbox_id.as_str(),
                e.operation_id.as_deref(),
                e.reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (EventType::SandboxPaused, "sb-1", Some("op-1"), None),
            (
                EventType::SandboxSuspended,
                "sb-1",
                Some("op-1"),
                Some("idle")
            ),
        ]
    );
    assert_eq!(events[1].seq, events[0].seq + 1);
    assert!(events[0].time <= events[1].time);
    assert!(matches!(
        store.prior_state("sb-none").await,
        Err(StoreError::NotFound)
    ));
}

pub async fn a_transition_that_does_not_happen_records_nothing(store: Arc<dyn Store>) {
    store
        .insert_sandbox(&sandbox("sb-1"))
        .await
        .expect("insert");
    let before = store.get_sandbox("sb-1").await.expect("get");
    for (id, from) in [
        ("sb-1", SandboxState::Paused),
        ("sb-x", SandboxState::Running),
    ] {
        let moved = store
            .transition_with_event(
                id,
                &[from],
                SandboxState::Suspending,
                Some("no"),
                Some(&event(EventType::SandboxFailed)),
            )
            .await
            .expect("stale");
        assert!(!moved);
    }
    assert_eq!(store.get_sandbox("sb-1").await.expect("get"), before);
    assert_eq!(store.prior_state("sb-1").await.expect("prior"), None);
    assert!(store
        .events_after(None, 0, 10)
        .await
        .expect("events")
        .is_empty());
}

pub async fn activity_only_moves_forward(store: Arc<dyn Store>) {
    let fresh = cove_api_types::Sandbox {
        last_activity_at: None,
        ..sandbox("sb-1")
    };
    store.insert_sandbox(&fresh).await.expect("insert");
    store
        .insert_sandbox(&sandbox("sb-2"))
        .await
        .expect("insert");
    store.record_activity(&[]).await.expect("nothing to write");
    let t1 = now();
    let t2 = t1 + Duration::seconds(5);
    store
        .record_activity(&[
            ("sb-1".to_string(), t1),
            ("sb-none".to_string(), t1),
            ("sb-2".to_string(), t2),
        ])
        .await
        .expect("activity");
    let older = t1 - Duration::seconds(10);
    store
        .record_activity(&[("sb-2".to_string(), older), ("sb-1".to_string(), older)])
        .await
        .expect("older ignored");
    assert_eq!(
        store
            .get_sandbox("sb-1")
            .await
            .expect("get")
            .last_activity_at,
        Some(t1)
    );
    assert_eq!(
        store
            .get_sandbox("sb-2")
            .await
            .expect("get")
            .last_activity_at,
        Some(t2)
    );
    store
        .record_activity(&[("sb-1".to_string(), t2)])
        .await
        .expect("newer");
    assert_eq!(
        store
            .get_sandbox("sb-1")
            .await
            .expect("get")
            .last_activity_at,
        Some(t2)
    );
}

pub async fn memory_restored_is_recorded(store: Arc<dyn Store>) {
    let s = cove_api_types::Sandbox {
        memory_restored: None,
        ..sandbox("sb-1")
    };
    store.insert_sandbox(&s).await.expect("insert");
    assert_eq!(
        store
            .get_sandbox("sb-1")
            .await
            .expect("get")
            .memory_restored,
        None
    );
    store.set_memory_restored("sb-1", false).await.expect("set");
    assert_eq!(
        store
            .get_sandbox("sb-1")
            .await
            .expect("get")
            .memory_restored,
        Some(false)
    );
    store.set_memory_restored("sb-1", true).await.expect("set");
    assert_eq!(
        store
            .get_sandbox("sb-1")
            .await
            .expect("get")
            .memory_restored,
        Some(true)
    );
}
