//! One cgroup per command, below the cgroups the node delegates to the agent (cgroup v1): the
//! [`COMMAND_CGROUP_DIR`] of the `freezer` and `memory` hierarchies, handed over as open
//! descriptors of detached mounts of those directories ([`COMMAND_CGROUP_FDS_ENV`]) and reached
//! as `/proc/self/fd/N/...`. They are never mounted writable in the sandbox, so nothing there,
//! its root included, can make a cgroup or move a process (the agent above all: it could be
//! frozen or OOM-killed in a cgroup of a few pages) into one; the descriptors are close-on-exec
//! and the agent is not dumpable, so `/proc/1/fd` does not lead to them either.
//!
//! The child joins its command's cgroups between `fork` and `exec`, so everything it starts stays
//! in them however it daemonises (`setsid`, double fork): no process of the sandbox can move
//! itself out. The freezer cgroup lists every process of the command and freezes them, so a
//! kill cannot be outrun by forks; the memory cgroup counts the OOM kills of that command alone
//! (cgroup v1 counts an OOM kill in the victim's own memory cgroup only, not its parents').
//!
//! Where nothing is delegated (cgroup v2, a VM, the agent run on a host in tests),
//! [`CgroupRoots::create`] answers `None` and commands are tracked by their session only.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(doc)]
use cove_guest_protocol::COMMAND_CGROUP_DIR;
use cove_guest_protocol::{COMMAND_CGROUP_FDS_ENV, COMMAND_CGROUP_FIRST_FD};

/// Longest wait for a freezer cgroup to report `FROZEN` before its tasks are killed anyway.
const FREEZE_WAIT: Duration = Duration::from_millis(200);
/// Most delegated descriptors read (there are two hierarchies).
const MAX_DELEGATED: usize = 4;
/// `f_type` of a cgroup v1 file system (`CGROUP_SUPER_MAGIC`).
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;

/// The delegated parents found at start-up.
#[derive(Debug, Clone, Default)]
pub struct CgroupRoots {
    freezer: Option<PathBuf>,
    memory: Option<PathBuf>,
    /// The descriptors the paths go through, held for the agent's life.
    _held: Vec<Arc<OwnedFd>>,
}

/// The cgroups of one command.
#[derive(Debug)]
pub struct CommandCgroup {
    freezer: PathBuf,
    memory: Option<PathBuf>,
}

/// Takes descriptor `fd` when it is an open directory of a cgroup v1 file system, making it
/// close-on-exec (commands must not inherit it).
fn adopt(fd: i32) -> Option<OwnedFd> {
    // SAFETY: fstatfs writes into a zeroed struct of the right type; a closed `fd` gives -1.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    if st.f_type as i64 != CGROUP_SUPER_MAGIC {
        return None;
    }
    // SAFETY: fcntl on a descriptor just checked to be open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: the node passed this descriptor to this process for it alone; nothing else in the
    // agent opens or owns descriptor numbers it did not get from the kernel itself.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl CgroupRoots {
    /// Takes the delegated cgroups the node passed as descriptors ([`COMMAND_CGROUP_FDS_ENV`]);
    /// none without that variable. Call once, first thing at start-up (before any child is
    /// started: until then the descriptors are inherited across exec).
    pub fn discover() -> Self {
        let Ok(names) = std::env::var(COMMAND_CGROUP_FDS_ENV) else {
            return Self::default();
        };
        let mut roots = Self::default();
        for (i, name) in names.split(',').take(MAX_DELEGATED).enumerate() {
            let fd = COMMAND_CGROUP_FIRST_FD + i as i32;
            let slot = match name {
                "freezer" => &mut roots.freezer,
                "memory" => &mut roots.memory,
                _ => continue,
            };
            let Some(owned) = adopt(fd) else { continue };
            *slot = Some(PathBuf::from(format!("/proc/self/fd/{fd}")));
            roots._held.push(Arc::new(owned));
        }
        roots
    }

    /// Roots at explicit directories (tests).
    pub fn at(freezer: Option<PathBuf>, memory: Option<PathBuf>) -> Self {
        CgroupRoots {
            freezer,
            memory,
            _held: Vec::new(),
        }
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
