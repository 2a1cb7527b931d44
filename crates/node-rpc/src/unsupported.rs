//! Node calls the protocol does not carry yet: file extended attributes. A remote
//! node answers them with `NodeError::Unsupported` naming the call, so a cluster reports it
//! instead of silently doing nothing (the in-process node does them all).

use cove_node_api::NodeError;

/// The error of a call a remote node does not take yet.
pub(crate) fn not_carried(what: &str) -> NodeError {
    NodeError::Unsupported(format!(
        "{what} on a remote node (node protocol v{}) is not supported yet; use the in-process node",
        crate::PROTOCOL_VERSION
    ))
}
