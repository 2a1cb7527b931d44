//! The Cove guest agent: a static binary that runs inside every sandbox (PID 1 of a runc
//! container) and serves the host over [`cove_guest_protocol`].
//!
//! - [`agent`]: state shared by handlers, and the start-up sequence.
//! - [`server`]: connections, handshake, routing of requests to handlers.
//! - [`commands`]: spawning, output, stdin, signals, kill, timeout of commands.
//! - [`spawn`]: fork/exec of one process; [`reaper`]: the one `waitpid(-1)` loop;
//!   [`process_tree`]: a command's session found through `/proc`.
//! - [`output_log`]: one command's output, in memory then spilled to the run dir.
//! - [`files`]: read, write, stat, list, mkdir, remove, rename.
//! - [`users`]: the sandbox's `/etc/passwd` and `/etc/group`; [`net`]: loopback up.
//! - [`config`]: command-line settings; [`error`]: errors as the host sees them.

pub mod agent;
pub mod commands;
pub mod config;
pub mod error;
pub mod files;
pub mod net;
pub mod output_log;
pub mod process_tree;
pub mod reaper;
pub mod server;
pub mod spawn;
pub mod stdio;
pub mod users;

pub use agent::run;
pub use config::{parse_args, Config, Invocation};
