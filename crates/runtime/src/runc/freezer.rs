//! Pause and resume through the cgroup freezer, written directly instead of running
//! `runc pause` / `runc resume` (a Go binary start each, several milliseconds).
//!
//! runc keeps no paused flag of its own: `runc state` reads the freezer (`freezer.state` on
//! cgroup v1, `cgroup.freeze` on v2) of the container's cgroup, so a container frozen here is
//! `paused` to runc, and `runc resume`, `runc delete --force` and re-adoption after a restart
//! see it as runc would have left it. The freezer's directory is read once per container from
//! `/proc/<init pid>/cgroup` (v1: the `freezer` hierarchy, as on this project's hybrid hosts;
//! v2: the unified cgroup) and cached by the runtime.
//!
//! Freezing can take a moment while tasks are stopped (v1 reports `FREEZING`, v2 `frozen 0`):
//! the state is polled, at most [`SETTLE`], with the write repeated as runc does; a freeze
//! that does not settle is undone (thawed) and reported.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cgroups;
use crate::RuntimeError;

/// Longest wait for the freezer to reach the asked state.
const SETTLE: Duration = Duration::from_secs(5);
/// First pause between polls of the freezer state; doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_micros(20);
/// Longest pause between polls.
const MAX_POLL: Duration = Duration::from_millis(5);

/// The freezer of one container's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Freezer {
    /// cgroup v1: the container's directory in the `freezer` hierarchy.
    V1(PathBuf),
    /// cgroup v2: the container's unified cgroup directory.
    V2(PathBuf),
}

impl Freezer {
    /// The freezer of the cgroup process `pid` is in.
    pub(crate) fn of_pid(pid: u32) -> Result<Freezer, RuntimeError> {
        let paths = cgroups::paths_of_pid(pid)?;
        Freezer::from_paths(&paths).ok_or_else(|| {
            RuntimeError::Unavailable(format!(
            "process {pid} is in no freezer cgroup (neither a v1 freezer hierarchy nor cgroup v2)"
        ))
        })
    }

    fn from_paths(paths: &[(String, PathBuf)]) -> Option<Freezer> {
        let find = |name: &str| {
            paths
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, p)| p.clone())
        };
        find("freezer")
            .map(Freezer::V1)
            .or_else(|| find("unified").map(Freezer::V2))
    }

    /// Freezes every task of the cgroup and waits until they are. Errors: `NotFound` when the
    /// cgroup is gone (the container stopped); a freeze that does not settle is thawed again.
    pub(crate) async fn freeze(&self, id: &str) -> Result<(), RuntimeError> {
        let this = self.clone();
        let id_owned = id.to_string();
        let frozen = tokio::task::spawn_blocking(move || this.set(&id_owned, true))
            .await
            .map_err(super::join_error)?;
        if frozen.is_err() {
            let this = self.clone();
            let id_owned = id.to_string();
            let _ = tokio::task::spawn_blocking(move || this.set(&id_owned, false)).await;
        }
        frozen
    }

    /// Thaws every task of the cgroup and waits until it is thawed. `NotFound` when the
    /// cgroup is gone.
    pub(crate) async fn thaw(&self, id: &str) -> Result<(), RuntimeError> {
        let this = self.clone();
        let id = id.to_string();
        tokio::task::spawn_blocking(move || this.set(&id, false))
            .await
            .map_err(super::join_error)?
    }

    /// Whether the cgroup is frozen now.
    #[cfg(test)]
    pub(crate) fn is_frozen(&self) -> std::io::Result<bool> {
        self.reached(true)
    }

    /// Whether the cgroup is frozen or being frozen (what runc reports as `paused`): anything
    /// but thawed.
    pub(crate) fn is_paused(&self) -> std::io::Result<bool> {
        self.reached(false).map(|thawed| !thawed)
    }

    /// Blocking: writes the asked state and polls until it is reached.
    fn set(&self, id: &str, frozen: bool) -> Result<(), RuntimeError> {
        let began = Instant::now();
        let mut wait = FIRST_POLL;
        loop {
            self.write(frozen)
                .map_err(|e| io_error(id, self.control(), e))?;
            if self
                .reached(frozen)
                .map_err(|e| io_error(id, self.control(), e))?
            {
                return Ok(());
            }
            if began.elapsed() >= SETTLE {
                return Err(RuntimeError::Command {
                    op: if frozen { "pause" } else { "resume" },
                    id: id.to_string(),
                    detail: format!(
                        "the cgroup freezer did not settle within {} s",
                        SETTLE.as_secs()
                    ),
                });
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(MAX_POLL);
        }
    }

    /// Blocking: clears the freeze of every cgroup below this one (at most [`MAX_BELOW`] of
    /// them, [`MAX_DEPTH`] deep; the walk reads cgroup directories only, which hold no links).
    /// The cgroup itself is left as it is. Errors are skipped: a cgroup may go meanwhile.
    pub(crate) fn thaw_below(&self) {
        let mut below = Vec::new();
        collect_below(self.dir(), 0, &mut below);
        // Deepest first.
        below.sort_by_key(|(depth, _)| std::cmp::Reverse(*depth));
        for (_, dir) in below {
            let this = match self {
                Freezer::V1(_) => Freezer::V1(dir),
                Freezer::V2(_) => Freezer::V2(dir),
            };
            let _ = this.write(false);
        }
    }

    fn dir(&self) -> &Path {
        match self {
            Freezer::V1(dir) | Freezer::V2(dir) => dir,
        }
    }

    /// The file written to freeze or thaw.
    fn control(&self) -> PathBuf {
        match self {
            Freezer::V1(dir) => dir.join("freezer.state"),
            Freezer::V2(dir) => dir.join("cgroup.freeze"),
        }
    }

    fn write(&self, frozen: bool) -> std::io::Result<()> {
        let value: &[u8] = match (self, frozen) {
            (Freezer::V1(_), true) => b"FROZEN",
            (Freezer::V1(_), false) => b"THAWED",
            (Freezer::V2(_), true) => b"1",
            (Freezer::V2(_), false) => b"0",
        };
        write_existing(&self.control(), value)
    }

    fn reached(&self, frozen: bool) -> std::io::Result<bool> {
        match self {
            Freezer::V1(dir) => {
                let state = std::fs::read_to_string(dir.join("freezer.state"))?;
                Ok(state.trim() == if frozen { "FROZEN" } else { "THAWED" })
            }
            Freezer::V2(dir) => {
                let events = std::fs::read_to_string(dir.join("cgroup.events"))?;
                let want = if frozen { "frozen 1" } else { "frozen 0" };
                Ok(events.lines().any(|l| l.trim() == want))
            }
        }
    }
}

/// What the runtime keeps of a container it started or adopted: its freezer and its init
/// (pid and start time, so a reused pid is never taken for it). With these, the state of a
/// started container is read from `/proc` and the freezer instead of running `runc state`.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    /// The container's freezer.
    pub(crate) freezer: Freezer,
    pid: u32,
    start_time: u64,
}

impl Tracked {
    /// The freezer and init identity of the container whose init is `pid`.
    pub(crate) fn of_pid(pid: u32) -> Result<Tracked, RuntimeError> {
        let freezer = Freezer::of_pid(pid)?;
        let start_time = start_time(pid).ok_or_else(|| RuntimeError::NotFound {
            id: format!("process {pid}"),
        })?;
        Ok(Tracked {
            freezer,
            pid,
            start_time,
        })
    }

    /// `Some(paused)` while the init still runs (the same process, not a zombie); `None` when
    /// it does not (then only runc can tell what the container is).
    pub(crate) fn live_state(&self) -> Option<bool> {
        if start_time(self.pid) != Some(self.start_time) {
            return None;
        }
        self.freezer.is_paused().ok()
    }

    /// Blocking: kills the init if it still runs and waits for it to exit (`kill.rs`), within
    /// a bound whatever the sandbox did to its cgroups.
    ///
    /// Frozen tasks do not die, and a dying init waits for every task of its pid namespace; a
    /// freezer cgroup below the container's (cgroup v1 and v2 both nest them) may hold some,
    /// frozen by the sandbox itself. So: freeze the container's cgroup (nothing inside runs, so
    /// nothing freezes anything again), clear the freeze of every cgroup below it, send the
    /// SIGKILL, and thaw the container's cgroup: every task wakes with the kill pending.
    pub(crate) fn kill(&self, id: &str) -> Result<super::kill::Killed, RuntimeError> {
        let running = start_time(self.pid) == Some(self.start_time);
        if running {
            // Best effort: a cgroup already gone means a container already gone.
            let _ = self.freezer.write(true);
            self.freezer.thaw_below();
        }
        let thaw = || match self.freezer.set(id, false) {
            Ok(()) | Err(RuntimeError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        };
        let mut thawed = Ok(());
        let killed = super::kill::kill_init(self.pid, self.start_time, start_time, || {
            thawed = thaw();
        });
        if running {
            // Also when the init was gone meanwhile: never leave the container frozen here.
            thawed = thawed.and_then(|()| thaw());
        }
        let killed = killed.map_err(|source| RuntimeError::Io {
            context: format!("kill the init (pid {}) of {id}", self.pid),
            source,
        })?;
        thawed?;
        Ok(killed)
    }
}

/// Most cgroups below a container's that [`Freezer::thaw_below`] visits.
const MAX_BELOW: usize = 4096;
/// Deepest nesting below a container's cgroup that [`Freezer::thaw_below`] visits (cgroup v1
/// allows any depth; what the sandbox could make there is bounded by its own limits).
const MAX_DEPTH: usize = 32;

/// Adds every cgroup directory below `dir` (with its depth) to `out`, within the bounds.
fn collect_below(dir: &Path, depth: usize, out: &mut Vec<(usize, PathBuf)>) {
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() >= MAX_BELOW {
            return;
        }
        // `file_type` does not follow links (and cgroup file systems have none).
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let path = entry.path();
            out.push((depth + 1, path.clone()));
            collect_below(&path, depth + 1, out);
        }
    }
}

/// The start time (clock ticks since boot) of process `pid`, if it runs and is no zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses; the last `)` ends it.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first().is_some_and(|s| *s == "Z" || *s == "X") {
        return None;
    }
    // Field 22 of stat(5) (`starttime`) is the 20th after the command.
    fields.get(19)?.parse().ok()
}

/// Writes `value` to an existing cgroup file (never creates one: a missing cgroup is an error).
fn write_existing(path: &Path, value: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value)
}

fn io_error(id: &str, path: PathBuf, e: std::io::Error) -> RuntimeError {
    if e.kind() == ErrorKind::NotFound {
        return RuntimeError::NotFound { id: id.to_string() };
    }
    RuntimeError::Io {
        context: format!("cgroup freezer {}", path.display()),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_freezer_wins_over_unified_and_v2_is_used_alone() {
        let hybrid = vec![
            (
                "cpu".to_string(),
                PathBuf::from("/sys/fs/cgroup/cpu/cove/a"),
            ),
            (
                "freezer".to_string(),
                PathBuf::from("/sys/fs/cgroup/freezer/cove/a"),
            ),
        ];
        assert_eq!(
            Freezer::from_paths(&hybrid),
            Some(Freezer::V1(PathBuf::from("/sys/fs/cgroup/freezer/cove/a")))
        );
        let v2 = vec![(
            "unified".to_string(),
            PathBuf::from("/sys/fs/cgroup/cove/a"),
        )];
        assert_eq!(
            Freezer::from_paths(&v2),
            Some(Freezer::V2(PathBuf::from("/sys/fs/cgroup/cove/a")))
        );
        assert_eq!(Freezer::from_paths(&[]), None);
    }

    #[test]
    fn the_start_time_of_this_process_is_read() {
        let me = std::process::id();
        let t = start_time(me).expect("own start time");
        assert_eq!(start_time(me), Some(t));
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn every_cgroup_below_is_thawed_and_the_top_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let top = dir.path().to_path_buf();
        let deep = top.join("cove-commands").join("evil").join("deeper");
        std::fs::create_dir_all(&deep).expect("mkdir");
        for d in [
            &top,
            &top.join("cove-commands"),
            &top.join("cove-commands/evil"),
            &deep,
        ] {
            std::fs::write(d.join("cgroup.freeze"), "1\n").expect("write");
        }
        Freezer::V2(top.clone()).thaw_below();
        let read = |d: &Path| std::fs::read_to_string(d.join("cgroup.freeze")).expect("read");
        assert_eq!(
            read(&top).trim(),
            "1",
            "the container's own state is the caller's"
        );
        for d in [
            top.join("cove-commands"),
            top.join("cove-commands/evil"),
            deep,
        ] {
            assert_eq!(read(&d).trim(), "0", "{} still frozen", d.display());
        }
    }

    #[test]
    fn v2_states_are_read_from_cgroup_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cgroup.freeze"), "0\n").expect("write");
        std::fs::write(dir.path().join("cgroup.events"), "populated 1\nfrozen 1\n").expect("write");
        let f = Freezer::V2(dir.path().to_path_buf());
        f.set("sb-test", true).expect("freeze");
        let written = std::fs::read_to_string(dir.path().join("cgroup.freeze")).expect("read");
        assert_eq!(written.trim(), "1");
        assert!(f.is_frozen().expect("state"));
        let gone = Freezer::V2(dir.path().join("missing"));
        assert!(matches!(
            gone.set("sb-test", true),
            Err(RuntimeError::NotFound { .. })
        ));
    }
}
