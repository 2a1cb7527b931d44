//! The exit codes of `cove`, in one table.
//!
//! `exec`, `run` and `attach` exit with the command's own code. Every failure of `cove` itself
//! (a refused request, an unreachable server, a bad flag) exits [`EXIT_COVE_FAILED`], as
//! `docker run` exits 125, so a script can tell "the command exited 1" from "Cove failed".
//! A command that itself exits 125 is still reported as 125: `cove exec --json` prints the
//! command's own status on stdout to tell the two apart.

/// `cove` itself failed (the request was refused, the server unreachable, a flag wrong).
pub const EXIT_COVE_FAILED: u8 = 125;
/// The command's timeout fired (as with coreutils `timeout`).
pub const EXIT_TIMED_OUT: u8 = 124;
/// The user stopped waiting with repeated Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;
/// The command was killed (128 + SIGKILL): by the OOM killer, or by a suspend of its sandbox.
pub const EXIT_KILLED: u8 = 137;
/// Our stdout was closed before we were done (128 + SIGPIPE).
pub const EXIT_BROKEN_PIPE: u8 = 141;

/// The exit codes as `cove --help` shows them.
pub const EXIT_HELP: &str = "\
Exit codes:
  exec, run, attach   the command's exit code; 124 when its --timeout fired; 128+N when
                      signal N ended it (137 also when the OOM killer or a suspend of the
                      sandbox killed it; a line on stderr says which)
  125                 cove itself failed: a refused request, an unreachable server, a bad flag
                      (never the command's code, except a command that exits 125 itself:
                      `cove exec --json` prints the command's status to tell them apart)
  0                   every other verb that succeeded";
