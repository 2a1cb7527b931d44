//! Cove's ground floor: ids, states and kinds with their wire strings (one table each),
//! lifecycle transitions, [`Resources`] and their limits, the egress policy, and validation of
//! names and signals. No I/O and no workspace dependency: every other crate may stand on it.

pub mod egress;
pub mod ids;
pub mod lifecycle;
pub mod resources;
pub mod signals;
mod states;
pub mod validate;
pub mod volumes;
mod wire;

pub use egress::{EgressPolicy, EgressRule, Verdict};
pub use resources::{Resources, ResourcesRequest};
pub use states::{
    CheckpointState, CommandState, EventType, NodeState, OnExpiry, OperationKind, OperationState,
    SandboxState,
};

/// A request that breaks a domain rule; `field` names the offending input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidInput {
    /// The field (JSON path, e.g. `resources.memory_mib`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidInput {
    /// Builds an error for `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidInput {
            field: field.into(),
            message: message.into(),
        }
    }
}
