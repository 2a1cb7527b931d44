//! A command's processes as one unit: its session (and process group), plus its cgroup where it
//! has one ([`crate::command_cgroup`]), which also holds what left the session.

use std::sync::Arc;

use crate::command_cgroup::CommandCgroup;
use crate::process_tree;

/// Everything a command started. Cheap to clone; the methods block (they read `/proc` and
/// cgroup files), so async callers run them on a blocking thread.
#[derive(Debug, Clone)]
pub struct Tree {
    sid: i32,
    cgroup: Option<Arc<CommandCgroup>>,
}

impl Tree {
    /// The tree of the session `sid`, and of `cgroup` when the command has one.
    pub fn new(sid: i32, cgroup: Option<Arc<CommandCgroup>>) -> Self {
        Tree { sid, cgroup }
    }

    /// Whether any live process of the command remains.
    pub fn alive(&self) -> bool {
        self.cgroup.as_ref().is_some_and(|c| c.alive()) || process_tree::alive(self.sid)
    }

    /// Sends `signal` to every process of the command.
    pub fn signal(&self, signal: i32) {
        process_tree::signal_tree(self.sid, signal);
        if let Some(c) = &self.cgroup {
            c.signal_all(signal);
        }
    }

    /// SIGKILLs every process of the command; the cgroup is frozen meanwhile, so no fork
    /// escapes the kill.
    pub fn kill(&self) {
        process_tree::signal_tree(self.sid, libc::SIGKILL);
        if let Some(c) = &self.cgroup {
            c.kill_frozen();
        }
    }

    /// Removes the command's cgroup once it is empty (a no-op while processes remain).
    pub fn remove_cgroup(&self) {
        if let Some(c) = &self.cgroup {
            c.remove();
        }
    }
}
