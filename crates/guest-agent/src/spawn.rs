//! Starting a process: `fork` + `execve`, with the child set up the way a command needs.
//!
//! `tokio::process` is not used: its own child reaping would race the agent's `waitpid(-1)`
//! [`crate::reaper`]. Everything the child needs is prepared (allocated) before the fork; between
//! fork and exec the child only makes system calls, which is what a multi-threaded parent allows.
//!
//! The child, in order: resets every signal disposition and unblocks all signals, calls `setsid`
//! (a new session and process group, so the whole tree can be signalled), joins the command's
//! cgroups (writes `0` to each `cgroup.procs` it was handed, see [`crate::command_cgroup`]), writes `1000` to
//! `/proc/self/oom_score_adj` (raising it needs no privilege, so it works where the agent cannot
//! lower its own: under memory pressure the kernel kills the command's processes, never the
//! agent, and no command can lower it back without `CAP_SYS_RESOURCE`), makes the pty its
//! controlling terminal when it has one, connects stdin/stdout/stderr, drops
//! to the user's groups, gid and uid, changes to the working directory and execs, searching
//! `PATH` like `execvp`. A failed setup step is reported to the parent through a close-on-exec
//! pipe and the spawn fails. A failed exec is not a spawn failure: like a shell, the child writes
//! `<argv0>: command not found` (exit 127) or `<argv0>: Permission denied` (exit 126) to its
//! stderr and exits.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cove_guest_protocol::PtySize;
use nix::fcntl::OFlag;
use nix::unistd::pipe2;
use tokio::sync::oneshot;

use crate::reaper::{ExitStatus, Reaper};

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// Arguments; `argv[0]` is the program, looked up in `path` when it has no `/`.
    pub argv: Vec<String>,
    /// Complete environment (`NAME=value`).
    pub env: Vec<(String, String)>,
    /// Working directory (already checked to exist).
    pub cwd: std::path::PathBuf,
    /// User id to run as.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Give the process a stdin pipe (otherwise `/dev/null`); ignored with `pty`.
    pub stdin_pipe: bool,
    /// Run on a new pseudo-terminal of this size instead of pipes.
    pub pty: Option<PtySize>,
}

/// The parent's ends of a started process's standard streams.
#[derive(Debug)]
pub enum SpawnedIo {
    /// Pipes.
    Pipes {
        /// Write end of the stdin pipe, when asked for.
        stdin: Option<OwnedFd>,
        /// Read end of stdout.
        stdout: OwnedFd,
        /// Read end of stderr.
        stderr: OwnedFd,
    },
    /// The master side of the process's terminal (input and output).
    Pty {
        /// Master descriptor (close-on-exec).
        master: OwnedFd,
    },
}

/// A started process.
#[derive(Debug)]
pub struct Spawned {
    /// Leader pid (also its process group and session id).
    pub pid: i32,
    /// Its standard streams.
    pub io: SpawnedIo,
    /// The leader's exit status, from the reaper.
    pub exit: oneshot::Receiver<ExitStatus>,
}

/// Why nothing was started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// There is no program to run.
    #[error("argv is empty")]
    EmptyArgv,
    /// An argument, variable or path holds a NUL byte.
    #[error("{0} contains a NUL byte")]
    Nul(&'static str),
    /// Pipes or `/dev/null` could not be opened.
    #[error("preparing the process: {0}")]
    Prepare(io::Error),
    /// `fork` failed (process limit, memory).
    #[error("fork failed: {0}")]
    Fork(io::Error),
    /// A setup step in the child failed.
    #[error("{stage} failed: {source}")]
    Setup {
        /// Which step.
        stage: Stage,
        /// The errno.
        source: io::Error,
    },
}

/// A setup step of the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Connecting stdin/stdout/stderr.
    Stdio,
    /// Setting the groups, gid and uid.
    Identity,
    /// Changing to the working directory.
    Chdir,
    /// Joining the command's cgroups.
    Cgroup,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Stdio => "connecting stdio",
            Stage::Identity => "switching user",
            Stage::Chdir => "changing directory",
            Stage::Cgroup => "joining the command's cgroup",
        })
    }
}

const STAGE_STDIO: i32 = 1;
const STAGE_IDENTITY: i32 = 2;
const STAGE_CHDIR: i32 = 3;
const STAGE_CGROUP: i32 = 4;

/// Everything the child touches, allocated before the fork.
struct Prepared {
    candidates: Vec<CString>,
    /// Owns the strings `argv_ptrs` points into.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// Owns the strings `env_ptrs` points into.
    _env: Vec<CString>,
    env_ptrs: Vec<*const libc::c_char>,
    cwd: CString,
    oom_path: CString,
    controlling_tty: bool,
    groups: Vec<libc::gid_t>,
    uid: u32,
    gid: u32,
    switch_identity: bool,
    not_found_msg: Vec<u8>,
    denied_msg: Vec<u8>,
    failed_prefix: Vec<u8>,
}

fn cstring(bytes: &[u8], what: &'static str) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::Nul(what))
}

/// The files `execvp` would try for `argv0` with this `PATH`.
pub fn exec_candidates(argv0: &str, path: &str) -> Vec<Vec<u8>> {
    if argv0.contains('/') {
        return vec![argv0.as_bytes().to_vec()];
    }
    path.split(':')
        .map(|dir| {
            let dir = if dir.is_empty() { "." } else { dir };
            format!("{}/{argv0}", dir.trim_end_matches('/')).into_bytes()
        })
        .collect()
}

impl Prepared {
    fn new(spec: &SpawnSpec) -> Result<Self, SpawnError> {
        let argv0 = spec.argv.first().ok_or(SpawnError::EmptyArgv)?;
        let path = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
            .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        let candidates = exec_candidates(argv0, path)
            .iter()
            .map(|c| cstring(c, "program path"))
            .collect::<Result<Vec<_>, _>>()?;
        let argv = spec
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes(), "an argument"))
            .collect::<Result<Vec<_>, _>>()?;
        let env = spec
            .env
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}").as_bytes(), "an environment variable"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut argv_ptrs: Vec<_> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut env_ptrs: Vec<_> = env.iter().map(|a| a.as_ptr()).collect();
        env_ptrs.push(std::ptr::null());
        // SAFETY: geteuid() cannot fail and has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let not_found_msg = if argv0.contains('/') {
            format!("{argv0}: No such file or directory\n")
        } else {
            format!("{argv0}: command not found\n")
        };
        Ok(Self {
            candidates,
            _argv: argv,
            argv_ptrs,
            _env: env,
            env_ptrs,
            cwd: cstring(spec.cwd.as_os_str().as_bytes(), "the working directory")?,
            oom_path: cstring(b"/proc/self/oom_score_adj", "path")?,
            controlling_tty: spec.pty.is_some(),
            groups: spec.groups.clone(),
            uid: spec.uid,
            gid: spec.gid,
            switch_identity: euid == 0 || spec.uid != euid,
            not_found_msg: not_found_msg.into_bytes(),
            denied_msg: format!("{argv0}: Permission denied\n").into_bytes(),
            failed_prefix: format!("{argv0}: cannot execute: ").into_bytes(),
        })
    }
}

/// Starts the process; the child first joins the cgroups whose `cgroup.procs` files are in
/// `join` (opened for writing). Blocking (fork, then waiting for the exec): call from a blocking
/// thread.
pub fn spawn(spec: &SpawnSpec, reaper: &Reaper, join: &[OwnedFd]) -> Result<Spawned, SpawnError> {
    let prepared = Prepared::new(spec)?;
    let cloexec = OFlag::O_CLOEXEC;
    let pipe = || pipe2(cloexec).map_err(|e| SpawnError::Prepare(e.into()));
    // (child's stdin, stdout, stderr; parent's ends)
    let (stdin_child, stdout_w, stderr_w, parent) = match spec.pty {
        Some(size) => {
            let pair = crate::pty::open(size).map_err(SpawnError::Prepare)?;
            let out = pair.slave.try_clone().map_err(SpawnError::Prepare)?;
            let err = pair.slave.try_clone().map_err(SpawnError::Prepare)?;
            (
                pair.slave,
                out,
                err,
                SpawnedIo::Pty {
                    master: pair.master,
                },
            )
        }
        None => {
            let (stdin_child, stdin_parent) = if spec.stdin_pipe {
                let (r, w) = pipe()?;
                (r, Some(w))
            } else {
                let null =
                    std::fs::File::open(Path::new("/dev/null")).map_err(SpawnError::Prepare)?;
                (OwnedFd::from(null), None)
            };
            let (stdout_r, stdout_w) = pipe()?;
            let (stderr_r, stderr_w) = pipe()?;
            (
                stdin_child,
                stdout_w,
                stderr_w,
                SpawnedIo::Pipes {
                    stdin: stdin_parent,
                    stdout: stdout_r,
                    stderr: stderr_r,
                },
            )
        }
    };
    let (report_r, report_w) = pipe2(cloexec).map_err(|e| SpawnError::Prepare(e.into()))?;
    let join: Vec<i32> = join.iter().map(|f| f.as_raw_fd()).collect();

    // SAFETY: sigset_t is plain data; sigfillset initialises it before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both sets are valid locals. Blocking every signal around fork keeps the agent's
    // handlers from running in the child before it resets them.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let mut lock = reaper.lock();
    // SAFETY: the child only calls async-signal-safe functions on memory prepared above and
    // never returns (see `child`).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        child(
            &prepared,
            stdin_child.as_raw_fd(),
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
            report_w.as_raw_fd(),
            &join,
        );
    }
    let fork_err = io::Error::last_os_error();
    let exit = (pid > 0).then(|| lock.register(pid));
    drop(lock);
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    let Some(exit) = exit else {
        return Err(SpawnError::Fork(fork_err));
    };
    drop((stdin_child, stdout_w, stderr_w, report_w));

    let mut report = Vec::with_capacity(8);
    let _ = std::fs::File::from(report_r).read_to_end(&mut report);
    if report.len() >= 8 {
        let stage = i32::from_ne_bytes([report[0], report[1], report[2], report[3]]);
        let errno = i32::from_ne_bytes([report[4], report[5], report[6], report[7]]);
        let stage = match stage {
            STAGE_STDIO => Stage::Stdio,
            STAGE_IDENTITY => Stage::Identity,
            STAGE_CGROUP => Stage::Cgroup,
            _ => Stage::Chdir,
        };
        return Err(SpawnError::Setup {
            stage,
            source: io::Error::from_raw_os_error(errno),
        });
    }
    Ok(Spawned {
        pid,
        io: parent,
        exit,
    })
}

/// The child between fork and exec. Only system calls on prepared memory.
fn child(p: &Prepared, stdin: i32, stdout: i32, stderr: i32, report: i32, join: &[i32]) -> ! {
    // SAFETY (whole function): every call is an async-signal-safe system call wrapper operating
    // on file descriptors we own and on memory prepared before the fork, which stays valid in the
    // child's copy of the address space; the function ends in execve or _exit.
    unsafe {
        for sig in 1..=crate::process_tree::MAX_SIGNAL {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::setsid();
        for &fd in join {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                fail(report, STAGE_CGROUP);
            }
        }

        let oom = libc::open(p.oom_path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if oom >= 0 {
            libc::write(oom, b"1000".as_ptr().cast(), 4);
            libc::close(oom);
        }

        if p.controlling_tty && libc::ioctl(stdin, libc::TIOCSCTTY, 0) < 0 {
            fail(report, STAGE_STDIO);
        }
        if libc::dup2(stdin, 0) < 0 || libc::dup2(stdout, 1) < 0 || libc::dup2(stderr, 2) < 0 {
            fail(report, STAGE_STDIO);
        }
        if p.switch_identity
            && (libc::syscall(libc::SYS_setgroups, p.groups.len(), p.groups.as_ptr()) < 0
                || libc::syscall(libc::SYS_setgid, p.gid) < 0
                || libc::syscall(libc::SYS_setuid, p.uid) < 0)
        {
            fail(report, STAGE_IDENTITY);
        }
        if libc::chdir(p.cwd.as_ptr()) < 0 {
            fail(report, STAGE_CHDIR);
        }

        let mut saw_denied = false;
        let mut other = 0;
        for c in &p.candidates {
            libc::execve(c.as_ptr(), p.argv_ptrs.as_ptr(), p.env_ptrs.as_ptr());
            match *libc::__errno_location() {
                libc::ENOENT | libc::ENOTDIR => {}
                libc::EACCES => saw_denied = true,
                e => {
                    other = e;
                    break;
                }
            }
        }
        // The spawn succeeded from the parent's view: close the report pipe, then behave like a
        // shell that could not run the program.
        libc::close(report);
        let code = if other != 0 {
            write_all(2, &p.failed_prefix);
            write_all(2, errno_text(other));
            write_all(2, b"\n");
            126
        } else if saw_denied {
            write_all(2, &p.denied_msg);
            126
        } else {
            write_all(2, &p.not_found_msg);
            127
        };
        libc::_exit(code)
    }
}

/// Reports a failed setup step to the parent and exits (only meaningful in the forked child).
fn fail(report: i32, stage: i32) -> ! {
    // SAFETY: the errno location is valid for the calling thread.
    let errno = unsafe { *libc::__errno_location() };
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&stage.to_ne_bytes());
    buf[4..].copy_from_slice(&errno.to_ne_bytes());
    write_all(report, &buf);
    // SAFETY: _exit ends the child without running the parent's destructors.
    unsafe { libc::_exit(127) }
}

/// `write` until done or failed; async-signal-safe.
fn write_all(fd: i32, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice for its length.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            return;
        }
        buf = &buf[n as usize..];
    }
}

/// Text of the errnos an exec can fail with (static, so the child needs no allocation).
fn errno_text(errno: i32) -> &'static [u8] {
    match errno {
        libc::ENOEXEC => b"Exec format error",
        libc::E2BIG => b"Argument list too long",
        libc::ENOMEM => b"Cannot allocate memory",
        libc::ETXTBSY => b"Text file busy",
        libc::ELOOP => b"Too many levels of symbolic links",
        libc::ENAMETOOLONG => b"File name too long",
        libc::EISDIR => b"Is a directory",
        libc::EPERM => b"Operation not permitted",
        libc::EIO => b"Input/output error",
        libc::EAGAIN => b"Resource temporarily unavailable",
        _ => b"exec failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        assert_eq!(exec_candidates("/bin/ls", "/x"), vec![b"/bin/ls".to_vec()]);
        assert_eq!(exec_candidates("./run", "/x"), vec![b"./run".to_vec()]);
        assert_eq!(
            exec_candidates("ls", "/usr/bin:/bin/::/opt"),
            vec![
                b"/usr/bin/ls".to_vec(),
                b"/bin/ls".to_vec(),
                b"./ls".to_vec(),
                b"/opt/ls".to_vec()
            ]
        );
    }
}
