//! Named locks (SQLite): one process is the store's writer, so a mutex per key is enough.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::SqliteStore;
use crate::{LockStore, StoreError, StoreLock};

/// A mutex per key, made on first use.
#[derive(Clone, Debug, Default)]
pub(crate) struct Locks(Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>);

#[async_trait]
impl LockStore for SqliteStore {
    async fn lock(&self, key: &str) -> Result<StoreLock, StoreError> {
        let lock = {
            let mut map = self.locks.0.lock();
            // Keys nobody holds or waits for are dropped, so the map stays as small as the
            // keys in use.
            map.retain(|_, l| Arc::strong_count(l) > 1);
            map.entry(key.to_string()).or_default().clone()
        };
        Ok(StoreLock::new(lock.lock_owned().await))
    }
}
