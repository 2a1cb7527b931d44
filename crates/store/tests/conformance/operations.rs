//! Operations: round trip, idempotency keys, final states, listing, logs.

use std::sync::Arc;

use cove_api_types::{ErrorCode, Operation, OperationError, OperationKind, OperationState};
use cove_store::{NewOperation, OperationUpdate, Store, StoreError};

use crate::fixtures::{now, operation, tick};

fn keyed(id: &str, kind: OperationKind, key: &str, hash: &str) -> NewOperation {
    NewOperation {
        org: "default".into(),
        idempotency_key: Some(key.into()),
        request_hash: Some(hash.into()),
        ..operation(id, kind, "sb-1")
    }
}

pub async fn operations_round_trip(store: Arc<dyn Store>) {
    let new = NewOperation {
        org: "default".into(),
        template: Some("tiny".into()),
        release: Some(4),
        ..operation("op-1", OperationKind::BuildRelease, "sb-1")
    };
    let before = now();
    let op = store.insert_operation(&new).await.expect("insert");
    assert_eq!(
        (
            op.id.as_str(),
            op.kind,
            op.state,
            op.sandbox_id.as_deref(),
            op.template.as_deref(),
            op.release,
            op.progress,
            op.error.clone(),
            op.deadline,
        ),
        (
            "op-1",
            OperationKind::BuildRelease,
            OperationState::Pending,
            Some("sb-1"),
            Some("tiny"),
            Some(4),
            None,
            None,
            new.deadline,
        )
    );
    assert!(op.created_at >= before && op.updated_at == op.created_at);
    assert_eq!(store.get_operation("op-1").await.expect("get"), op);
    assert!(matches!(
        store.get_operation("op-x").await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.insert_operation(&new).await,
        Err(StoreError::Conflict(_))
    ));
    let bare = NewOperation {
        org: "default".into(),
        sandbox_id: None,
        ..operation("op-2", OperationKind::CreateSandbox, "")
    };
    let op2 = store.insert_operation(&bare).await.expect("insert bare");
    assert_eq!(
        (op2.sandbox_id, op2.template, op2.release),
        (None, None, None)
    );
}

pub async fn idempotency_keys_are_unique_per_kind(store: Arc<dyn Store>) {
    store
        .insert_operation(&keyed("op-1", OperationKind::CreateSandbox, "k", "h"))
        .await
        .expect("insert");
    assert!(matches!(
        store
            .insert_operation(&keyed("op-2", OperationKind::CreateSandbox, "k", "other"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.get_operation("op-2").await,
        Err(StoreError::NotFound)
    ));
    // The same key on another kind, and operations without a key, do not collide.
    store
        .insert_operation(&keyed("op-3", OperationKind::DeleteSandbox, "k", "h"))
        .await
        .expect("other kind");
    for id in ["op-4", "op-5"] {
        store
            .insert_operation(&operation(id, OperationKind::CreateSandbox, "sb-1"))
            .await
            .expect("no key");
    }
    let (found, hash) = store
        .operation_by_idempotency_key("default", OperationKind::CreateSandbox, "k")
        .await
        .expect("lookup")
        .expect("some");
    assert_eq!((found.id.as_str(), hash.as_deref()), ("op-1", Some("h")));
    let (found, _) = store
        .operation_by_idempotency_key("default", OperationKind::DeleteSandbox, "k")
        .await
        .expect("lookup")
        .expect("some");
    assert_eq!(found.id, "op-3");
    assert!(store
        .operation_by_idempotency_key("default", OperationKind::PauseSandbox, "k")
        .await
        .expect("lookup")
        .is_none());
    assert!(store
        .operation_by_idempotency_key("default", OperationKind::CreateSandbox, "nope")
        .await
        .expect("lookup")
        .is_none());

    // Racing inserts with one key: exactly one wins, the rest conflict.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .insert_operation(&keyed(
                        &format!("race-{i}"),
                        OperationKind::WakeSandbox,
                        "race",
                        "h",
                    ))
                    .await
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => won += 1,
            Err(StoreError::Conflict(_)) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(won, 1);
}

pub async fn final_states_do_not_change(store: Arc<dyn Store>) {
    let op = store
        .insert_operation(&operation("op-1", OperationKind::CreateSandbox, "sb-1"))
        .await
        .expect("insert");
    tick().await;
    let running = store
        .update_operation(
            "op-1",
            &OperationUpdate {
                state: Some(OperationState::Running),
                progress: Some(10),
                error: None,
            },
        )
        .await
        .expect("running");
    assert_eq!(
        (running.state, running.progress),
        (OperationState::Running, Some(10))
    );
    assert!(running.updated_at > op.updated_at);
    let progressed = store
        .update_operation(
            "op-1",
            &OperationUpdate {
                progress: Some(50),
                ..Default::default()
            },
        )
        .await
        .expect("progress");
    assert_eq!(
        (progressed.state, progressed.progress),
        (OperationState::Running, Some(50)),
        "unset fields keep their value"
    );
    let failed = store
        .update_operation(
            "op-1",
            &OperationUpdate {
                state: Some(OperationState::Failed),
                progress: None,
                error: Some(OperationError {
                    code: ErrorCode::DeadlineExceeded,
                    message: "too slow".into(),
                }),
            },
        )
        .await
        .expect("failed");
    assert_eq!(failed.state, OperationState::Failed);
    assert_eq!(
        failed.error,
        Some(OperationError {
            code: ErrorCode::DeadlineExceeded,
            message: "too slow".into(),
        })
    );
    let late = store
        .update_operation(
            "op-1",
            &OperationUpdate {
                state: Some(OperationState::Succeeded),
                progress: Some(100),
                error: None,
            },
        )
        .await
        .expect("late");
    assert_eq!(late, failed, "a final state never changes");
    assert_eq!(store.get_operation("op-1").await.expect("get"), failed);
    assert!(matches!(
        store
            .update_operation("op-x", &OperationUpdate::default())
            .await,
        Err(StoreError::NotFound)
    ));
}

fn ids(ops: Vec<Operation>) -> Vec<String> {
    ops.into_iter().map(|o| o.id).collect()
}

pub async fn operations_are_listed_newest_first(store: Arc<dyn Store>) {
    for (id, sb) in [("op-a", "sb-1"), ("op-b", "sb-2"), ("op-c", "sb-1")] {
        store
            .insert_operation(&operation(id, OperationKind::PauseSandbox, sb))
            .await
            .expect("insert");
        tick().await;
    }
    assert_eq!(
        ids(store
            .list_operations(None, Some("sb-1"), 10)
            .await
            .expect("list")),
        ["op-c", "op-a"]
    );
    assert_eq!(
        ids(store.list_operations(None, None, 2).await.expect("list")),
        ["op-c", "op-b"]
    );
    assert_eq!(
        ids(store.list_operations(None, None, 10).await.expect("list")),
        ["op-c", "op-b", "op-a"]
    );
    assert!(store
        .list_operations(None, Some("sb-x"), 10)
        .await
        .expect("list")
        .is_empty());
}

pub async fn unfinished_operations_are_found(store: Arc<dyn Store>) {
    let set = |state| OperationUpdate {
        state: Some(state),
        ..Default::default()
    };
    for (id, sb) in [
        ("op-p", "sb-1"),
        ("op-r", "sb-2"),
        ("op-s", "sb-3"),
        ("op-c", "sb-3"),
    ] {
        store
            .insert_operation(&operation(id, OperationKind::SuspendSandbox, sb))
            .await
            .expect("insert");
    }
    store
        .update_operation("op-r", &set(OperationState::Running))
        .await
        .expect("r");
    store
        .update_operation("op-s", &set(OperationState::Succeeded))
        .await
        .expect("s");
    store
        .update_operation("op-c", &set(OperationState::Cancelled))
        .await
        .expect("c");
    let mut got = ids(store.unfinished_operations().await.expect("unfinished"));
    got.sort();
    assert_eq!(got, ["op-p", "op-r"]);
    assert!(store.has_unfinished_operation("sb-1").await.expect("has"));
    assert!(store.has_unfinished_operation("sb-2").await.expect("has"));
    assert!(!store.has_unfinished_operation("sb-3").await.expect("has"));
    assert!(!store.has_unfinished_operation("sb-x").await.expect("has"));
}

pub async fn log_lines_are_numbered_per_operation(store: Arc<dyn Store>) {
    for (op, line, seq) in [
        ("op-1", "a", 1),
        ("op-1", "b", 2),
        ("op-2", "x", 1),
        ("op-1", "c", 3),
    ] {
        assert_eq!(
            store.append_operation_log(op, line).await.expect("append"),
            seq
        );
    }
    let all = store.operation_logs("op-1", 0, 10).await.expect("logs");
    assert_eq!(
        all,
        [
            (1, "a".to_string()),
            (2, "b".to_string()),
            (3, "c".to_string())
        ]
    );
    assert_eq!(
        store.operation_logs("op-1", 1, 1).await.expect("logs"),
        [(2, "b".to_string())]
    );
    assert!(store
        .operation_logs("op-1", 3, 10)
        .await
        .expect("logs")
        .is_empty());
    assert_eq!(
        store.operation_logs("op-2", 0, 10).await.expect("logs"),
        [(1, "x".to_string())]
    );
    assert!(store
        .operation_logs("op-x", 0, 10)
        .await
        .expect("logs")
        .is_empty());
}

pub async fn concurrent_log_appends_get_distinct_seqs(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .append_operation_log("op-1", &format!("line {i}"))
                    .await
                    .expect("append")
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.expect("task"));
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=20).collect::<Vec<u64>>());
    let lines = store.operation_logs("op-1", 0, 100).await.expect("logs");
    assert_eq!(lines.len(), 20);
}
