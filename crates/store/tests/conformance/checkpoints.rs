//! Checkpoints: rows round-trip, states move only from `creating`, listing per sandbox newest
//! first, unfinished ones are failed at start-up, delete.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Duration;
use cove_api_types::{Checkpoint, CheckpointState};
use cove_store::{Store, StoreError};

use crate::fixtures::{now, sandbox};

/// A `creating` checkpoint `id` of `sandbox_id` (org `default`), made `age_s` ago.
pub fn checkpoint(id: &str, sandbox_id: &str, age_s: i64) -> Checkpoint {
    let s = sandbox(sandbox_id);
    Checkpoint {
        id: id.into(),
        org: "default".into(),
        sandbox_id: sandbox_id.into(),
        name: Some(format!("name of {id}")),
        state: CheckpointState::Creating,
        state_reason: None,
        template: s.template,
        release: s.release,
        resources: s.resources,
        env: BTreeMap::from([("A".into(), "b c".into())]),
        cwd: "/home/user".into(),
        user: "user".into(),
        runtime: "runc".into(),
        memory: false,
        file_bytes: 0,
        pause_ms: None,
        operation_id: Some(format!("op-of-{id}")),
        created_at: now() - Duration::seconds(age_s),
    }
}

pub async fn checkpoints_round_trip_and_move_from_creating_only(store: Arc<dyn Store>) {
    let c = checkpoint("ck-a", "sb-1", 0);
    store.insert_checkpoint(&c).await.expect("insert");
    assert_eq!(store.get_checkpoint("ck-a").await.expect("get"), c);
    assert!(matches!(
        store.insert_checkpoint(&c).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.get_checkpoint("ck-none").await,
        Err(StoreError::NotFound)
    ));

    assert!(store
        .checkpoint_ready("ck-a", 4096, true, 17)
        .await
        .expect("ready"));
    let got = store.get_checkpoint("ck-a").await.expect("get");
    assert_eq!(got.state, CheckpointState::Ready);
    assert_eq!(
        (got.file_bytes, got.memory, got.pause_ms),
        (4096, true, Some(17))
    );
    // Final states do not move.
    assert!(!store.checkpoint_failed("ck-a", "late").await.expect("fail"));
    assert!(!store
        .checkpoint_ready("ck-a", 1, false, 1)
        .await
        .expect("ready"));
    assert_eq!(store.get_checkpoint("ck-a").await.expect("get"), got);

    store
        .insert_checkpoint(&checkpoint("ck-b", "sb-1", 0))
        .await
        .expect("insert");
    assert!(store
        .checkpoint_failed("ck-b", "disk full")
        .await
        .expect("fail"));
    let failed = store.get_checkpoint("ck-b").await.expect("get");
    assert_eq!(failed.state, CheckpointState::Failed);
    assert_eq!(failed.state_reason.as_deref(), Some("disk full"));

    assert!(store.delete_checkpoint("ck-a").await.expect("delete"));
    assert!(!store.delete_checkpoint("ck-a").await.expect("delete again"));
    assert!(matches!(
        store.get_checkpoint("ck-a").await,
        Err(StoreError::NotFound)
    ));
}

pub async fn checkpoints_are_listed_per_sandbox_newest_first(store: Arc<dyn Store>) {
    for (id, sb, age) in [
        ("ck-old", "sb-1", 30),
        ("ck-new", "sb-1", 10),
        ("ck-other", "sb-2", 20),
    ] {
        store
            .insert_checkpoint(&checkpoint(id, sb, age))
            .await
            .expect("insert");
    }
    let ids = |v: Vec<Checkpoint>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store
            .list_checkpoints(None, Some("sb-1"))
            .await
            .expect("list")),
        ["ck-new", "ck-old"]
    );
    assert_eq!(
        ids(store.list_checkpoints(None, None).await.expect("list all")),
        ["ck-new", "ck-other", "ck-old"]
    );
    assert!(store
        .list_checkpoints(None, Some("sb-none"))
        .await
        .expect("list")
        .is_empty());
}

pub async fn unfinished_checkpoints_are_failed(store: Arc<dyn Store>) {
    store
        .insert_checkpoint(&checkpoint("ck-done", "sb-1", 2))
        .await
        .expect("insert");
    store
        .checkpoint_ready("ck-done", 1, false, 1)
        .await
        .expect("ready");
    store
        .insert_checkpoint(&checkpoint("ck-mid", "sb-1", 1))
        .await
        .expect("insert");
    let failed = store
        .fail_unfinished_checkpoints("restarted")
        .await
        .expect("fail unfinished");
    assert_eq!(failed, ["ck-mid"]);
    let mid = store.get_checkpoint("ck-mid").await.expect("get");
    assert_eq!(mid.state, CheckpointState::Failed);
    assert_eq!(mid.state_reason.as_deref(), Some("restarted"));
    assert_eq!(
        store.get_checkpoint("ck-done").await.expect("get").state,
        CheckpointState::Ready
    );
}
