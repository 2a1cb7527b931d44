//! Operations: creation with idempotency, a runner with deadlines, long-polling and build logs.

use std::future::Future;
use std::time::Duration;

use chrono::Utc;
use cove_api_types::{Operation, OperationError, OperationKind, OperationState};
use cove_store::{NewOperation, OperationUpdate, Store, StoreError};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tracing::{info, warn, Instrument};

use crate::error::ServiceError;

/// Default deadline of an operation (30 min).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// Longest accepted `?wait=` of a long-poll (60 s).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The operation service. Every change of any operation bumps a version counter that long-polls
/// and log streams wait on, so waiting costs no polling of the store.
#[derive(Clone)]
pub struct Operations {
    store: Store,
    changed: watch::Sender<u64>,
}

/// Hash of an idempotent request: its kind and canonical JSON body.
pub fn request_hash(kind: OperationKind, body: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(kind.as_str().as_bytes());
    h.update(body.to_string().as_bytes());
    format!("{:x}", h.finalize())
}

/// What `begin` found.
pub enum Begun {
    /// A new operation was recorded; the caller starts its work.
    New(Operation),
    /// The same idempotent request was made before; this is its operation.
    Replayed(Operation),
}

impl Operations {
    /// A service over `store`.
    pub fn new(store: Store) -> Self {
        Operations { store, changed: watch::channel(0).0 }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Records a new operation, honouring an idempotency key: the same key and body return the
    /// earlier operation; the same key with another body is `IdempotencyMismatch`.
    pub async fn begin(&self, op: NewOperation) -> Result<Begun, ServiceError> {
        if let Some(key) = &op.idempotency_key {
            if let Some(found) = self.replay(op.kind, key, op.request_hash.as_deref()).await? {
                return Ok(Begun::Replayed(found));
            }
        }
        match self.store.insert_operation(&op).await {
            Ok(created) => {
                self.bump();
                Ok(Begun::New(created))
            }
            // Lost a race with a concurrent request carrying the same key.
            Err(StoreError::Conflict(_)) if op.idempotency_key.is_some() => {
                let key = op.idempotency_key.as_deref().unwrap_or_default();
                match self.replay(op.kind, key, op.request_hash.as_deref()).await? {
                    Some(found) => Ok(Begun::Replayed(found)),
                    None => Err(ServiceError::Internal("idempotency key conflict".into())),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn replay(
        &self,
        kind: OperationKind,
        key: &str,
        hash: Option<&str>,
    ) -> Result<Option<Operation>, ServiceError> {
        match self.store.operation_by_idempotency_key(kind, key).await? {
            Some((found, found_hash)) if found_hash.as_deref() == hash => Ok(Some(found)),
            Some(_) => Err(ServiceError::IdempotencyMismatch),
            None => Ok(None),
        }
    }

    /// Runs `work` for operation `op` in the background: `running`, then `succeeded`, or
    /// `failed` with the error's code, or `failed` with `deadline_exceeded` at the deadline.
    pub fn run<F>(&self, op: &Operation, work: F)
    where
        F: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        let this = self.clone();
        let id = op.id.clone();
        let deadline = op.deadline;
        let span = tracing::info_span!("operation", op_id = %id, kind = op.kind.as_str(),
            sandbox_id = op.sandbox_id.as_deref().unwrap_or(""));
        tokio::spawn(
            async move {
                this.set_state(&id, OperationState::Running, None).await;
                let left = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                let outcome = tokio::time::timeout(left, work).await;
                match outcome {
                    Ok(Ok(())) => {
                        info!("operation succeeded");
                        this.set_state(&id, OperationState::Succeeded, None).await;
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "operation failed");
                        let err = OperationError { code: e.code(), message: e.public_message() };
                        this.set_state(&id, OperationState::Failed, Some(err)).await;
                    }
                    Err(_) => {
                        warn!("operation deadline exceeded");
                        let err = OperationError {
                            code: cove_api_types::ErrorCode::DeadlineExceeded,
                            message: "the operation did not finish before its deadline".into(),
                        };
                        this.set_state(&id, OperationState::Failed, Some(err)).await;
                    }
                }
            }
            .instrument(span),
        );
    }

    /// Sets an operation's state (final states are never changed).
    pub async fn set_state(&self, id: &str, state: OperationState, error: Option<OperationError>) {
        let u = OperationUpdate { state: Some(state), progress: None, error };
        if let Err(e) = self.store.update_operation(id, &u).await {
            warn!(op_id = %id, error = %e, "cannot record operation state");
        }
        self.bump();
    }

    /// Records build progress.
    pub async fn set_progress(&self, id: &str, percent: u8) {
        let u = OperationUpdate { progress: Some(percent.min(100)), ..Default::default() };
        if let Err(e) = self.store.update_operation(id, &u).await {
            warn!(op_id = %id, error = %e, "cannot record progress");
        }
        self.bump();
    }

    /// Appends a log line.
    pub async fn log(&self, id: &str, line: &str) {
        if let Err(e) = self.store.append_operation_log(id, line).await {
            warn!(op_id = %id, error = %e, "cannot record log line");
        }
        self.bump();
    }

    /// The operation now.
    pub async fn get(&self, id: &str) -> Result<Operation, ServiceError> {
        match self.store.get_operation(id).await {
            Ok(op) => Ok(op),
            Err(StoreError::NotFound) => Err(ServiceError::OperationNotFound(id.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    /// The operation once it is final, or as it is when `wait` (capped at [`MAX_WAIT`]) elapses.
    pub async fn wait(&self, id: &str, wait: Duration) -> Result<Operation, ServiceError> {
        let until = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        let mut rx = self.changed.subscribe();
        loop {
            rx.borrow_and_update();
            let op = self.get(id).await?;
            if op.state.is_final() {
                return Ok(op);
            }
            if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
                return Ok(op);
            }
        }
    }

    /// Log lines after `after` (at most 500).
    pub async fn logs(&self, id: &str, after: u64) -> Result<Vec<(u64, String)>, ServiceError> {
        Ok(self.store.operation_logs(id, after, 500).await?)
    }

    /// Waits until any operation changes, or `timeout` elapses.
    pub async fn changed(&self, timeout: Duration) {
        let mut rx = self.changed.subscribe();
        rx.borrow_and_update();
        let _ = tokio::time::timeout(timeout, rx.changed()).await;
    }

    /// A subscription to changes (for streams that must not miss one between checks).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}
