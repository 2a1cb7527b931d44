//! E2B's pause (`POST /sandboxes/{id}/pause`) and connect (`POST /v2/sandboxes/{id}/connect`,
//! also v1 and `/resume`) over Cove's pause, suspend, resume and wake.
//!
//! A **full** pause (`memory` true or absent, the SDK's default `mode="full"`) keeps memory and
//! processes: a Cove suspend where the runtime saves memory (gVisor, qemu), else a Cove pause
//! (processes frozen by the cgroup freezer, memory held on the node until connect or kill). A
//! **filesystem** pause (`memory: false`) keeps only files: a Cove suspend on a runtime that
//! does not save memory (runc), so the connect that follows cold-boots the sandbox (its
//! processes start afresh). Where suspends keep memory a filesystem pause is refused (`400`).
//!
//! A connect with `memory: false` (the SDK's `on_resume="reboot"`) cold-boots a paused
//! sandbox: a frozen one is suspended and woken (on a runtime whose suspend drops memory), a
//! suspended one is woken. Strict pause (`requireHealthyGuest`) refuses with `503` while the
//! sandbox's guest agent is not healthy (Cove's `degraded` state); Cove never snapshots an
//! unresponsive guest, so `envdUnresponsiveAtPause` is always false and a connect never
//! answers `409 sandbox_snapshot_guest_agent_unresponsive`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cove_api_types::{LifecycleRequest, Sandbox, SandboxState};
use cove_control_plane::LifecycleVerb;
use serde::Deserialize;

use super::{e2b_state, parse_body};
use crate::error::RestError;
use crate::{E2b, DEFAULT_TIMEOUT_S};

/// `SandboxPauseRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PauseBody {
    /// `false`: filesystem only (the SDK's `mode="filesystem"`).
    memory: Option<bool>,
    /// Refuse when the guest agent is not healthy (the SDK's `strict=True`).
    require_healthy_guest: Option<bool>,
}

/// `ConnectSandboxV2` (and v1 `ConnectSandbox`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ConnectBody {
    timeout: Option<u64>,
    /// `false`: cold-boot a paused sandbox (the SDK's `on_resume="reboot"`).
    memory: Option<bool>,
}

/// How an E2B pause is done on this server's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PauseKind {
    /// A Cove pause: processes frozen, memory held on the node.
    Freeze,
    /// A Cove suspend that keeps memory (the runtime saves it).
    SuspendWithMemory,
    /// A Cove suspend of files only: the sandbox cold-boots when it comes back.
    SuspendFilesOnly,
}

impl PauseKind {
    /// E2B's `pauseMode` of a sandbox paused this way.
    pub(crate) fn mode(self) -> &'static str {
        match self {
            PauseKind::Freeze | PauseKind::SuspendWithMemory => "full",
            PauseKind::SuspendFilesOnly => "filesystem",
        }
    }
}

impl E2b {
    /// The Cove verb for an E2B pause that keeps (`memory`) or drops memory; `None` when the
    /// runtime cannot do it (a filesystem-only pause where suspends keep memory).
    pub(crate) fn pause_kind(&self, memory: bool) -> Option<PauseKind> {
        let caps = self.cp.capabilities();
        match (memory, caps.suspend_memory) {
            (true, true) => Some(PauseKind::SuspendWithMemory),
            (true, false) if caps.pause => Some(PauseKind::Freeze),
            (true, false) | (false, false) => Some(PauseKind::SuspendFilesOnly),
            (false, true) => None,
        }
    }

    /// E2B's `pauseMode` of a paused sandbox (`None` while it runs).
    pub(crate) fn pause_mode(&self, s: &Sandbox) -> Option<&'static str> {
        match s.state {
            SandboxState::Paused => Some(PauseKind::Freeze.mode()),
            SandboxState::Suspending | SandboxState::Suspended | SandboxState::Waking => {
                let memory = self.cp.capabilities().suspend_memory;
                Some(if memory { "full" } else { "filesystem" })
            }
            _ => None,
        }
    }

    /// Runs one lifecycle verb and waits for it.
    async fn run_verb(&self, s: &Sandbox, verb: LifecycleVerb) -> Result<(), RestError> {
        let op = self
            .cp
            .lifecycle(&s.id, verb, LifecycleRequest::default(), None)
            .await?;
        self.finish(&op.id).await
    }

    /// Cold-boots a paused sandbox for a connect with `memory: false`: a frozen one is
    /// suspended first (its wake then starts it afresh); `400` where a suspend keeps memory.
    async fn drop_memory(&self, s: &Sandbox) -> Result<(), RestError> {
        let paused = matches!(s.state, SandboxState::Paused | SandboxState::Suspended);
        if !paused {
            return Ok(());
        }
        if self.cp.capabilities().suspend_memory {
            return Err(RestError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "on_resume=\"reboot\" is not supported on the {} runtime: its paused \
                     sandboxes always resume with their memory",
                    self.cp.capabilities().runtime
                ),
            ));
        }
        if s.state == SandboxState::Paused {
            self.run_verb(s, LifecycleVerb::Suspend).await?;
        }
        Ok(())
    }
}

/// `POST /sandboxes/{id}/pause`: `204`; `409` when already paused; `400` for a filesystem
/// pause where the runtime keeps memory; `503` for a strict pause of a sandbox whose guest
/// agent is not healthy (it keeps running). A paused sandbox has no end of life until it is
/// connected again.
pub(super) async fn pause(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: PauseBody = parse_body(&body)?;
    let memory = req.memory.unwrap_or(true);
    let s = e2b.settled(&id).await?;
    if e2b_state(s.state) == Some("paused") {
        return Err(RestError::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ));
    }
    // A filesystem pause always needs a responding guest, as on E2B.
    let strict = req.require_healthy_guest.unwrap_or(false) || !memory;
    if strict && s.state == SandboxState::Degraded {
        return Err(RestError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("sandbox {id}'s guest agent is not responding; it was not paused"),
        ));
    }
    let Some(kind) = e2b.pause_kind(memory) else {
        return Err(RestError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "a filesystem-only pause is not supported on the {} runtime: its pauses keep \
                 memory (pause with mode=\"full\")",
                e2b.cp.capabilities().runtime
            ),
        ));
    };
    let verb = match kind {
        PauseKind::Freeze => LifecycleVerb::Pause,
        PauseKind::SuspendWithMemory | PauseKind::SuspendFilesOnly => LifecycleVerb::Suspend,
    };
    e2b.run_verb(&s, verb).await?;
    // Paused sandboxes do not expire; a connect (or auto-resume) sets a new end of life.
    e2b.cp.clear_expiry(&s.id).await?;
    tracing::info!(sandbox_id = %s.id, mode = kind.mode(), "e2b sandbox paused");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /v2/sandboxes/{id}/connect`: `200` when running, `201` after resuming a paused one
/// (cold-booted when `memory` is false); the timeout is only ever extended.
pub(super) async fn connect(
    State(e2b): State<E2b>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let req: ConnectBody = parse_body(&body)?;
    let s = e2b.settled(&id).await.map_err(|e| {
        if e.status == StatusCode::NOT_FOUND {
            RestError::new(
                StatusCode::NOT_FOUND,
                format!("paused sandbox {id} not found"),
            )
        } else {
            e
        }
    })?;
    let s = if req.memory == Some(false) {
        e2b.drop_memory(&s).await?;
        e2b.settled(&id).await?
    } else {
        s
    };
    let resumed = e2b
        .bring_back(&s, req.timeout.unwrap_or(DEFAULT_TIMEOUT_S))
        .await?;
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let s = e2b.cp.get_sandbox(&s.id).await?;
    Ok((status, axum::Json(e2b.sandbox_json(&s))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_parse_as_the_sdk_sends_them() {
        let p: PauseBody =
            serde_json::from_str(r#"{"memory":false,"requireHealthyGuest":true}"#).expect("json");
        assert_eq!(
            (p.memory, p.require_healthy_guest),
            (Some(false), Some(true))
        );
        let c: ConnectBody = serde_json::from_str(r#"{"timeout":30,"memory":false}"#).expect("c");
        assert_eq!((c.timeout, c.memory), (Some(30), Some(false)));
        assert_eq!(PauseKind::Freeze.mode(), "full");
        assert_eq!(PauseKind::SuspendFilesOnly.mode(), "filesystem");
    }
}
