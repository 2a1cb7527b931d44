//! The state every request handler shares: settings, commands, the reaper, the user database
//! and Cove's reserved paths. Built once at start-up ([`crate::agent::run`]).

use std::path::PathBuf;

use crate::command_cgroup::CgroupRoots;
use crate::commands::CommandTable;
use crate::config::Config;
use crate::files::reserved::Reserved;
use crate::reaper::Reaper;
use crate::users::UserFiles;

/// Everything request handlers share.
pub struct Agent {
    /// Settings from the command line.
    pub config: Config,
    /// The commands started so far.
    pub commands: CommandTable,
    /// Collector of child exit statuses.
    pub reaper: Reaper,
    /// The sandbox's user database.
    pub users: UserFiles,
    /// Cove's own paths, out of the file API's reach.
    pub reserved: Reserved,
    /// Where commands get their own cgroups (none outside a runc sandbox on cgroup v1).
    pub cgroups: CgroupRoots,
}

impl Agent {
    /// Where spilled command output goes.
    pub fn output_dir(&self) -> PathBuf {
        self.config.run_dir.join("output")
    }

    /// Where scripts of long shell commands go.
    pub fn scripts_dir(&self) -> PathBuf {
        self.config.run_dir.join("scripts")
    }
}
