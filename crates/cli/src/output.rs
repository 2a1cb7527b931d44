//! Writing to stdout without panicking when the reader has gone (`cove events | head`).
//!
//! `println!` panics on a closed pipe; every verb prints through [`outln!`](crate::outln) and
//! [`out!`](crate::out) instead, which end the process quietly with [`EXIT_BROKEN_PIPE`] the
//! way a program killed by `SIGPIPE` ends in a shell pipeline. Verbs that wait for events
//! (`events`, `files watch`) also watch for the reader leaving with [`stdout_closed`], so they
//! end at once instead of at their next line.

use std::fmt;
use std::io::Write as _;

use crate::exit::{EXIT_BROKEN_PIPE, EXIT_COVE_FAILED};

/// Prints a formatted line to stdout; see the module docs.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints formatted text to stdout; see the module docs.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*)) };
}

/// Writes `args` to stdout and flushes; a closed stdout ends the process (see the module docs).
pub fn write(args: fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        exit_on_write_error(&err);
    }
}

/// Ends the process after a failed write to stdout: quietly with [`EXIT_BROKEN_PIPE`] when the
/// reader is gone, else with a message and [`EXIT_COVE_FAILED`].
pub fn exit_on_write_error(err: &std::io::Error) -> ! {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(EXIT_BROKEN_PIPE));
    }
    let _ = writeln!(std::io::stderr(), "cove: cannot write to stdout: {err}");
    std::process::exit(i32::from(EXIT_COVE_FAILED));
}

/// Resolves when stdout is a pipe or socket whose reader has gone (`cove events | head` after
/// `head` exited); never for a terminal or a file that stays open.
pub async fn stdout_closed() {
    use std::os::fd::AsFd as _;
    let gone = tokio::task::spawn_blocking(|| {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let stdout = std::io::stdout();
        // No event asked for: poll reports only POLLERR (pipe reader gone) or POLLHUP.
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(n) if n > 0 => {
                    let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                    if revents.intersects(PollFlags::POLLERR | PollFlags::POLLHUP) {
                        return true;
                    }
                    // POLLNVAL or nothing we know: stop watching.
                    return false;
                }
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    if !gone {
        std::future::pending::<()>().await;
    }
}

/// Ends the process as [`exit_on_write_error`] does for a closed stdout.
pub fn exit_stdout_closed() -> ! {
    std::process::exit(i32::from(EXIT_BROKEN_PIPE));
}
