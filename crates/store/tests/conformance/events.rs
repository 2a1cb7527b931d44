//! The event log: sequence numbers, paging, concurrent writers, and the retention purge.

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{Duration, Utc};
use cove_api_types::{EventType, OperationKind, OperationState, SandboxState};
use cove_store::{OperationUpdate, Store, StoreError};

use crate::fixtures::{operation, sandbox, tick};
use crate::lifecycle::event;

pub async fn event_seqs_are_gap_free_and_never_reused(store: Arc<dyn Store>) {
    let mut seqs = Vec::new();
    for _ in 0..5 {
        seqs.push(
            store
                .record_event("sb-1", &event(EventType::SandboxCreated))
                .await
                .expect("record"),
        );
    }
    for pair in seqs.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{seqs:?}");
    }
    let listed: Vec<u64> = store
        .events_after(None, 0, 100)
        .await
        .expect("events")
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(listed, seqs);

    let purged = store
        .purge_events_before(Utc::now() + Duration::seconds(1))
        .await
        .expect("purge");
    assert_eq!(purged, 5);
    assert!(store
        .events_after(None, 0, 100)
        .await
        .expect("events")
        .is_empty());
    let next = store
        .record_event("sb-1", &event(EventType::SandboxDeleted))
        .await
        .expect("record");
    assert_eq!(next, seqs[4] + 1, "the purge does not reset the counter");
}

/// Four writers (events alone and with transitions) while a reader follows with `after`:
/// the reader must see every seq exactly once, in order, with no gap.
pub async fn concurrent_writers_never_let_a_reader_skip_an_event(store: Arc<dyn Store>) {
    const PER_WRITER: usize = 25;
    for w in 0..2 {
        store
            .insert_sandbox(&sandbox(&format!("sb-{w}")))
            .await
            .expect("insert");
    }
    let mut writers = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                if w < 2 {
                    let id = format!("sb-{w}");
                    let (from, to) = if i % 2 == 0 {
                        (SandboxState::Running, SandboxState::Paused)
                    } else {
                        (SandboxState::Paused, SandboxState::Running)
                    };
                    let moved = store
                        .transition_with_event(
                            &id,
                            &[from],
                            to,
                            None,
                            Some(&event(EventType::SandboxPaused)),
                        )
                        .await
                        .expect("transition");
                    assert!(moved);
                } else {
                    store
                        .record_event(&format!("sb-{w}"), &event(EventType::SandboxCreated))
                        .await
                        .expect("record");
                }
            }
        }));
    }
    let total = 4 * PER_WRITER;
    let mut last = 0u64;
    let mut seen = 0usize;
    let started = Instant::now();
    while seen < total {
        assert!(
            started.elapsed() < StdDuration::from_secs(30),
            "reader saw {seen} of {total} events"
        );
        let page = store.events_after(None, last, 7).await.expect("events");
        for e in &page {
            assert_eq!(
                e.seq,
                last + 1,
                "a reader following with `after` skipped an event"
            );
            last = e.seq;
        }
        seen += page.len();
        if page.is_empty() {
            tokio::time::sleep(StdDuration::from_millis(1)).await;
        }
    }
    for w in writers {
        w.await.expect("writer");
    }
    assert!(store
        .events_after(None, last, 10)
        .await
        .expect("events")
        .is_empty());
}

pub async fn events_after_pages_by_seq(store: Arc<dyn Store>) {
    let mut seqs = Vec::new();
    for i in 0..7 {
        let ev = cove_store::NewEvent {
            kind: EventType::SandboxRunning,
            operation_id: None,
            reason: Some(format!("r{i}")),
            destination: None,
            host: None,
            port: None,
            rule: None,
        };
        seqs.push(store.record_event("sb-1", &ev).await.expect("record"));
    }
    let page = store.events_after(None, seqs[1], 3).await.expect("page");
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), &seqs[2..5]);
    assert_eq!(page[0].reason.as_deref(), Some("r2"));
    assert_eq!(page[0].operation_id, None);
    assert_eq!(page[0].kind, EventType::SandboxRunning);
    assert!(store
        .events_after(None, seqs[6], 3)
        .await
        .expect("end")
        .is_empty());
}

pub async fn purge_keeps_unfinished_operations_and_newer_rows(store: Arc<dyn Store>) {
    for id in ["op-done", "op-failed", "op-running", "op-pending"] {
        store
            .insert_operation(&operation(id, OperationKind::PauseSandbox, "sb-1"))
            .await
            .expect("insert");
        store.append_operation_log(id, "line").await.expect("log");
    }
    let set = |state| OperationUpdate {
        state: Some(state),
        ..Default::default()
    };
    for (id, state) in [
        ("op-done", OperationState::Succeeded),
        ("op-failed", OperationState::Failed),
        ("op-running", OperationState::Running),
    ] {
        store
            .update_operation(id, &set(state))
            .await
            .expect("update");
    }
    store
        .record_event("sb-1", &event(EventType::SandboxCreated))
        .await
        .expect("event");

    // A cut-off before everything removes nothing.
    let hour_ago = Utc::now() - Duration::hours(1);
    let early = (
        store
            .purge_operations_before(hour_ago)
            .await
            .expect("purge"),
        store.purge_events_before(hour_ago).await.expect("purge"),
    );
    assert_eq!(early, (0, 0));

    tick().await;
    let cut = Utc::now();
    tick().await;
    store
        .insert_operation(&operation("op-late", OperationKind::PauseSandbox, "sb-2"))
        .await
        .expect("insert");
    store
        .update_operation("op-late", &set(OperationState::Succeeded))
        .await
        .expect("update");
    let late_seq = store
        .record_event("sb-2", &event(EventType::SandboxCreated))
        .await
        .expect("event");

    // Each class has its own cut-off: events first, with one before everything.
    assert_eq!(store.purge_events_before(hour_ago).await.expect("purge"), 0);
    assert_eq!(store.purge_operations_before(cut).await.expect("purge"), 2);
    assert_eq!(
        store.events_after(None, 0, 10).await.expect("events").len(),
        2,
        "an operations purge leaves events"
    );
    assert_eq!(store.purge_events_before(cut).await.expect("purge"), 1);
    for gone in ["op-done", "op-failed"] {
        assert!(matches!(
            store.get_operation(gone).await,
            Err(StoreError::NotFound)
        ));
        assert!(store
            .operation_logs(gone, 0, 10)
            .await
            .expect("logs")
            .is_empty());
    }
    for kept in ["op-running", "op-pending", "op-late"] {
        store.get_operation(kept).await.expect("kept");
    }
    assert_eq!(
        store
            .operation_logs("op-running", 0, 10)
            .await
            .expect("logs")
            .len(),
        1
    );
    let events = store.events_after(None, 0, 10).await.expect("events");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [late_seq]);
}

pub async fn network_denials_carry_their_destination(store: Arc<dyn Store>) {
    let ev = cove_store::NewEvent {
        kind: EventType::NetworkDenied,
        operation_id: None,
        reason: Some("not_allowed".into()),
        destination: Some("b.test (203.0.113.20:80)".into()),
        host: Some("b.test".into()),
        port: Some(80),
        rule: Some("deny b.test".into()),
    };
    let seq = store.record_event("sb-1", &ev).await.expect("record");
    let got = store.events_after(None, seq - 1, 10).await.expect("events");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, EventType::NetworkDenied);
    assert_eq!(got[0].sandbox_id, "sb-1");
    assert_eq!(got[0].reason.as_deref(), Some("not_allowed"));
    assert_eq!(
        got[0].destination.as_deref(),
        Some("b.test (203.0.113.20:80)")
    );
    assert_eq!(
        (got[0].host.as_deref(), got[0].port, got[0].rule.as_deref()),
        (Some("b.test"), Some(80), Some("deny b.test"))
    );
}
