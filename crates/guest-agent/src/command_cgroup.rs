//! One cgroup per command, below the cgroups the node delegates to the agent
//! (`/sys/fs/cgroup/{freezer,memory}/`[`COMMAND_CGROUP_DIR`], cgroup v1).
//!
//! The child joins its command's cgroups between `fork` and `exec`, so everything it starts stays
//! in them however it daemonises (`setsid`, double fork): a non-root process cannot move itself
//! out, because the cgroup files belong to root. The freezer cgroup lists every process of the
//! command and freezes them, so a kill cannot be outrun by forks; the memory cgroup counts the
//! OOM kills of that command alone (cgroup v1 counts an OOM kill in the victim's own memory
//! cgroup only, not its parents'). Root inside the sandbox may move its own processes between
//! these cgroups; the sandbox's limits sit above them, read-only, either way.
//!
//! Where the delegated cgroups are missing (cgroup v2, a VM, the agent run on a host in tests),
//! [`CgroupRoots::create`] answers `None` and commands are tracked by their session only.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cove_guest_protocol::COMMAND_CGROUP_DIR;

/// Where cgroup v1 hierarchies are mounted inside a sandbox.
const CGROUP_MOUNT: &str = "/sys/fs/cgroup";
/// Longest wait for a freezer cgroup to report `FROZEN` before its tasks are killed anyway.
const FREEZE_WAIT: Duration = Duration::from_millis(200);

/// The delegated parents found at start-up.
#[derive(Debug, Clone, Default)]
pub struct CgroupRoots {
    freezer: Option<PathBuf>,
    memory: Option<PathBuf>,
}

/// The cgroups of one command.
#[derive(Debug)]
pub struct CommandCgroup {
    freezer: PathBuf,
    memory: Option<PathBuf>,
}

fn delegated(hierarchy: &str) -> Option<PathBuf> {
    let dir = Path::new(CGROUP_MOUNT)
        .join(hierarchy)
        .join(COMMAND_CGROUP_DIR);
    let procs = dir.join("cgroup.procs");
    let writable = nix::unistd::access(&procs, nix::unistd::AccessFlags::W_OK).is_ok();
    writable.then_some(dir)
}

impl CgroupRoots {
    /// Looks for the delegated `freezer` and `memory` cgroups (writable `cgroup.procs`).
    pub fn discover() -> Self {
        Self::at(delegated("freezer"), delegated("memory"))
    }

    /// Roots at explicit directories (tests).
    pub fn at(freezer: Option<PathBuf>, memory: Option<PathBuf>) -> Self {
        CgroupRoots { freezer, memory }
    }

    /// Whether commands get their own cgroups.
    pub fn enabled(&self) -> bool {
        self.freezer.is_some()
    }

    /// Makes the cgroups of command `id` (an id already validated as a safe file name); `None`
    /// without a delegated freezer. A leftover cgroup of the same name is reused. Errors: the
    /// kernel refused `mkdir`.
    pub fn create(&self, id: &str) -> io::Result<Option<CommandCgroup>> {
        let Some(freezer_root) = &self.freezer else {
            return Ok(None);
        };
        let make = |root: &Path| -> io::Result<PathBuf> {
            let dir = root.join(id);
            match std::fs::create_dir(&dir) {
                Ok(()) => Ok(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(dir),
                Err(e) => Err(e),
            }
        };
        let freezer = make(freezer_root)?;
        let memory = match &self.memory {
            Some(root) => match make(root) {
                Ok(dir) => Some(dir),
                Err(e) => {
                    let _ = std::fs::remove_dir(&freezer);
                    return Err(e);
                }
            },
            None => None,
        };
        Ok(Some(CommandCgroup { freezer, memory }))
    }
}

impl CommandCgroup {
    /// `cgroup.procs` of each of the command's cgroups, opened for the child to write `0` to
    /// (which moves the writer) between fork and exec.
    pub fn join_files(&self) -> io::Result<Vec<OwnedFd>> {
        std::iter::once(&self.freezer)
            .chain(self.memory.as_ref())
            .map(|dir| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(dir.join("cgroup.procs"))
                    .map(OwnedFd::from)
            })
            .collect()
    }

    /// Live (not zombie) processes of the command, in its freezer cgroup and any cgroup made
    /// below it.
    pub fn members(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        collect_procs(&self.freezer, &mut pids, 0);
        pids.retain(|&pid| !is_zombie(pid));
        pids
    }

    /// Whether any process of the command still runs.
    pub fn alive(&self) -> bool {
        !self.members().is_empty()
    }

    /// Sends `signal` to every process of the command; returns how many there were.
    pub fn signal_all(&self, signal: i32) -> usize {
        let pids = self.members();
        for &pid in &pids {
            if pid > 1 {
                let _ = crate::process_tree::send_signal(pid, signal);
            }
        }
        pids.len()
    }

    /// Freezes the command (no process of it runs or forks until thawed), SIGKILLs every
    /// process, and thaws it so the kills take effect. Returns how many processes were found.
    pub fn kill_frozen(&self) -> usize {
        let frozen = self.set_freezer("FROZEN").is_ok();
        if frozen {
            let deadline = Instant::now() + FREEZE_WAIT;
            while self.freezer_state().as_deref() != Some("FROZEN") && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let n = self.signal_all(libc::SIGKILL);
        if frozen {
            let _ = self.set_freezer("THAWED");
        }
        n
    }

    /// OOM kills the kernel counted for this command's processes (`None` without a memory
    /// cgroup or counter).
    pub fn oom_kills(&self) -> Option<u64> {
        let text =
            std::fs::read_to_string(self.memory.as_ref()?.join("memory.oom_control")).ok()?;
        crate::oom::parse_counter(&text)
    }

    /// Removes the command's cgroups (and any below them); only empty cgroups can go, so this
    /// is a no-op while a process of the command runs. Returns whether they are gone.
    pub fn remove(&self) -> bool {
        let mut gone = true;
        for dir in std::iter::once(&self.freezer).chain(self.memory.as_ref()) {
            gone &= remove_tree(dir, 0);
        }
        gone
    }

    fn set_freezer(&self, state: &str) -> io::Result<()> {
        std::fs::write(self.freezer.join("freezer.state"), state)
    }

    fn freezer_state(&self) -> Option<String> {
        std::fs::read_to_string(self.freezer.join("freezer.state"))
            .ok()
            .map(|s| s.trim().to_string())
    }
}

/// Deepest cgroup nesting walked below a command's cgroup (root may make more; they are bounded
/// so a hostile tree cannot make the agent recurse without end).
const MAX_DEPTH: usize = 16;

fn collect_procs(dir: &Path, out: &mut Vec<i32>, depth: usize) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if depth >= MAX_DEPTH {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_procs(&e.path(), out, depth + 1);
            }
        }
    }
}

fn remove_tree(dir: &Path, depth: usize) -> bool {
    if depth < MAX_DEPTH {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    remove_tree(&e.path(), depth + 1);
                }
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

fn is_zombie(pid: i32) -> bool {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(stat) => crate::process_tree::parse_stat(&stat).is_none_or(|p| p.is_dead()),
        Err(_) => true,
    }
}
