//! Public REST v1 and data-plane payloads of Cove: the one source of truth for wire names.
//!
//! Management API (bearer token): sandboxes, commands, files, templates, releases, operations.
//! Data plane (attachment token): command output as server-sent events and stdin.
//! Every request type rejects unknown fields (`deny_unknown_fields`), so a typo is a 400, not a
//! silently ignored option.

mod checkpoint;
mod command;
mod error;
mod file;
mod lifecycle;
mod metrics;
mod node;
mod operation;
mod org;
mod pool;
mod sandbox;
mod template;
mod volume;

pub use checkpoint::*;
pub use command::*;
pub use error::*;
pub use file::*;
pub use lifecycle::*;
pub use metrics::*;
pub use node::*;
pub use operation::*;
pub use org::*;
pub use pool::*;
pub use sandbox::*;
pub use template::*;
pub use volume::*;

// States, kinds and resources are the domain's; the API speaks them as they are.
pub use cove_domain::{
    CheckpointState, CommandState, EgressPolicy, EgressRule, EventType, OnExpiry, OperationKind,
    OperationState, Resources, ResourcesRequest, SandboxState,
};

/// [`DEFAULT_ORG`] as a serde default.
fn default_org() -> String {
    DEFAULT_ORG.to_string()
}

/// Header carrying the request id on every response (and accepted on requests).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Header for idempotent lifecycle calls.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
