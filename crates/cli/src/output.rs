//! Writing to stdout without panicking when the reader has gone (`cove events | head`).
//!
//! `println!` panics on a closed pipe; every verb prints through [`outln!`](crate::outln) and
//! [`out!`](crate::out) instead, which end the process quietly with [`EXIT_BROKEN_PIPE`] the
//! way a program killed by `SIGPIPE` ends in a shell pipeline.

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
