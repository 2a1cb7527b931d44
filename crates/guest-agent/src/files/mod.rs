//! File operations inside the sandbox.
//!
//! The agent lives in the sandbox's mount namespace, so plain path operations already stay within
//! the sandbox's root; paths are still checked and normalized ([`path`]). Operations run as root;
//! the request's user resolves relative paths (against the home directory) and owns what is
//! created. Owner and group names come from the sandbox's `/etc/passwd` and `/etc/group`.
//! [`watch`] streams changes below a directory (inotify).

pub mod info;
pub mod list;
pub mod mkdir;
pub mod path;
pub mod read;
pub mod remove;
pub mod rename;
pub mod stat;
pub mod watch;
pub mod write;

use std::sync::Arc;

use crate::agent::Agent;
use crate::error::AgentError;

/// Runs blocking file work on the blocking pool.
pub async fn blocking<T, F>(agent: &Arc<Agent>, f: F) -> Result<T, AgentError>
where
    F: FnOnce(&Agent) -> Result<T, AgentError> + Send + 'static,
    T: Send + 'static,
{
    let agent = agent.clone();
    tokio::task::spawn_blocking(move || f(&agent))
        .await
        .map_err(|e| AgentError::internal(format!("file task failed: {e}")))?
}
