//! Cove's domain rules without I/O: ids, lifecycle transitions, resource limits, validation of
//! names and signals. Wire names live in `cove-api-types`; this crate says what is allowed.

pub mod ids;
pub mod lifecycle;
pub mod resources;
pub mod signals;
pub mod validate;

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
