//! Killing a container's init directly, instead of running `runc kill` (a Go binary start,
//! several milliseconds): a pidfd for the init, `pidfd_send_signal(SIGKILL)`, and a wait for the
//! pidfd to become readable (the process exited).
//!
//! The init is not our child (`runc run --detach` leaves it to the nearest reaper), so it is
//! waited for through its pidfd, never `waitpid`. A pid can be reused once its process is gone:
//! the pidfd is opened first and the process's start time checked afterwards, so the signal
//! goes to the init the runtime recorded or to nobody. Every container runs in its own pid
//! namespace, so the init's death takes every other process of the container with it.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Longest wait for a killed init to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// What [`kill_init`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Killed {
    /// The init was killed and has exited.
    Exited,
    /// The init (that pid with that start time) no longer runs: nothing to kill.
    Gone,
}

/// Blocking: sends SIGKILL to process `pid` if it still is the one that started at
/// `start_time` (clock ticks since boot, `/proc/<pid>/stat` field 22), calls `after_signal`
/// (the caller thaws the container there), and waits up to [`EXIT_TIMEOUT`] for it to exit.
///
/// Errors: the io error of `pidfd_open`, `pidfd_send_signal` or `poll` (other than the process
/// being gone), or `TimedOut` when the process outlives the wait (a frozen cgroup: thaw first).
pub(crate) fn kill_init(
    pid: u32,
    start_time: u64,
    start_time_of: impl Fn(u32) -> Option<u64>,
    after_signal: impl FnOnce(),
) -> std::io::Result<Killed> {
    let pidfd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(Killed::Gone),
        Err(e) => return Err(e),
    };
    // Checked after opening: from here on the pidfd names this process even if the pid is
    // reused, and the start time says whether it is the recorded init.
    if start_time_of(pid) != Some(start_time) {
        return Ok(Killed::Gone);
    }
    // SAFETY: a valid pidfd we own, a signal number, no siginfo (null) and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(Killed::Gone);
        }
        return Err(e);
    }
    after_signal();
    wait_exit(&pidfd)?;
    Ok(Killed::Exited)
}

/// `pidfd_open(pid, 0)`.
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: plain syscall with a pid and no flags; it returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("pidfd out of range"))?;
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Polls the pidfd until it is readable (the process exited), at most [`EXIT_TIMEOUT`].
fn wait_exit(pidfd: &OwnedFd) -> std::io::Result<()> {
    let began = Instant::now();
    loop {
        let left = EXIT_TIMEOUT.saturating_sub(began.elapsed());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the killed init did not exit within {} s",
                    EXIT_TIMEOUT.as_secs()
                ),
            ));
        }
        let mut pfd = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(());
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_killed_and_waited_for_and_a_reused_identity_is_left_alone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        // A wrong start time: the process is not the one recorded, so it is left alone.
        assert_eq!(
            kill_init(pid, 1, |_| Some(2), || {}).expect("kill"),
            Killed::Gone
        );
        // `Exited` only once the pidfd said so: the child is a zombie now, reaped here.
        assert_eq!(
            kill_init(pid, 7, |_| Some(7), || {}).expect("kill"),
            Killed::Exited
        );
        let status = child.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        // Gone for good (and, were the pid reused, not the recorded process either).
        assert_eq!(
            kill_init(pid, 7, |_| None, || {}).expect("kill"),
            Killed::Gone
        );
    }
}
