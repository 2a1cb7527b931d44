//! What E2B's create asked for a sandbox's life (`autoPause`, `autoResume`, `timeout`), kept in
//! the sandbox's hidden marker (metadata key [`E2B_MARKER_KEY`], never shown to E2B clients) so
//! it survives pauses and server restarts; and auto-resume: envd traffic to a paused sandbox
//! whose create asked for `autoResume` wakes it first (a Cove wake, or a resume of a frozen
//! one), as E2B's proxy does.
//!
//! The marker's value is a small JSON object (`{"v":1,"onTimeout":"pause","autoResume":true,
//! "timeout":300}`); sandboxes created before it existed carry `"1"` and read as the defaults.

use cove_api_types::{LifecycleRequest, OnExpiry, Sandbox, SandboxState};
use cove_control_plane::LifecycleVerb;
use serde::{Deserialize, Serialize};

use super::E2B_MARKER_KEY;
use crate::error::RestError;
pub use crate::model::sandboxes::OnTimeout;
use crate::model::sandboxes::SandboxLifecycle;
use crate::{E2b, DEFAULT_TIMEOUT_S};

/// A sandbox's E2B lifecycle settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// Marker format version (1).
    v: u32,
    /// At the end of its timeout: `pause` (a Cove suspend) or `kill`.
    pub on_timeout: OnTimeout,
    /// Envd traffic wakes it while paused.
    pub auto_resume: bool,
    /// The timeout it was created with, seconds (used again when traffic wakes it).
    pub timeout: u64,
    /// A timeout pause keeps memory (E2B's `autoPauseMemory`, true unless the create asked for
    /// `mode="filesystem"`).
    #[serde(default = "yes")]
    pub auto_pause_memory: bool,
}

fn yes() -> bool {
    true
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            v: 1,
            on_timeout: OnTimeout::Kill,
            auto_resume: false,
            timeout: DEFAULT_TIMEOUT_S,
            auto_pause_memory: true,
        }
    }
}

impl Lifecycle {
    /// Settings from a create request.
    pub fn new(auto_pause: bool, auto_resume: bool, timeout: u64) -> Self {
        Lifecycle {
            v: 1,
            on_timeout: if auto_pause {
                OnTimeout::Pause
            } else {
                OnTimeout::Kill
            },
            auto_resume,
            timeout,
            auto_pause_memory: true,
        }
    }

    /// The same settings with E2B's `autoPauseMemory`.
    pub fn with_pause_memory(self, memory: bool) -> Self {
        Lifecycle {
            auto_pause_memory: memory,
            ..self
        }
    }

    /// The marker value that records them.
    pub fn marker(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "1".into())
    }

    /// The settings a sandbox's marker records (defaults for an old or unreadable marker, and
    /// for a sandbox not created through E2B).
    pub fn of(s: &Sandbox) -> Lifecycle {
        s.metadata
            .get(E2B_MARKER_KEY)
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default()
    }

    /// Whether a timeout pauses rather than kills.
    pub fn auto_pause(&self) -> bool {
        self.on_timeout == OnTimeout::Pause
    }

    /// What Cove's expiry does at the end of the timeout: delete for a kill; for a pause,
    /// suspend, or pause (the freezer) when `freeze` (the runtime keeps memory only that way and
    /// the create did not ask for a filesystem-only pause, `autoPauseMemory: false`).
    pub fn on_expiry(&self, freeze: bool) -> OnExpiry {
        match (self.auto_pause(), freeze && self.auto_pause_memory) {
            (false, _) => OnExpiry::Delete,
            (true, true) => OnExpiry::Pause,
            (true, false) => OnExpiry::Suspend,
        }
    }

    /// E2B's `lifecycle` object of a sandbox detail.
    pub fn wire(self) -> SandboxLifecycle {
        SandboxLifecycle {
            auto_resume: self.auto_resume,
            on_timeout: self.on_timeout,
        }
    }
}

impl E2b {
    /// Brings a paused sandbox back (a Cove wake of a suspended one, a resume of a frozen
    /// one), waiting for it; `true` when it had to. The E2B timeout then ends `timeout`
    /// seconds from now, or later when it already did.
    pub(crate) async fn bring_back(&self, s: &Sandbox, timeout: u64) -> Result<bool, RestError> {
        let verb = match s.state {
            SandboxState::Suspended => Some(LifecycleVerb::Wake),
            SandboxState::Paused => Some(LifecycleVerb::Resume),
            _ => None,
        };
        if let Some(verb) = verb {
            let op = self
                .cp
                .lifecycle(&s.id, verb, LifecycleRequest::default(), None)
                .await?;
            self.finish(&op.id).await?;
        }
        self.live_for(s, timeout).await?;
        Ok(verb.is_some())
    }
}

/// Auto-resume for envd traffic: a paused (or pausing, or waking) sandbox whose create asked
/// for `autoResume` is brought back and returned running; `None` for any other sandbox that is
/// not running (the caller answers the proxy's "not found").
pub(crate) async fn resume_for_traffic(e2b: &E2b, s: Sandbox) -> Option<Sandbox> {
    let lifecycle = Lifecycle::of(&s);
    if !lifecycle.auto_resume || super::e2b_state(s.state) != Some("paused") {
        return None;
    }
    let s = e2b.settled(crate::e2b_id(&s.id)).await.ok()?;
    match e2b.bring_back(&s, lifecycle.timeout).await {
        Ok(_) => {
            tracing::info!(sandbox_id = %s.id, "e2b auto-resume: woken by envd traffic");
        }
        Err(e) => {
            tracing::warn!(sandbox_id = %s.id, error = %e, "e2b auto-resume failed");
            return None;
        }
    }
    let s = e2b.cp.get_sandbox(&s.id).await.ok()?;
    (s.state == SandboxState::Running).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_old_ones_read_as_defaults() {
        let l = Lifecycle::new(true, true, 120);
        let back: Lifecycle = serde_json::from_str(&l.marker()).expect("json");
        assert_eq!(back, l);
        assert!(back.auto_pause());
        assert_eq!(back.on_expiry(false), OnExpiry::Suspend);
        assert_eq!(back.on_expiry(true), OnExpiry::Pause);
        let files_only = back.with_pause_memory(false);
        assert_eq!(files_only.on_expiry(true), OnExpiry::Suspend);
        assert_eq!(Lifecycle::default().on_expiry(false), OnExpiry::Delete);
        assert_eq!(Lifecycle::default().on_expiry(true), OnExpiry::Delete);
        assert_eq!(
            serde_json::to_string(&l.wire()).expect("json"),
            r#"{"autoResume":true,"onTimeout":"pause"}"#
        );
        assert!(serde_json::from_str::<Lifecycle>("1").is_err());
        assert_eq!(Lifecycle::default().timeout, DEFAULT_TIMEOUT_S);
    }
}
