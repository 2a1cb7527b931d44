//! File operations inside the sandbox.
//!
//! The agent lives in the sandbox's mount namespace, so plain path operations already stay within
//! the sandbox's root; paths are still checked and normalized ([`path`]). Every operation runs
//! with the request user's filesystem identity ([`identity`]): the kernel grants exactly what
//! that user's own processes would get (`PermissionDenied` otherwise), what is created belongs
//! to the user, and root keeps full access. The user also resolves relative paths (against the
//! home directory). Owner and group names come from the sandbox's `/etc/passwd` and `/etc/group`.
//! Cove's own paths are out of reach ([`reserved`]); pseudo-filesystems are not written to
//! ([`pseudo`]). [`watch`] streams changes below a directory (inotify); [`xattrs`] reads and
//! replaces `user.` extended attributes.

pub mod identity;
pub mod info;
pub mod list;
pub mod mkdir;
pub mod path;
pub mod pseudo;
pub mod read;
pub mod remove;
pub mod rename;
pub mod reserved;
pub mod stat;
pub mod watch;
pub mod write;
pub mod xattrs;

use std::path::PathBuf;
use std::sync::Arc;

use cove_guest_protocol::GuestPath;

use self::identity::Identity;
use crate::error::AgentError;
use crate::state::Agent;
use crate::users::{User, UserDb};

/// Who a file request acts for: the user and the user database it was resolved in.
pub struct Actor {
    /// The sandbox's users and groups, as read for this request.
    pub db: UserDb,
    /// The request's user (root when none is named).
    pub user: User,
}

impl Actor {
    /// Resolves the request's user (`UnknownUser` for a name not in `/etc/passwd`).
    pub fn of(agent: &Agent, user: Option<&str>) -> Result<Actor, AgentError> {
        let db = agent.users.load();
        let user = db.resolve(user)?;
        Ok(Actor { db, user })
    }

    /// The absolute, normalized path of a request path (relative ones from the user's home).
    pub fn path(&self, path: &GuestPath) -> Result<PathBuf, AgentError> {
        path::resolve(path, self.user.home_path())
    }

    /// Makes the calling (blocking) thread act as the user until the result is dropped.
    pub fn assume(&self) -> Result<Identity, AgentError> {
        Identity::assume(&self.user, &self.db)
    }
}

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
