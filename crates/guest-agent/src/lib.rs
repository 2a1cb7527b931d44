//! The Cove guest agent: a static binary that runs inside every sandbox (PID 1 of a runc
//! container) and serves the host over [`cove_guest_protocol`].
//!
//! - [`agent`]: the start-up sequence; [`state`]: what every handler shares.
//! - [`server`]: connections (over any byte stream), handshake, the writer task;
//!   [`dispatch`]: request → handler; [`responder`]: a request's answers.
//! - [`commands`]: spawning, output, stdin, signals, kill, timeout of commands.
//! - [`spawn`]: fork/exec of one process; [`reaper`]: the one `waitpid(-1)` loop;
//!   [`process_tree`]: a command's session found through `/proc`; [`command_cgroup`]: its
//!   cgroups; [`pty`]: pseudo-terminals;
//!   [`oom`]: the sandbox's OOM-kill counter.
//! - [`output_log`]: one command's output, in memory then spilled to the run dir.
//! - [`files`]: read, write, stat, list, mkdir, remove, rename, watch (inotify), each as the
//!   request's user.
//! - [`users`]: the sandbox's `/etc/passwd` and `/etc/group`; [`net`]: loopback up.
//! - [`vport`]: the VM transport (mux streams over a virtio-serial port → the agent's socket).
//! - [`config`]: command-line settings; [`error`]: errors as the host sees them.
//!
//! # Promises and numbers
//! - Output: stdout and stderr share one offset space; up to `--output-memory-bytes` (1 MiB) per
//!   command in memory, then spilled to `<run-dir>/output/<id>.<n>.log`; at most
//!   `--output-cap-bytes` (1 GiB) kept: the first `cap − tail` bytes and the last
//!   `--output-tail-bytes` (half the cap); the middle of a longer output is dropped, `truncated`
//!   is set, and a reader positioned in it gets a `Gap` and continues at the tail. Offsets never
//!   shift. Nothing is held back waiting for a newline.
//! - PTY: a command may run on a pseudo-terminal (its controlling terminal); its output is
//!   `Stdout`, stdin is the terminal's input, `Resize` changes its size, closing stdin sends
//!   Ctrl-D. `TERM` defaults to `xterm-256color`.
//! - Cgroups: where the node delegates them (runc on cgroup v1), every command runs in a freezer
//!   and a memory cgroup of its own ([`command_cgroup`]), joined before exec, so kill and
//!   timeout reach every process it started, including daemons that left its session.
//! - OOM: commands run with `oom_score_adj` 1000 so the kernel kills them before the agent; a
//!   command is `oom_killed` when the OOM killer killed one of its processes (its own memory
//!   cgroup's count; without one: it ended by SIGKILL while the sandbox's count grew).
//! - A command is `Exited` once its leader is reaped and both pipes reached EOF, waiting at most
//!   2 s for EOF after the leader's exit (0.5 s when the agent killed the tree); a background
//!   process that keeps the pipes open does not hold the result, and its later output is dropped.
//! - Exit: `exit_code` for a normal exit; `signal` (and no `exit_code`) when killed by a signal.
//!   A program that cannot be executed exits 127 (not found) or 126 (not executable) with a
//!   shell-like message on stderr.
//! - Timeout: SIGKILL to the whole tree (cgroup and session) when `timeout_ms` passes;
//!   `timed_out` is set. Processes a command left running after its leader exited are killed at
//!   the deadline too (its result, already final, is unchanged).
//!   Kill: SIGTERM, then SIGKILL after the grace period (at most 1 h), answered once nothing of
//!   the tree runs (every process of the command's cgroup, session or process group, whatever
//!   it does with SIGTERM). Signals are delivered as-is to the process group.
//! - Shell commands over 100 KiB run from a script file in `<run-dir>/scripts/` (mode 0644).
//! - Listings hold at most 100 000 entries; large lists come in parts.
//! - Files: every operation runs with the request user's filesystem uid, gid and groups (the
//!   worker thread's, restored afterwards), so the user gets exactly the access its processes
//!   have (`PermissionDenied` otherwise) and owns what it creates; root keeps full access. A
//!   file a non-root user replaces keeps its owner and mode. `/.cove` (the agent's binary, socket
//!   and run dir) is left out of listings and watches and refused by every file operation
//!   before anything changes; pseudo-filesystems (`/proc`, `/sys`, `/dev`, cgroup, ...) are not
//!   written to (`InvalidArgument`).

pub mod agent;
pub mod command_cgroup;
pub mod commands;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod files;
pub mod net;
pub mod oom;
pub mod output_log;
pub mod process_tree;
pub mod pty;
pub mod reaper;
pub mod responder;
pub mod server;
pub mod spawn;
pub mod state;
pub mod stdio;
pub mod users;
pub mod vm_net;
pub mod vport;

pub use agent::run;
pub use config::{parse_args, Config, Invocation};
