//! Command rows and attachment tokens.

use std::sync::Arc;

use chrono::Duration;
use cove_store::{CommandRecord, Store, StoreError};

use crate::fixtures::now;

fn command(id: &str, sandbox: &str) -> CommandRecord {
    CommandRecord {
        id: id.into(),
        sandbox_id: sandbox.into(),
        attachment_token_hash: format!("hash-{id}"),
        attachment_expires_at: now() + Duration::minutes(10),
        idempotency_key: None,
        request_hash: None,
        guest_restarted: false,
    }
}

fn keyed(id: &str, sandbox: &str, key: &str) -> CommandRecord {
    CommandRecord {
        idempotency_key: Some(key.into()),
        request_hash: Some(format!("body-{id}")),
        ..command(id, sandbox)
    }
}

pub async fn idempotency_keys_are_unique_per_sandbox(store: Arc<dyn Store>) {
    let c = keyed("c1", "sb-1", "k");
    store.insert_command(&c).await.expect("insert");
    assert_eq!(
        store
            .command_by_idempotency_key("sb-1", "k")
            .await
            .expect("by key"),
        Some(c.clone())
    );
    assert!(matches!(
        store.insert_command(&keyed("c2", "sb-1", "k")).await,
        Err(StoreError::Conflict(_))
    ));
    // Another sandbox may use the same key; commands without one never collide.
    store
        .insert_command(&keyed("c3", "sb-2", "k"))
        .await
        .expect("other sandbox");
    store
        .insert_command(&command("c4", "sb-1"))
        .await
        .expect("no key");
    store
        .insert_command(&command("c5", "sb-1"))
        .await
        .expect("no key");
    assert_eq!(
        store
            .command_by_idempotency_key("sb-1", "other")
            .await
            .expect("by key"),
        None
    );
    assert_eq!(
        store
            .command_by_idempotency_key("sb-2", "k")
            .await
            .expect("by key")
            .map(|c| c.id),
        Some("c3".into())
    );
}

pub async fn a_guest_restart_keeps_only_keyed_commands_as_markers(store: Arc<dyn Store>) {
    for c in [
        keyed("k1", "sb-1", "a"),
        command("n1", "sb-1"),
        keyed("k2", "sb-2", "a"),
    ] {
        store.insert_command(&c).await.expect("insert");
    }
    store.mark_guest_restarted("sb-1").await.expect("mark");
    assert!(matches!(
        store.get_command("n1").await,
        Err(StoreError::NotFound)
    ));
    let marked = store.get_command("k1").await.expect("kept");
    assert!(marked.guest_restarted);
    assert_eq!(marked.idempotency_key.as_deref(), Some("a"));
    assert!(
        !store
            .get_command("k2")
            .await
            .expect("other sandbox")
            .guest_restarted
    );
    store.delete_commands_of("sb-1").await.expect("delete of");
    assert!(matches!(
        store.get_command("k1").await,
        Err(StoreError::NotFound)
    ));
}

pub async fn commands_round_trip(store: Arc<dyn Store>) {
    let c = command("cmd-1", "sb-1");
    store.insert_command(&c).await.expect("insert");
    assert_eq!(store.get_command("cmd-1").await.expect("get"), c);
    assert!(matches!(
        store.insert_command(&command("cmd-1", "sb-2")).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.get_command("cmd-1").await.expect("get"), c);
    assert!(matches!(
        store.get_command("cmd-x").await,
        Err(StoreError::NotFound)
    ));
}

pub async fn attachment_tokens_are_replaced(store: Arc<dyn Store>) {
    store
        .insert_command(&command("cmd-1", "sb-1"))
        .await
        .expect("insert");
    let expires = now() + Duration::minutes(20);
    store
        .set_attachment("cmd-1", "new-hash", expires)
        .await
        .expect("replace");
    let got = store.get_command("cmd-1").await.expect("get");
    assert_eq!(
        (
            got.attachment_token_hash.as_str(),
            got.attachment_expires_at
        ),
        ("new-hash", expires)
    );
    assert!(matches!(
        store.set_attachment("cmd-x", "h", expires).await,
        Err(StoreError::NotFound)
    ));
}

pub async fn commands_are_deleted_one_or_per_sandbox(store: Arc<dyn Store>) {
    for (id, sb) in [
        ("c1", "sb-1"),
        ("c2", "sb-1"),
        ("c3", "sb-2"),
        ("c4", "sb-2"),
    ] {
        store
            .insert_command(&command(id, sb))
            .await
            .expect("insert");
    }
    store.delete_command("c3").await.expect("delete");
    store
        .delete_command("c3")
        .await
        .expect("deleting again is a no-op");
    assert!(matches!(
        store.get_command("c3").await,
        Err(StoreError::NotFound)
    ));
    store.delete_commands_of("sb-1").await.expect("delete of");
    for gone in ["c1", "c2"] {
        assert!(matches!(
            store.get_command(gone).await,
            Err(StoreError::NotFound)
        ));
    }
    assert_eq!(
        store.get_command("c4").await.expect("kept").sandbox_id,
        "sb-2"
    );
}
