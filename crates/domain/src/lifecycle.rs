//! Sandbox lifecycle transitions (DESIGN.md §2). One table says which moves are legal; callers
//! turn an illegal one into `invalid_state` (409).

use cove_api_types::SandboxState::{self, *};

/// Whether a sandbox may move from `from` to `to`.
pub fn can_transition(from: SandboxState, to: SandboxState) -> bool {
    match (from, to) {
        (Creating, Running) => true,
        (Running, Paused) | (Paused, Running) => true,
        (Running | Paused, Suspending) => true,
        (Suspending, Suspended) => true,
        (Suspended, Waking) => true,
        (Waking, Running) => true,
        (Deleting, Deleted) => true,
        (Deleted, _) => false,
        (_, Deleting) => true,
        (Deleting, Failed) => true,
        (_, Failed) => !matches!(from, Failed),
        _ => false,
    }
}

/// Whether a sandbox in `state` runs commands and serves files.
pub fn serves_commands(state: SandboxState) -> bool {
    state == Running
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
    }
}
