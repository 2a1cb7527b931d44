//! Named locks shared by every replica of one store, for a check and the write it admits
//! (an org's quota check and the sandbox or volume it records; a volume delete and a create
//! that mounts the volume). Every caller that writes under a key takes its lock first, so a
//! check reads what every earlier holder wrote.
//!
//! On PostgreSQL a lock is a transaction-scoped advisory lock (`pg_advisory_xact_lock`) held
//! by a transaction of its own on a connection of a separate small pool, until the guard is
//! dropped; a replica that dies holding one loses its connection and so the lock. On SQLite
//! (one process) it is a mutex of this process, per key.

use async_trait::async_trait;

use crate::StoreError;

/// A held lock; dropping it releases it (on PostgreSQL the transaction that holds it ends
/// right after, on a task of its own).
pub struct StoreLock {
    _held: Box<dyn Send + Sync>,
}

impl StoreLock {
    pub(crate) fn new(held: impl Send + Sync + 'static) -> StoreLock {
        StoreLock {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreLock")
    }
}

/// Named locks.
#[async_trait]
pub trait LockStore: Send + Sync {
    /// Takes the lock named `key`, waiting while anyone (this replica or another of the same
    /// store) holds it. Two keys may share a lock (PostgreSQL hashes them to 32 bits): that
    /// only makes their holders wait for each other. Take several keys in one order
    /// everywhere.
    async fn lock(&self, key: &str) -> Result<StoreLock, StoreError>;
}
