//! Sandbox lifecycle transitions (DESIGN.md §2). One table says which moves are legal; callers
//! turn an illegal one into `invalid_state` (409).
//!
//! Besides the forward moves, two roll-backs are legal: `suspending → running|paused` (a
//! suspend that failed or was cancelled before its snapshot was complete) and
//! `waking → suspended` (a wake that failed; the snapshot is kept). A create cancelled before
//! it finished goes `creating → deleted`.
//!
//! A running sandbox whose guest agent dies or stops answering goes `running → degraded`; the
//! node's repair returns it `degraded → running`, or it ends `degraded → failed` (or is
//! deleted meanwhile, `degraded → deleting`).

use crate::EventType;
use crate::SandboxState::{self, *};

/// Whether a sandbox may move from `from` to `to`.
pub fn can_transition(from: SandboxState, to: SandboxState) -> bool {
    match (from, to) {
        (Creating, Running) => true,
        (Creating, Deleted) => true,
        (Running, Paused) | (Paused, Running) => true,
        (Running, Degraded) | (Degraded, Running) => true,
        (Running | Paused, Suspending) => true,
        (Suspending, Suspended) => true,
        (Suspending, Running | Paused) => true,
        (Suspended, Waking) => true,
        (Waking, Running) => true,
        (Waking, Suspended) => true,
        (Deleting, Deleted) => true,
        (Deleted, _) => false,
        (_, Deleting) => true,
        (Deleting, Failed) => true,
        (_, Failed) => !matches!(from, Failed),
        _ => false,
    }
}

/// The event a move records, if any (intermediate states such as `suspending` record none;
/// `sandbox.created` is recorded when the sandbox is accepted).
pub fn event_for(from: SandboxState, to: SandboxState) -> Option<EventType> {
    Some(match (from, to) {
        (Paused, Running) => EventType::SandboxResumed,
        (Waking, Running) => EventType::SandboxWoken,
        (Degraded, Running) => EventType::SandboxRepaired,
        (_, Degraded) => EventType::SandboxDegraded,
        (_, Running) => EventType::SandboxRunning,
        (_, Paused) => EventType::SandboxPaused,
        (_, Suspended) => EventType::SandboxSuspended,
        (_, Deleted) => EventType::SandboxDeleted,
        (_, Failed) => EventType::SandboxFailed,
        _ => return None,
    })
}

/// Whether a sandbox in `state` runs commands and serves files.
pub fn serves_commands(state: SandboxState) -> bool {
    state == Running
}

/// How the `state_reason` of a `failed` sandbox that stays on its node ends (its `READY` did not
/// pass): it serves commands and files until it is deleted, and reconciliation leaves it be.
pub const KEPT_FOR_INSPECTION: &str = "(kept for inspection until deleted)";

/// Whether a sandbox in `state` with `reason` is a failed one kept on its node for inspection
/// (see [`KEPT_FOR_INSPECTION`]).
pub fn kept_for_inspection(state: SandboxState, reason: Option<&str>) -> bool {
    state == Failed && reason.is_some_and(|r| r.ends_with(KEPT_FOR_INSPECTION))
}

/// Whether a sandbox in `state` is gone for the API (answers `sandbox_not_found`).
pub fn is_gone(state: SandboxState) -> bool {
    state == Deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_and_illegal_moves() {
        assert!(can_transition(Creating, Running));
        assert!(can_transition(Running, Deleting));
        assert!(can_transition(Failed, Deleting));
        assert!(can_transition(Deleting, Deleted));
        assert!(!can_transition(Deleted, Running));
        assert!(!can_transition(Deleted, Deleting));
        assert!(!can_transition(Creating, Paused));
        assert!(!can_transition(Suspended, Running));
        assert!(!can_transition(Suspended, Paused));
        assert!(!can_transition(Paused, Waking));
    }

    #[test]
    fn suspend_and_wake_moves_and_their_roll_backs() {
        assert!(can_transition(Running, Suspending));
        assert!(can_transition(Paused, Suspending));
        assert!(can_transition(Suspending, Suspended));
        assert!(can_transition(Suspending, Running));
        assert!(can_transition(Suspending, Paused));
        assert!(can_transition(Suspended, Waking));
        assert!(can_transition(Waking, Running));
        assert!(can_transition(Waking, Suspended));
        assert!(can_transition(Suspended, Deleting));
        assert!(!can_transition(Suspending, Waking));
        assert!(!can_transition(Waking, Paused));
    }

    #[test]
    fn degraded_moves() {
        assert!(can_transition(Running, Degraded));
        assert!(can_transition(Degraded, Running));
        assert!(can_transition(Degraded, Failed));
        assert!(can_transition(Degraded, Deleting));
        assert!(!can_transition(Paused, Degraded));
        assert!(!can_transition(Suspended, Degraded));
        assert!(!can_transition(Creating, Degraded));
        assert!(!can_transition(Degraded, Paused));
        assert!(!can_transition(Degraded, Suspending));
        assert!(!can_transition(Degraded, Degraded));
        assert!(!serves_commands(Degraded));
        assert_eq!(
            event_for(Running, Degraded),
            Some(EventType::SandboxDegraded)
        );
        assert_eq!(
            event_for(Degraded, Running),
            Some(EventType::SandboxRepaired)
        );
        assert_eq!(event_for(Degraded, Failed), Some(EventType::SandboxFailed));
    }

    #[test]
    fn moves_name_their_events() {
        assert_eq!(
            event_for(Creating, Running),
            Some(EventType::SandboxRunning)
        );
        assert_eq!(event_for(Paused, Running), Some(EventType::SandboxResumed));
        assert_eq!(event_for(Waking, Running), Some(EventType::SandboxWoken));
        assert_eq!(event_for(Running, Paused), Some(EventType::SandboxPaused));
        assert_eq!(
            event_for(Suspending, Suspended),
            Some(EventType::SandboxSuspended)
        );
        assert_eq!(
            event_for(Deleting, Deleted),
            Some(EventType::SandboxDeleted)
        );
        assert_eq!(event_for(Running, Suspending), None);
        assert_eq!(event_for(Suspended, Waking), None);
    }
}
