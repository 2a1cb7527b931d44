//! Issue 27, finding 2: root in a sandbox cannot freeze or starve its own guest agent through
//! the cgroups the node delegates for commands. Once, the delegated `freezer` and `memory`
//! cgroups were mounted writable inside: root made `cove-commands/evil`, moved PID 1 (the
//! agent, same user) there and froze it or gave it a limit of a few pages; the sandbox then
//! ran nothing more, and its delete failed (`internal`) while it kept its memory, its user
//! namespace and its network. Now those cgroups are reached by the agent alone (descriptors
//! the node hands it), and kill/delete thaw every cgroup below the sandbox's before killing.
//!
//! Each attack runs as root with every path it might use (a new cgroup, the command's own); the
//! sandbox must still run commands afterwards, its agent must sit in no command cgroup, and its
//! delete must succeed within a bound and leave nothing of it on the node.

use std::time::Duration;

use cove_api_types::OperationState;
use cove_e2e::{client, mounts_with, root_sh, runc_containers, sandbox, server, sh};

/// Longest time an attack command may take (it ends at once when refused).
const ATTACK_BOUND: Duration = Duration::from_secs(30);
/// Longest time the delete of an attacked sandbox may take.
const DELETE_BOUND: Duration = Duration::from_secs(90);

/// Moves PID 1 into a freezer cgroup of the sandbox's and freezes it: a new cgroup below
/// `cove-commands`, else the attacking command's own cgroup.
const FREEZE_ATTACK: &str = r#"
f=/sys/fs/cgroup/freezer/cove-commands
own=/sys/fs/cgroup/freezer$(awk -F: '$2=="freezer"{print $3}' /proc/self/cgroup)
for target in "$f/evil" "$own"; do
  mkdir -p "$target" 2>/dev/null
  if echo 1 > "$target/cgroup.procs" 2>/dev/null; then
    echo "moved PID 1 into $target"
    echo FROZEN > "$target/freezer.state" 2>/dev/null && echo "froze $target"
  fi
done
echo attack-done
"#;

/// Moves PID 1 into a memory cgroup limited to 1 MiB: a new cgroup below `cove-commands`, else
/// the attacking command's own.
const MEMORY_ATTACK: &str = r#"
m=/sys/fs/cgroup/memory/cove-commands
own=/sys/fs/cgroup/memory$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
for target in "$m/evil" "$own"; do
  mkdir -p "$target" 2>/dev/null
  echo 1048576 > "$target/memory.limit_in_bytes" 2>/dev/null && echo "limited $target"
  if echo 1 > "$target/cgroup.procs" 2>/dev/null; then
    echo "moved PID 1 into $target"
  fi
done
echo attack-done
"#;

async fn attacked_sandbox_survives_and_is_deleted(attack: &str) {
    let c = client();
    let id = sandbox(&c, "base").await;
    // The attack itself: on a vulnerable node it never returns (the agent that would report
    // its exit is frozen), so it is bounded; its output is only informative.
    let attempt = tokio::time::timeout(ATTACK_BOUND, root_sh(&c, &id, attack)).await;
    let report = match &attempt {
        Ok(o) => format!("{}{}", o.stdout_text(), o.stderr_text()),
        Err(_) => "the attack command never ended".to_string(),
    };

    // The sandbox still runs commands, and its agent is in no command cgroup.
    let alive =
        tokio::time::timeout(ATTACK_BOUND, sh(&c, &id, "echo alive; cat /proc/1/cgroup")).await;
    let delete_started = std::time::Instant::now();
    let deleted = async {
        let op = c.delete_sandbox(&id).await.expect("delete");
        c.wait_operation(&op.id, DELETE_BOUND).await
    };
    let deleted = tokio::time::timeout(DELETE_BOUND, deleted).await;
    let alive =
        alive.unwrap_or_else(|_| panic!("the sandbox runs no command after the attack ({report})"));
    let out = alive.stdout_text();
    assert!(out.starts_with("alive\n"), "{out} ({report})");
    assert!(
        !out.contains("cove-commands"),
        "the agent was moved into a command cgroup: {out} ({report})"
    );
    assert!(
        attempt.is_ok_and(|o| !o.stdout_text().contains("moved PID 1")),
        "root moved the agent: {report}"
    );

    // Delete: within its bound, succeeded, and nothing of the sandbox left on the node.
    let op = deleted
        .unwrap_or_else(|_| panic!("delete did not finish within {DELETE_BOUND:?}"))
        .expect("delete finishes");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "delete failed after {:?}: {:?}",
        delete_started.elapsed(),
        op.error
    );
    let data_dir = &server().data_dir;
    assert!(
        !runc_containers(data_dir).contains(&id),
        "the container is left"
    );
    assert!(
        mounts_with(&id).is_empty(),
        "mounts left: {:?}",
        mounts_with(&id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_cannot_freeze_its_agent() {
    attacked_sandbox_survives_and_is_deleted(FREEZE_ATTACK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_cannot_starve_its_agent_of_memory() {
    attacked_sandbox_survives_and_is_deleted(MEMORY_ATTACK).await;
}
