//! Invoking the `runc` CLI: one method per runc verb, errors mapped to [`RuntimeError`].
//!
//! Every call runs `runc --root <state_root> ...` with stdin from `/dev/null` and a timeout, and is
//! killed if the caller's future is dropped.
//!
//! Passing descriptors to the container (`run_detached`) needs a `pre_exec` hook, the one
//! `unsafe` here.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::process::Command;

use crate::{RuntimeError, RuntimeState};

/// Longest time one runc invocation may take before it is killed.
const RUNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest error detail kept from runc's stderr, in bytes.
const MAX_DETAIL_BYTES: usize = 2048;

/// A runc binary plus its state root.
#[derive(Debug, Clone)]
pub(crate) struct Runc {
    binary: PathBuf,
    root: PathBuf,
    engine: Engine,
}

/// Which OCI runtime speaks behind the runc verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Engine {
    /// `runc`: the container runs on the host's kernel.
    Runc,
    /// gVisor's `runsc`: the container runs on gVisor's application kernel, on `platform`
    /// (`systrap`, `ptrace` or `kvm`). The agent's socket is a host socket it creates through
    /// `--host-uds=create`; the network is the node's namespace, joined by `runsc` itself
    /// (`--network=host` inside it) or gVisor's loopback only (`--network=none`).
    Runsc {
        /// `runsc --platform`.
        platform: String,
    },
}

/// The part of `runc state` we use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContainerState {
    /// Host pid of the container's init (0 once stopped).
    pub pid: u32,
    pub status: RuntimeState,
}

#[derive(Deserialize)]
struct StateJson {
    /// runsc says -1 for a stopped container.
    #[serde(default)]
    pid: i64,
    status: String,
}

impl Runc {
    pub(crate) fn new(binary: PathBuf, root: PathBuf) -> Self {
        Runc {
            binary,
            root,
            engine: Engine::Runc,
        }
    }

    /// gVisor's `runsc` on `platform`, with the same verbs.
    pub(crate) fn runsc(binary: PathBuf, root: PathBuf, platform: String) -> Self {
        Runc {
            binary,
            root,
            engine: Engine::Runsc { platform },
        }
    }

    /// runsc's platform (`None` for runc).
    pub(crate) fn platform(&self) -> Option<&str> {
        match &self.engine {
            Engine::Runc => None,
            Engine::Runsc { platform } => Some(platform),
        }
    }

    /// Whether this is gVisor's `runsc`.
    pub(crate) fn is_runsc(&self) -> bool {
        matches!(self.engine, Engine::Runsc { .. })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Runs `runc --version` synchronously (used once, at construction).
    pub(crate) fn check_version(&self) -> Result<(), RuntimeError> {
        let out = std::process::Command::new(&self.binary)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                RuntimeError::Unavailable(format!("cannot run {}: {e}", self.binary.display()))
            })?;
        if !out.status.success() {
            return Err(RuntimeError::Unavailable(format!(
                "{} --version failed: {}",
                self.binary.display(),
                message(&out.stderr)
            )));
        }
        Ok(())
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--root")
            .arg(&self.root)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Engine::Runsc { platform } = &self.engine {
            cmd.arg(format!("--platform={platform}"))
                .arg("--host-uds=create");
        }
        cmd
    }

    /// Runs a prepared command with the timeout; returns (success, stdout, stderr message).
    async fn run(
        &self,
        op: &'static str,
        id: &str,
        mut cmd: Command,
    ) -> Result<(bool, Vec<u8>, String), RuntimeError> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = cmd.spawn().map_err(|source| RuntimeError::Io {
            context: format!("spawn {} {op}", self.binary.display()),
            source,
        })?;
        let out = tokio::time::timeout(RUNC_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| RuntimeError::Command {
                op,
                id: id.to_string(),
                detail: format!("runc {op} timed out after {} s", RUNC_TIMEOUT.as_secs()),
            })?
            .map_err(|source| RuntimeError::Io {
                context: format!("wait for runc {op}"),
                source,
            })?;
        Ok((out.status.success(), out.stdout, message(&out.stderr)))
    }

    /// Runs `runc <args> <id>`; a failure that says the container does not exist is `NotFound`.
    async fn simple(&self, op: &'static str, id: &str, args: &[&str]) -> Result<(), RuntimeError> {
        let mut cmd = self.command();
        cmd.args(args).arg(id);
        let (ok, _, err) = self.run(op, id, cmd).await?;
        if ok {
            Ok(())
        } else if is_not_found(&err) {
            Err(RuntimeError::NotFound { id: id.to_string() })
        } else {
            Err(RuntimeError::Command {
                op,
                id: id.to_string(),
                detail: err,
            })
        }
    }

    /// Whether runc has a container `id`: its directory under the state root, which is what
    /// `runc run` refuses to reuse (read directly, without starting runc).
    pub(crate) fn exists(&self, id: &str) -> bool {
        match self.engine {
            Engine::Runc => self.root.join(id).exists(),
            Engine::Runsc { .. } => self.root.join(runsc_state_file(id)).exists(),
        }
    }

    /// `runc state <id>`; `None` when runc has no such container.
    pub(crate) async fn state(&self, id: &str) -> Result<Option<ContainerState>, RuntimeError> {
        let mut cmd = self.command();
        cmd.arg("state").arg(id);
        let (ok, stdout, err) = self.run("state", id, cmd).await?;
        if !ok {
            if is_not_found(&err) {
                return Ok(None);
            }
            return Err(RuntimeError::Command {
                op: "state",
                id: id.to_string(),
                detail: err,
            });
        }
        let parsed: StateJson =
            serde_json::from_slice(&stdout).map_err(|e| RuntimeError::Command {
                op: "state",
                id: id.to_string(),
                detail: format!("unreadable runc state output: {e}"),
            })?;
        let status = match parsed.status.as_str() {
            "created" | "creating" => RuntimeState::Created,
            "running" => RuntimeState::Running,
            "paused" | "pausing" => RuntimeState::Paused,
            "stopped" => RuntimeState::Stopped,
            other => {
                return Err(RuntimeError::Command {
                    op: "state",
                    id: id.to_string(),
                    detail: format!("unknown runc status {other:?}"),
                })
            }
        };
        Ok(Some(ContainerState {
            pid: u32::try_from(parsed.pid).unwrap_or(0),
            status,
        }))
    }

    /// `runc run --detach --bundle <bundle> --pid-file <pid_file> <id>`: creates and starts the
    /// container in one runc process (rather than `runc create` + `runc start`), with the
    /// container's stdout/stderr going to `log`; runc writes the init's host pid to `pid_file`
    /// and exits once the init runs. Returns whether runc succeeded.
    ///
    /// runc's own error messages go to `log` too (it shares its stdio with the container), so on
    /// failure the caller reads them from there. A crash of the caller meanwhile leaves at most a
    /// `creating`/`running` container under the state root, which adoption or a stop handles as
    /// before.
    ///
    /// `fds` are handed to the container's init as descriptors 3, 4, ... (`--preserve-fds`;
    /// runc only).
    ///
    /// runsc: with `netns` (the node's namespace of the sandbox), runsc itself runs in it and
    /// the sandbox uses it as its host network (`--network=host`: gVisor's own network stack
    /// refuses to start in a namespace on this kernel, see `gvisor.rs`); without, the sandbox
    /// has gVisor's loopback only (`--network=none`). runc joins the namespace through the
    /// config instead.
    pub(crate) async fn run_detached(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        log: std::fs::File,
        fds: &[OwnedFd],
        netns: Option<&Path>,
    ) -> Result<bool, RuntimeError> {
        let mut cmd = self.command();
        // Kept open until the child is spawned: its descriptor is what the child joins.
        let mut _netns_file = None;
        if self.is_runsc() {
            match netns {
                Some(path) => {
                    let file = std::fs::File::open(path).map_err(|source| RuntimeError::Io {
                        context: format!("open network namespace {}", path.display()),
                        source,
                    })?;
                    let fd = file.as_raw_fd();
                    cmd.arg("--network=host");
                    // SAFETY: the closure runs in the forked child before exec and only calls
                    // `setns`, which is async-signal-safe; `fd` stays open until after spawn.
                    unsafe {
                        cmd.pre_exec(move || {
                            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    _netns_file = Some(file);
                }
                None => {
                    cmd.arg("--network=none");
                }
            }
        }
        cmd.arg("run");
        if !fds.is_empty() && !self.is_runsc() {
            cmd.arg("--preserve-fds").arg(fds.len().to_string());
            let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
            // SAFETY: the closure runs in the forked child before exec and only calls `fcntl`
            // and `dup2`, which are async-signal-safe; `raw` was allocated before the fork.
            unsafe {
                cmd.pre_exec(move || place_fds(&raw));
            }
        }
        cmd.arg("--detach").arg("--bundle").arg(bundle);
        self.detached(cmd, "create", "run", id, pid_file, log).await
    }

    /// Runs `cmd` (a `run` or `restore` with its options so far) to the end with
    /// `--pid-file pid_file id`, its stdout and stderr into `log`; whether it succeeded. `op`
    /// names the step in errors, `verb` the subcommand. Errors: it cannot be spawned, or does
    /// not end within [`RUNC_TIMEOUT`].
    async fn detached(
        &self,
        mut cmd: Command,
        op: &'static str,
        verb: &str,
        id: &str,
        pid_file: &Path,
        log: std::fs::File,
    ) -> Result<bool, RuntimeError> {
        let log2 = log.try_clone().map_err(|source| RuntimeError::Io {
            context: "duplicate agent log handle".to_string(),
            source,
        })?;
        cmd.arg("--pid-file")
            .arg(pid_file)
            .arg(id)
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        let name = self.binary.display();
        let mut child = cmd.spawn().map_err(|source| RuntimeError::Io {
            context: format!("spawn {name} {verb}"),
            source,
        })?;
        let status = tokio::time::timeout(RUNC_TIMEOUT, child.wait())
            .await
            .map_err(|_| RuntimeError::Command {
                op,
                id: id.to_string(),
                detail: format!("{name} {verb} timed out after {} s", RUNC_TIMEOUT.as_secs()),
            })?
            .map_err(|source| RuntimeError::Io {
                context: format!("wait for {name} {verb}"),
                source,
            })?;
        Ok(status.success())
    }

    /// `runc kill <id> <signal>`: `signal` (a name such as `USR1`) to the container's init.
    pub(crate) async fn signal(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        let mut cmd = self.command();
        cmd.arg("kill").arg(id).arg(signal);
        let (ok, _, err) = self.run("signal", id, cmd).await?;
        if ok {
            return Ok(());
        }
        Err(RuntimeError::Command {
            op: "signal",
            id: id.to_string(),
            detail: err,
        })
    }

    /// `runsc checkpoint --image-path <image_dir> <id>`: saves the sandbox's memory, processes
    /// and open files into `image_dir` (`checkpoint.img`); the container ends `stopped`, and a
    /// failed checkpoint stops it too (runsc 2022-12). Its stderr is the error's detail.
    pub(crate) async fn checkpoint(&self, id: &str, image_dir: &Path) -> Result<(), RuntimeError> {
        let mut cmd = self.command();
        cmd.arg("checkpoint")
            .arg(format!("--image-path={}", image_dir.display()))
            .arg(id);
        let (ok, _, err) = self.run("checkpoint", id, cmd).await?;
        if ok {
            return Ok(());
        }
        Err(RuntimeError::Command {
            op: "checkpoint",
            id: id.to_string(),
            detail: err,
        })
    }

    /// `runsc --network=none restore --detach --bundle <bundle> --image-path <image_dir>
    /// --pid-file <pid_file> <id>`: the sandbox of a checkpoint carries on, with stdout and
    /// stderr going to `log` as for [`Runc::run_detached`]. Returns whether runsc succeeded
    /// (its errors are in `log`).
    pub(crate) async fn restore_detached(
        &self,
        id: &str,
        bundle: &Path,
        image_dir: &Path,
        pid_file: &Path,
        log: std::fs::File,
    ) -> Result<bool, RuntimeError> {
        let mut cmd = self.command();
        cmd.arg("--network=none")
            .arg("restore")
            .arg("--detach")
            .arg("--bundle")
            .arg(bundle)
            .arg(format!("--image-path={}", image_dir.display()));
        self.detached(cmd, "restore", "restore", id, pid_file, log)
            .await
    }

    /// `runc resume <id>` (thaws a container frozen by anyone; pausing is done through the
    /// freezer directly, `freezer.rs`).
    pub(crate) async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        self.simple("resume", id, &["resume"]).await
    }

    /// `runc kill <id> KILL`; a container that does not exist or no longer runs is fine.
    pub(crate) async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        let mut cmd = self.command();
        cmd.arg("kill").arg(id).arg("KILL");
        let (ok, _, err) = self.run("kill", id, cmd).await?;
        // runsc: a sandbox whose processes are gone refuses the connection to its control
        // server.
        if ok
            || is_not_found(&err)
            || err.contains("not running")
            || (self.is_runsc() && err.contains("connection refused"))
        {
            return Ok(());
        }
        Err(RuntimeError::Command {
            op: "kill",
            id: id.to_string(),
            detail: err,
        })
    }

    /// `runc delete -f <id>`; succeeds when there is no such container.
    pub(crate) async fn delete_force(&self, id: &str) -> Result<(), RuntimeError> {
        match self.simple("delete", id, &["delete", "--force"]).await {
            Err(RuntimeError::NotFound { .. }) => Ok(()),
            other => other,
        }
    }

    /// Ids of the containers under the state root: one directory per container, as `runc list`
    /// reads it. Read here rather than through `runc list`, which fails as a whole when a
    /// container is deleted (or is still being created) while it loads each one's state, as
    /// happens whenever sandboxes come and go during a listing. A container going away
    /// meanwhile may still be listed; callers treat the list as a hint (stopping is idempotent).
    pub(crate) async fn list(&self) -> Result<Vec<String>, RuntimeError> {
        let root = self.root.clone();
        let runsc = self.is_runsc();
        let listed = tokio::task::spawn_blocking(move || {
            if runsc {
                list_runsc_states(&root)
            } else {
                list_dirs(&root)
            }
        })
        .await
        .map_err(|e| RuntimeError::Io {
            context: "blocking task failed".to_string(),
            source: std::io::Error::other(e),
        })?;
        listed.map_err(|source| RuntimeError::Io {
            context: format!("list runc state root {}", self.root.display()),
            source,
        })
    }
}

/// Names of the directories in `root` (none when it is missing).
fn list_dirs(root: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry?;
        // `file_type` does not follow links; a vanished entry is simply not a directory.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(name) = entry.file_name().to_str() {
                ids.push(name.to_string());
            }
        }
    }
    ids.sort();
    Ok(ids)
}

/// The state file `runsc` keeps for a container `id` that is its sandbox's only container.
fn runsc_state_file(id: &str) -> String {
    format!("{id}_sandbox:{id}.state")
}

/// Ids of the containers whose `runsc` state files are in `root` (none when it is missing).
fn list_runsc_states(root: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry?;
        if let Some(name) = entry.file_name().to_str() {
            if let Some(id) = name
                .strip_suffix(".state")
                .and_then(|n| n.split_once("_sandbox:"))
                .filter(|(c, s)| c == s)
                .map(|(c, _)| c.to_string())
            {
                ids.push(id);
            }
        }
    }
    ids.sort();
    Ok(ids)
}

/// Whether a runc error message says the container does not exist.
fn is_not_found(message: &str) -> bool {
    message.contains("does not exist")
}

/// The human part of runc's stderr: the `msg="..."` fields of its logrus lines when present,
/// otherwise the trimmed text; at most [`MAX_DETAIL_BYTES`].
pub(crate) fn message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let mut msgs = Vec::new();
    for line in text.lines() {
        if let Some(start) = line.find("msg=\"") {
            let rest = &line[start + 5..];
            let mut out = String::new();
            let mut chars = rest.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => break,
                    c => out.push(c),
                }
            }
            msgs.push(out);
        } else if !line.trim().is_empty() {
            msgs.push(line.trim().to_string());
        }
    }
    let mut joined = msgs.join("; ");
    if joined.len() > MAX_DETAIL_BYTES {
        let mut cut = MAX_DETAIL_BYTES;
        while !joined.is_char_boundary(cut) {
            cut -= 1;
        }
        joined.truncate(cut);
        joined.push('…');
    }
    joined
}

/// In a forked child: moves the descriptors `raw` to 3, 4, ... without close-on-exec. Each is
/// first duplicated above every target, so no target overwrites a source not yet moved.
fn place_fds(raw: &[RawFd]) -> std::io::Result<()> {
    let first = cove_guest_protocol::COMMAND_CGROUP_FIRST_FD;
    let above = first + i32::try_from(raw.len()).unwrap_or(i32::MAX);
    let mut high = Vec::with_capacity(raw.len());
    for &fd in raw {
        // SAFETY: fcntl on a descriptor this process holds; returns a new one or -1.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above) };
        if dup < 0 {
            return Err(std::io::Error::last_os_error());
        }
        high.push(dup);
    }
    for (i, &fd) in high.iter().enumerate() {
        let target = first + i32::try_from(i).unwrap_or(i32::MAX);
        // SAFETY: dup2 between descriptors of this process; the copy is not close-on-exec.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_extracts_logrus_msgs() {
        let err = b"time=\"2026-11-29T10:14:54Z\" level=error msg=\"container does not exist\"\n";
        assert_eq!(message(err), "container does not exist");
        let err = b"time=\"x\" level=error msg=\"a \\\"quoted\\\" word\"\n";
        assert_eq!(message(err), "a \"quoted\" word");
        assert_eq!(message(b"  plain failure \n"), "plain failure");
    }

    #[test]
    fn runsc_containers_are_read_from_their_state_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "sb-a_sandbox:sb-a.state",
            "sb-a_sandbox:sb-a.lock",
            "sb-b_sandbox:sb-b.state",
            "other_sandbox:sb-b.state",
            "stray",
        ] {
            std::fs::write(dir.path().join(name), b"").expect("write");
        }
        assert_eq!(
            list_runsc_states(dir.path()).expect("list"),
            ["sb-a", "sb-b"]
        );
        assert!(list_runsc_states(&dir.path().join("missing"))
            .expect("missing root")
            .is_empty());
        let runsc = Runc::runsc("runsc".into(), dir.path().into(), "ptrace".into());
        assert!(runsc.exists("sb-a"));
        assert!(!runsc.exists("other"));
        assert_eq!(runsc.platform(), Some("ptrace"));
    }

    #[test]
    fn message_is_bounded() {
        let long = vec![b'x'; 10_000];
        assert!(message(&long).len() <= MAX_DETAIL_BYTES + '…'.len_utf8());
    }
}
