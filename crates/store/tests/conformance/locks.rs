//! Named locks: one holder per key at a time, released on drop; other keys are free.

use std::sync::Arc;
use std::time::Duration;

use cove_store::Store;

pub async fn a_named_lock_is_held_until_dropped_and_other_keys_are_free(store: Arc<dyn Store>) {
    let held = store.lock("quota:acme").await.expect("lock");
    // Another key is free meanwhile.
    let other = tokio::time::timeout(Duration::from_secs(10), store.lock("volumes:acme"))
        .await
        .expect("another key is not held")
        .expect("lock");
    drop(other);
    // The same key waits for the holder.
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            let _second = store.lock("quota:acme").await.expect("lock");
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a second holder got a held lock");
    drop(held);
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("released on drop")
        .expect("waiter");
    // Released again by the waiter: taken at once.
    let again = tokio::time::timeout(Duration::from_secs(10), store.lock("quota:acme"))
        .await
        .expect("released again");
    assert!(again.is_ok());
}
