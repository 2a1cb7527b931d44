//! A template file's `START` and `READY` when a sandbox of its release starts (or wakes
//! without its memory): `START` is spawned as the sandbox's default user in its working
//! directory with its environment, then the `READY` check runs every [`READY_INTERVAL`]
//! until it exits 0 or its timeout passes. Neither is a command of the API (they are the
//! sandbox's own); their output stays on the node.

use std::time::{Duration, Instant};

use cove_domain::ids;
use cove_node_api::{AttachEvent, Program, SpawnRequest};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{ControlPlane, ServiceError};

/// Pause between two `READY` attempts.
pub const READY_INTERVAL: Duration = Duration::from_millis(200);
/// Longest single `READY` attempt.
const READY_ATTEMPT_MAX: Duration = Duration::from_secs(10);

impl ControlPlane {
    /// Starts `START` and waits for `READY` of the sandbox's release, if it has them.
    ///
    /// # Errors
    /// `failed_precondition` naming what failed (START could not start, READY did not pass in
    /// time); `cancelled`.
    pub(crate) async fn run_startup(
        &self,
        sandbox_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ServiceError> {
        let s = self.store().get_sandbox(sandbox_id).await?;
        let Some(defaults) = self
            .store()
            .list_releases(&s.template)
            .await?
            .into_iter()
            .find(|r| r.number == s.release)
            .and_then(|r| r.defaults)
        else {
            return Ok(());
        };
        let spawn = |program: String, timeout: Option<Duration>| SpawnRequest {
            command_id: ids::new_command_id(),
            program: Program::Argv(vec!["/bin/sh".into(), "-c".into(), program]),
            env: s.env.clone(),
            cwd: Some(s.cwd.as_str().into()),
            user: Some(s.user.clone()),
            stdin: false,
            timeout_ms: timeout.map(|t| t.as_millis() as u64),
            pty: None,
        };
        if let Some(start) = &defaults.start {
            self.node()
                .spawn(sandbox_id, spawn(start.clone(), None))
                .await
                .map_err(|e| ServiceError::FailedPrecondition(format!("START: {e}")))?;
            info!(sandbox_id, "start command started");
        }
        let Some(ready) = &defaults.ready else {
            return Ok(());
        };
        let began = Instant::now();
        let deadline = began + Duration::from_secs(ready.timeout_s);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ServiceError::FailedPrecondition(format!(
                    "READY did not pass within {} s",
                    ready.timeout_s
                )));
            }
            let req = spawn(ready.command.clone(), Some(left.min(READY_ATTEMPT_MAX)));
            let cid = req.command_id.clone();
            let passed = match self.node().spawn(sandbox_id, req).await {
                Ok(_) => self.exit_code(sandbox_id, &cid, cancel).await? == Some(0),
                Err(_) => false,
            };
            let _ = self.node().forget(sandbox_id, &cid).await;
            if passed {
                info!(
                    sandbox_id,
                    elapsed_ms = began.elapsed().as_millis() as u64,
                    "sandbox ready"
                );
                return Ok(());
            }
            tokio::select! {
                _ = cancel.cancelled() => {
                    return Err(ServiceError::Cancelled("cancelled by request".into()))
                }
                _ = tokio::time::sleep(READY_INTERVAL.min(left)) => {}
            }
        }
    }

    /// Waits for a command to end; its exit code (`None`: killed or its stream broke).
    async fn exit_code(
        &self,
        sandbox_id: &str,
        command_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<i32>, ServiceError> {
        let Ok(mut events) = self.node().attach(sandbox_id, command_id, 0, true).await else {
            return Ok(None);
        };
        loop {
            tokio::select! {
                _ = cancel.cancelled() => {
                    return Err(ServiceError::Cancelled("cancelled by request".into()))
                }
                ev = events.next() => match ev {
                    Some(Ok(AttachEvent::Exited(info))) => return Ok(info.exit_code),
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return Ok(None),
                },
            }
        }
    }
}
