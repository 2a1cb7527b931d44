//! `Kill` and `Signal`: ending or signalling a command's whole process tree.
//!
//! The tree is the command's cgroup (where it has one: everything it started, however it
//! daemonised) and its session: its process group plus every process that moved to another group
//! of the session. `Kill` sends SIGTERM, waits up to the grace period for the tree to die,
//! then sends SIGKILL until no process of the session remains, and only then answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cove_guest_protocol::{CommandInfo, ErrorCode};
use tracing::warn;

use super::tree::Tree;
use crate::error::AgentError;
use crate::process_tree::{self, MAX_SIGNAL};
use crate::state::Agent;

/// How often the tree is checked while it dies.
const POLL: Duration = Duration::from_millis(25);
/// Longest the agent keeps sending SIGKILL to a tree that does not die (processes stuck in
/// uninterruptible sleep).
const KILL_LIMIT: Duration = Duration::from_secs(20);
/// Longest grace period honoured.
const MAX_GRACE: Duration = Duration::from_secs(3600);

async fn alive(tree: &Tree) -> bool {
    let tree = tree.clone();
    tokio::task::spawn_blocking(move || tree.alive())
        .await
        .unwrap_or(false)
}

async fn signal_tree(tree: &Tree, signal: i32) {
    let tree = tree.clone();
    let _ = tokio::task::spawn_blocking(move || tree.signal(signal)).await;
}

/// Sends SIGKILL to the tree (its cgroup frozen meanwhile) until none of it remains (bounded by
/// `KILL_LIMIT`).
pub async fn kill_tree_now(tree: Tree) {
    let deadline = Instant::now() + KILL_LIMIT;
    loop {
        let t = tree.clone();
        let _ = tokio::task::spawn_blocking(move || t.kill()).await;
        tokio::time::sleep(POLL).await;
        if !alive(&tree).await {
            return;
        }
        if Instant::now() >= deadline {
            warn!(?tree, "processes survive SIGKILL");
            return;
        }
    }
}

/// Kills the command's tree (SIGTERM, then SIGKILL after `grace_ms`) and answers with its final
/// state once nothing of it runs.
pub async fn kill(
    agent: &Arc<Agent>,
    command_id: &str,
    grace_ms: u64,
) -> Result<CommandInfo, AgentError> {
    let command = agent.commands.get(command_id)?;
    if !command.exited() {
        command.mark_killing();
    }
    if let Some(tree) = command.live_tree() {
        if alive(&tree).await {
            signal_tree(&tree, libc::SIGTERM).await;
            let deadline = Instant::now() + Duration::from_millis(grace_ms).min(MAX_GRACE);
            while Instant::now() < deadline && alive(&tree).await {
                tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())))
                    .await;
            }
            if alive(&tree).await {
                kill_tree_now(tree).await;
            }
        }
    }
    let finished = tokio::time::timeout(Duration::from_secs(10), command.wait_exited()).await;
    if finished.is_err() {
        warn!(
            command_id,
            "command did not finish after its tree was killed"
        );
    }
    if let Some(tree) = command.live_tree() {
        if !alive(&tree).await {
            command.mark_tree_gone();
        }
    }
    Ok(command.info())
}

/// Delivers `signal` as-is to the command's process group.
pub async fn signal(agent: &Arc<Agent>, command_id: &str, signal: i32) -> Result<(), AgentError> {
    if !(1..=MAX_SIGNAL).contains(&signal) {
        return Err(AgentError::invalid(format!(
            "signal {signal} is not between 1 and {MAX_SIGNAL}"
        )));
    }
    let command = agent.commands.get(command_id)?;
    if command.exited() {
        return Err(AgentError::precondition(format!(
            "command {command_id:?} has exited"
        )));
    }
    match process_tree::send_signal(-command.sid(), signal) {
        Ok(()) => Ok(()),
        // The leader is gone and the command is finishing: nothing left to signal.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        Err(e) => Err(AgentError::new(ErrorCode::Internal, format!("kill: {e}"))),
    }
}
