//! Operations: creation with idempotency, a runner with deadlines, long-polling and build logs.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cove_api_types::{ErrorCode, Operation, OperationError, OperationKind, OperationState};
use cove_store::{NewOperation, OperationUpdate, Store, StoreError};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::error::ServiceError;

/// Default deadline of an operation (30 min).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// Longest accepted `?wait=` of a long-poll (60 s).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Longest deadline a request may ask for (`deadline_s`, 24 h).
pub const MAX_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// How long cooperative work has, after its deadline passed and it was told to stop, to reach a
/// point where it can stop cleanly (30 s); then it is dropped.
const DEADLINE_GRACE: Duration = Duration::from_secs(30);

/// How long `cancel` waits for the operation to end before answering (10 s).
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The deadline of an operation that starts now: `deadline_s` seconds (1 to 86400), or the
/// default of 30 min.
pub fn deadline_from(deadline_s: Option<u64>) -> Result<DateTime<Utc>, ServiceError> {
    let d = match deadline_s {
        None => DEFAULT_DEADLINE,
        Some(0) => {
            return Err(cove_domain::InvalidInput::new("deadline_s", "must be at least 1").into())
        }
        Some(s) if Duration::from_secs(s) > MAX_DEADLINE => {
            return Err(
                cove_domain::InvalidInput::new("deadline_s", "must be at most 86400").into(),
            )
        }
        Some(s) => Duration::from_secs(s),
    };
    Ok(Utc::now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::minutes(30)))
}

/// How an operation's work reacts to a cancel request or its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The work is dropped where it is (it must clean up on drop).
    Drop,
    /// The work is told through its token and ends itself at a safe point.
    Cooperative,
}

/// How long a replica's claim on an operation it runs holds without renewal, by default (10 s;
/// renewed every third of it). Another replica takes over an operation whose lease ran out.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// How often a long-poll re-reads an operation that another replica may finish (1 s).
const SHARED_POLL: Duration = Duration::from_secs(1);

/// The lease a replica holds on the operations it runs (replicas on a shared store only).
#[derive(Debug, Clone)]
pub struct Lease {
    /// This replica's id (unique per process).
    pub owner: String,
    /// How long a claim holds without renewal.
    pub duration: Duration,
}

/// The operation service. Every change of any operation bumps a version counter that long-polls
/// and log streams wait on, so waiting costs no polling of the store (with replicas on a shared
/// store, a long-poll also re-reads every second: another replica may finish the operation).
#[derive(Clone)]
pub struct Operations {
    store: Arc<dyn Store>,
    changed: watch::Sender<u64>,
    /// Cancel tokens of the operations this process runs.
    running: Arc<Mutex<HashMap<String, (OperationKind, CancellationToken)>>>,
    /// The lease this replica holds on what it runs (`None`: the only process on its store).
    lease: Option<Lease>,
    /// Operations this replica ran whose lease another replica took (their end is not
    /// recorded here).
    lost: Arc<Mutex<std::collections::HashSet<String>>>,
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
    pub fn new(store: Arc<dyn Store>) -> Self {
        Operations {
            store,
            changed: watch::channel(0).0,
            running: Arc::default(),
            lease: None,
            lost: Arc::default(),
        }
    }

    /// A service over a store shared with other replicas: what it runs is leased to `lease`'s
    /// owner ([`Operations::renew_leases`] keeps the leases).
    pub fn leased(store: Arc<dyn Store>, lease: Lease) -> Self {
        Operations {
            lease: Some(lease),
            ..Operations::new(store)
        }
    }

    /// The lease this replica runs operations under, when it shares its store.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Takes (or keeps) the lease of `ids` for this replica; returns the ids it holds.
    async fn take_lease(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        let Some(lease) = &self.lease else {
            return Ok(ids.to_vec());
        };
        let until = Utc::now()
            + chrono::Duration::from_std(lease.duration).unwrap_or(chrono::Duration::seconds(10));
        self.store.lease_operations(&lease.owner, ids, until).await
    }

    /// Renews the leases of every operation this replica runs. One that another replica took
    /// meanwhile (this one could not renew in time) is stopped here, and its end is left to
    /// that replica.
    pub async fn renew_leases(&self) {
        if self.lease.is_none() {
            return;
        }
        let ids: Vec<String> = self.lock_running().keys().cloned().collect();
        if ids.is_empty() {
            return;
        }
        let held = match self.take_lease(&ids).await {
            Ok(held) => held,
            Err(e) => {
                warn!(error = %e, "cannot renew operation leases");
                return;
            }
        };
        for id in ids.iter().filter(|id| !held.contains(id)) {
            let token = self.lock_running().get(id).map(|(_, t)| t.clone());
            if let Some(token) = token {
                warn!(op_id = %id, "operation lease taken by another replica: stopping it here");
                self.lost.lock().insert(id.clone());
                token.cancel();
            }
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Wakes long-polls and log streams to re-read the store: another replica may have
    /// changed an operation.
    pub(crate) fn changed_elsewhere(&self) {
        self.bump();
    }

    /// Records a new operation, honouring an idempotency key: the same key and body return the
    /// earlier operation; the same key with another body is `IdempotencyMismatch`.
    pub async fn begin(&self, op: NewOperation) -> Result<Begun, ServiceError> {
        if let Some(key) = &op.idempotency_key {
            if let Some(found) = self
                .replay(&op.org, op.kind, key, op.request_hash.as_deref())
                .await?
            {
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
                match self
                    .replay(&op.org, op.kind, key, op.request_hash.as_deref())
                    .await?
                {
                    Some(found) => Ok(Begun::Replayed(found)),
                    None => Err(ServiceError::Internal("idempotency key conflict".into())),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The earlier operation of the same idempotent request (`org`, `kind`, `key`, body `hash`), if
    /// there is one; the key with another body is `IdempotencyMismatch`.
    pub(crate) async fn replay(
        &self,
        org: &str,
        kind: OperationKind,
        key: &str,
        hash: Option<&str>,
    ) -> Result<Option<Operation>, ServiceError> {
        match self
            .store
            .operation_by_idempotency_key(org, kind, key)
            .await?
        {
            Some((found, found_hash)) if found_hash.as_deref() == hash => Ok(Some(found)),
            Some(_) => Err(ServiceError::IdempotencyMismatch),
            None => Ok(None),
        }
    }

    /// Runs `work` for operation `op` in the background: `running`, then `succeeded`, or
    /// `failed` with the error's code, or `failed` with `deadline_exceeded` at the deadline.
    /// A cancel request or the deadline drops `work` where it is.
    pub fn run<F>(&self, op: &Operation, work: F)
    where
        F: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        self.spawn(op, Stop::Drop, |_| work);
    }

    /// Like [`Operations::run`], but `work` is given a token that fires on a cancel request or
    /// at the deadline, and stops by itself at a safe point (returning
    /// [`ServiceError::Cancelled`]); it is dropped only if it has not stopped 30 s after its
    /// deadline. A cancelled operation ends `cancelled`.
    pub fn run_cancellable<F, Fut>(&self, op: &Operation, work: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        self.spawn(op, Stop::Cooperative, work);
    }

    fn spawn<F, Fut>(&self, op: &Operation, stop: Stop, work: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        let this = self.clone();
        let id = op.id.clone();
        let token = CancellationToken::new();
        self.lock_running()
            .insert(id.clone(), (op.kind, token.clone()));
        let work = work(token.clone());
        let deadline = op.deadline;
        let kind = op.kind;
        let began = std::time::Instant::now();
        let span = tracing::info_span!("operation", op_id = %id, kind = op.kind.as_str(),
            sandbox_id = op.sandbox_id.as_deref().unwrap_or(""));
        // The background half is no request: it runs as the server (`orgs::scope`); the
        // request checked its caller before it began the operation.
        tokio::spawn(crate::orgs::scope::as_system(
            async move {
                match this.take_lease(std::slice::from_ref(&id)).await {
                    Ok(held) if held.is_empty() => {
                        // Claimed by another replica (this one was too slow to lease it).
                        info!("operation run by another replica");
                        this.lock_running().remove(&id);
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot lease the operation"),
                }
                this.set_state(&id, OperationState::Running, None).await;
                let left = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                let mut work = std::pin::pin!(work);
                let mut deadline_passed = false;
                let outcome = tokio::select! {
                    r = &mut work => Some(r),
                    () = tokio::time::sleep(left) => {
                        deadline_passed = true;
                        None
                    }
                    () = token.cancelled(), if stop == Stop::Drop => {
                        Some(Err(ServiceError::Cancelled("cancelled by request".into())))
                    }
                };
                let outcome = match (outcome, stop) {
                    (Some(r), _) => Some(r),
                    (None, Stop::Drop) => None,
                    (None, Stop::Cooperative) => {
                        token.cancel();
                        tokio::time::timeout(DEADLINE_GRACE, &mut work).await.ok()
                    }
                };
                let (state, err) = match outcome {
                    Some(Ok(())) => {
                        info!("operation succeeded");
                        (OperationState::Succeeded, None)
                    }
                    Some(Err(ServiceError::Cancelled(_))) if !deadline_passed => {
                        info!("operation cancelled");
                        let err = OperationError {
                            code: ErrorCode::Cancelled,
                            message: "cancelled by request".into(),
                        };
                        (OperationState::Cancelled, Some(err))
                    }
                    Some(Err(e)) if !deadline_passed => {
                        warn!(error = %e, "operation failed");
                        let err = OperationError {
                            code: e.code(),
                            message: e.public_message(),
                        };
                        (OperationState::Failed, Some(err))
                    }
                    _ => {
                        warn!("operation deadline exceeded");
                        let err = OperationError {
                            code: ErrorCode::DeadlineExceeded,
                            message: "the operation did not finish before its deadline".into(),
                        };
                        (OperationState::Failed, Some(err))
                    }
                };
                // Counted before the state is visible, so a client that saw it finish sees
                // it counted too.
                let lost = this.lost.lock().remove(&id);
                if lost {
                    // Another replica drives it now and records its end.
                    this.lock_running().remove(&id);
                    return;
                }
                crate::metrics::operation_finished(kind, state, began.elapsed());
                this.set_state(&id, state, err).await;
                this.lock_running().remove(&id);
            }
            .instrument(span),
        ));
    }

    fn lock_running(
        &self,
    ) -> parking_lot::MutexGuard<'_, HashMap<String, (OperationKind, CancellationToken)>> {
        self.running.lock()
    }

    /// Asks operation `id` to stop and returns it once it ended (or as it is after 10 s). A
    /// finished operation is returned unchanged. A delete cannot be cancelled once accepted
    /// (`failed_precondition`): a half-deleted sandbox has nothing to return to.
    pub async fn cancel(&self, id: &str) -> Result<Operation, ServiceError> {
        let op = self.get(id).await?;
        if op.state.is_final() {
            return Ok(op);
        }
        if op.kind == OperationKind::DeleteSandbox {
            return Err(ServiceError::FailedPrecondition(
                "a delete cannot be cancelled once accepted".into(),
            ));
        }
        let token = self.lock_running().get(id).map(|(_, t)| t.clone());
        match token {
            Some(token) => {
                info!(op_id = %id, "operation cancel requested");
                token.cancel();
                self.wait(id, CANCEL_WAIT).await
            }
            None => {
                // Not run by this process (interrupted by a restart and not yet reconciled).
                let err = OperationError {
                    code: ErrorCode::Cancelled,
                    message: "cancelled by request".into(),
                };
                crate::metrics::operation_finished(
                    op.kind,
                    OperationState::Cancelled,
                    Duration::ZERO,
                );
                self.set_state(id, OperationState::Cancelled, Some(err))
                    .await;
                self.get(id).await
            }
        }
    }

    /// Recent operations of the caller's org, newest first (of one sandbox when `sandbox_id` is
    /// given); `limit`
    /// defaults to 50 and is capped at 500.
    pub async fn list(
        &self,
        sandbox_id: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Vec<Operation>, ServiceError> {
        let limit = limit.unwrap_or(50).clamp(1, 500);
        let org = crate::orgs::scope::listing_org()?;
        Ok(self
            .store
            .list_operations(org.as_deref(), sandbox_id, limit)
            .await?)
    }

    /// Sets an operation's state (final states are never changed).
    pub async fn set_state(&self, id: &str, state: OperationState, error: Option<OperationError>) {
        let u = OperationUpdate {
            state: Some(state),
            progress: None,
            error,
        };
        if let Err(e) = self.store.update_operation(id, &u).await {
            warn!(op_id = %id, error = %e, "cannot record operation state");
        }
        self.bump();
    }

    /// Records build progress.
    pub async fn set_progress(&self, id: &str, percent: u8) {
        let u = OperationUpdate {
            progress: Some(percent.min(100)),
            ..Default::default()
        };
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

    /// The operation now (another org's is not found).
    pub async fn get(&self, id: &str) -> Result<Operation, ServiceError> {
        let caller = crate::orgs::scope::require()?;
        match self.store.get_operation(id).await {
            Ok(op) if caller.sees(&op.org) => Ok(op),
            Ok(_) => Err(ServiceError::OperationNotFound(id.to_string())),
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
            let mut next = until;
            if self.lease.is_some() {
                next = next.min(tokio::time::Instant::now() + SHARED_POLL);
            }
            if tokio::time::timeout_at(next, rx.changed()).await.is_err()
                && tokio::time::Instant::now() >= until
            {
                return Ok(op);
            }
        }
    }

    /// Log lines after `after` (at most 500).
    pub async fn logs(&self, id: &str, after: u64) -> Result<Vec<(u64, String)>, ServiceError> {
        self.get(id).await?;
        Ok(self.store.operation_logs(id, after, 500).await?)
    }

    /// A subscription to changes (for streams that must not miss one between checks).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ops() -> (Operations, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = cove_store::SqliteStore::open(&dir.path().join("s.db"))
            .await
            .expect("open");
        let store = Arc::new(store);
        (Operations::new(store), dir)
    }

    async fn begin(ops: &Operations, deadline: DateTime<Utc>) -> Operation {
        let new = NewOperation {
            id: cove_domain::ids::new_operation_id(),
            org: "default".into(),
            kind: OperationKind::SuspendSandbox,
            sandbox_id: Some("sb-1".into()),
            template: None,
            release: None,
            idempotency_key: None,
            request_hash: None,
            deadline,
        };
        match ops.begin(new).await.expect("begin") {
            Begun::New(op) => op,
            Begun::Replayed(_) => panic!("not replayed"),
        }
    }

    /// Work that stops only when told, the way lifecycle work does.
    async fn until_told(token: CancellationToken) -> Result<(), ServiceError> {
        token.cancelled().await;
        Err(ServiceError::Cancelled("stopped".into()))
    }

    #[tokio::test]
    async fn cancelled_cooperative_work_ends_cancelled() {
        // Called outside a request, the service runs as the server.
        crate::orgs::scope::as_system(async {
            let (ops, _dir) = ops().await;
            let op = begin(&ops, deadline_from(None).expect("deadline")).await;
            ops.run_cancellable(&op, until_told);
            let ended = ops.cancel(&op.id).await.expect("cancel");
            assert_eq!(ended.state, OperationState::Cancelled);
            assert_eq!(ended.error.map(|e| e.code), Some(ErrorCode::Cancelled));
            // Cancelling again returns the finished operation unchanged.
            assert_eq!(
                ops.cancel(&op.id).await.expect("again").state,
                OperationState::Cancelled
            );
        })
        .await;
    }

    #[tokio::test]
    async fn cooperative_work_past_its_deadline_fails_deadline_exceeded() {
        // Called outside a request, the service runs as the server.
        crate::orgs::scope::as_system(async {
            let (ops, _dir) = ops().await;
            let op = begin(&ops, Utc::now() + chrono::Duration::milliseconds(50)).await;
            ops.run_cancellable(&op, until_told);
            let ended = ops
                .wait(&op.id, Duration::from_secs(10))
                .await
                .expect("wait");
            assert_eq!(ended.state, OperationState::Failed);
            assert_eq!(
                ended.error.map(|e| e.code),
                Some(ErrorCode::DeadlineExceeded)
            );
        })
        .await;
    }

    #[tokio::test]
    async fn dropped_work_is_cancelled_and_deletes_refuse_cancel() {
        // Called outside a request, the service runs as the server.
        crate::orgs::scope::as_system(async {
            let (ops, _dir) = ops().await;
            let op = begin(&ops, deadline_from(Some(60)).expect("deadline")).await;
            ops.run(&op, std::future::pending());
            assert_eq!(
                ops.cancel(&op.id).await.expect("cancel").state,
                OperationState::Cancelled
            );

            let new = NewOperation {
                id: cove_domain::ids::new_operation_id(),
                org: "default".into(),
                kind: OperationKind::DeleteSandbox,
                sandbox_id: Some("sb-2".into()),
                template: None,
                release: None,
                idempotency_key: None,
                request_hash: None,
                deadline: deadline_from(None).expect("deadline"),
            };
            let Begun::New(del) = ops.begin(new).await.expect("begin") else {
                panic!("new")
            };
            ops.run(&del, std::future::pending());
            let err = ops
                .cancel(&del.id)
                .await
                .expect_err("deletes are not cancellable");
            assert_eq!(err.code(), ErrorCode::FailedPrecondition);
            let listed = ops.list(Some("sb-2"), None).await.expect("list");
            assert_eq!(listed.len(), 1);
        })
        .await;
    }

    #[test]
    fn deadlines_are_bounded() {
        assert!(deadline_from(Some(0)).is_err());
        assert!(deadline_from(Some(86_401)).is_err());
        let d = deadline_from(Some(10)).expect("10 s") - Utc::now();
        assert!(d.num_seconds() <= 10 && d.num_seconds() >= 9);
    }
}
