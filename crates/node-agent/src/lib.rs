//! Node agent: owns the sandboxes of one host through a runtime, builds release root filesystems,
//! and talks to each sandbox's guest agent. [`NodeAgent`] implements the control plane's
//! [`cove_node_api::NodeApi`] in-process.

pub mod guest;
mod node;
pub mod snapshot;
pub mod template;

pub use node::{NodeAgent, NodeConfig};
