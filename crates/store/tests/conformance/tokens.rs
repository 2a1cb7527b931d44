//! Management token hashes.

use std::sync::Arc;

use cove_store::{Store, StoreError};

pub async fn token_hashes_are_stored_and_counted(store: Arc<dyn Store>) {
    assert_eq!(store.token_count().await.expect("count"), 0);
    assert!(!store.token_exists("h1").await.expect("exists"));
    store
        .insert_token("t1", "admin", "h1")
        .await
        .expect("insert");
    store.insert_token("t2", "ci", "h2").await.expect("insert");
    assert!(store.token_exists("h1").await.expect("exists"));
    assert!(store.token_exists("h2").await.expect("exists"));
    assert!(!store.token_exists("t1").await.expect("an id is not a hash"));
    assert_eq!(store.token_count().await.expect("count"), 2);
    assert!(matches!(
        store.insert_token("t3", "again", "h1").await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.insert_token("t1", "again", "h3").await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.token_count().await.expect("count"), 2);
}
