//! Sandbox expiry: set, extended (never earlier), cleared; the expired ones listed; a claim
//! that exactly one of racing replicas wins.

use std::sync::Arc;

use chrono::Duration;
use cove_api_types::{OnExpiry, Sandbox, SandboxState};
use cove_store::Store;

use crate::fixtures::{bare_sandbox, now};

async fn expiry_of(
    store: &Arc<dyn Store>,
    id: &str,
) -> (Option<chrono::DateTime<chrono::Utc>>, OnExpiry) {
    let s = store.get_sandbox(id).await.expect("get");
    (s.expires_at, s.on_expiry)
}

pub async fn expiry_is_set_extended_and_cleared(store: Arc<dyn Store>) {
    let t = now();
    store
        .insert_sandbox(&bare_sandbox("sb-1"))
        .await
        .expect("insert");
    assert_eq!(expiry_of(&store, "sb-1").await, (None, OnExpiry::Delete));

    let at = t + Duration::seconds(300);
    assert!(store
        .set_sandbox_expiry("sb-1", Some(at), OnExpiry::Suspend)
        .await
        .expect("set"));
    assert_eq!(
        expiry_of(&store, "sb-1").await,
        (Some(at), OnExpiry::Suspend)
    );
    // Set may move it earlier; extend may not.
    let earlier = t + Duration::seconds(100);
    assert!(!store
        .extend_sandbox_expiry("sb-1", earlier, OnExpiry::Delete)
        .await
        .expect("extend"));
    assert_eq!(
        expiry_of(&store, "sb-1").await,
        (Some(at), OnExpiry::Suspend)
    );
    let later = t + Duration::seconds(600);
    assert!(store
        .extend_sandbox_expiry("sb-1", later, OnExpiry::Delete)
        .await
        .expect("extend"));
    assert_eq!(
        expiry_of(&store, "sb-1").await,
        (Some(later), OnExpiry::Delete)
    );
    assert!(store
        .set_sandbox_expiry("sb-1", Some(earlier), OnExpiry::Delete)
        .await
        .expect("set"));
    assert_eq!(expiry_of(&store, "sb-1").await.0, Some(earlier));
    assert!(store
        .set_sandbox_expiry("sb-1", None, OnExpiry::Delete)
        .await
        .expect("clear"));
    assert_eq!(expiry_of(&store, "sb-1").await, (None, OnExpiry::Delete));
    // Extending an expiry that is not set sets it.
    assert!(store
        .extend_sandbox_expiry("sb-1", at, OnExpiry::Suspend)
        .await
        .expect("extend"));
    assert_eq!(
        expiry_of(&store, "sb-1").await,
        (Some(at), OnExpiry::Suspend)
    );

    // Unknown, deleting or deleted sandboxes get none.
    assert!(!store
        .set_sandbox_expiry("sb-none", Some(at), OnExpiry::Delete)
        .await
        .expect("set"));
    for (id, state) in [
        ("sb-2", SandboxState::Deleting),
        ("sb-3", SandboxState::Deleted),
    ] {
        let s = Sandbox {
            state,
            ..bare_sandbox(id)
        };
        store.insert_sandbox(&s).await.expect("insert");
        assert!(!store
            .set_sandbox_expiry(id, Some(at), OnExpiry::Delete)
            .await
            .expect("set"));
        assert!(!store
            .extend_sandbox_expiry(id, at, OnExpiry::Delete)
            .await
            .expect("extend"));
    }
}

pub async fn expired_sandboxes_are_listed_earliest_first(store: Arc<dyn Store>) {
    let t = now();
    let rows = [
        (
            "sb-late",
            Some(t - Duration::seconds(10)),
            SandboxState::Running,
        ),
        (
            "sb-early",
            Some(t - Duration::seconds(500)),
            SandboxState::Suspended,
        ),
        ("sb-now", Some(t), SandboxState::Paused),
        (
            "sb-future",
            Some(t + Duration::milliseconds(1)),
            SandboxState::Running,
        ),
        ("sb-never", None, SandboxState::Running),
        (
            "sb-deleting",
            Some(t - Duration::seconds(60)),
            SandboxState::Deleting,
        ),
        (
            "sb-deleted",
            Some(t - Duration::seconds(60)),
            SandboxState::Deleted,
        ),
    ];
    for (id, at, state) in rows {
        let s = Sandbox {
            state,
            expires_at: at,
            ..bare_sandbox(id)
        };
        store.insert_sandbox(&s).await.expect("insert");
    }
    let ids = |v: Vec<Sandbox>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.expired_sandboxes(t, 100).await.expect("expired")),
        ["sb-early", "sb-late", "sb-now"]
    );
    assert_eq!(
        ids(store.expired_sandboxes(t, 2).await.expect("expired")),
        ["sb-early", "sb-late"]
    );
    assert!(store
        .expired_sandboxes(t - Duration::seconds(1000), 100)
        .await
        .expect("expired")
        .is_empty());
}

pub async fn one_of_racing_claims_wins_and_a_moved_expiry_is_not_claimed(store: Arc<dyn Store>) {
    let t = now();
    let s = Sandbox {
        expires_at: Some(t - Duration::seconds(1)),
        ..bare_sandbox("sb-1")
    };
    store.insert_sandbox(&s).await.expect("insert");
    let racers = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.claim_expiry("sb-1", t).await.expect("claim") })
    });
    let mut won = 0;
    for r in racers {
        won += usize::from(r.await.expect("join"));
    }
    assert_eq!(won, 1);
    assert_eq!(expiry_of(&store, "sb-1").await.0, None);
    assert!(store
        .expired_sandboxes(t, 10)
        .await
        .expect("expired")
        .is_empty());

    // An expiry moved later after it was read is not claimed by the stale reader.
    let s = Sandbox {
        expires_at: Some(t - Duration::seconds(1)),
        ..bare_sandbox("sb-2")
    };
    store.insert_sandbox(&s).await.expect("insert");
    assert_eq!(
        store.expired_sandboxes(t, 10).await.expect("expired").len(),
        1
    );
    let later = t + Duration::seconds(30);
    store
        .extend_sandbox_expiry("sb-2", later, OnExpiry::Delete)
        .await
        .expect("extend");
    assert!(!store.claim_expiry("sb-2", t).await.expect("claim"));
    assert_eq!(expiry_of(&store, "sb-2").await.0, Some(later));
    assert!(!store.claim_expiry("sb-none", t).await.expect("claim"));
}
