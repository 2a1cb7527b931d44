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
//! delete must succeed within a bound and leave nothing of it on the node. A third test freezes
//! the agent in a cgroup below the sandbox's from the host (what a sandbox once could do from
//! inside): the delete still ends within its bound.

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

/// Runs a command future on its own task within [`ATTACK_BOUND`]: `None` when it did not end
/// in time or failed (the helpers panic on an API error, such as a sandbox no longer running),
/// so the test goes on to delete the sandbox either way.
async fn bounded<F>(f: F) -> Option<cove_e2e::Output>
where
    F: std::future::Future<Output = cove_e2e::Output> + Send + 'static,
{
    let task = tokio::spawn(f);
    let abort = task.abort_handle();
    match tokio::time::timeout(ATTACK_BOUND, task).await {
        Ok(Ok(out)) => Some(out),
        Ok(Err(_)) => None,
        Err(_) => {
            abort.abort();
            None
        }
    }
}

async fn attacked_sandbox_survives_and_is_deleted(attack: &str) {
    let c = client();
    let id = sandbox(&c, "base").await;
    // The attack itself: on a vulnerable node it never returns (the agent that would report
    // its exit is frozen), so it is bounded; its output is only informative.
    let attempt = bounded({
        let (c, id, attack) = (c.clone(), id.clone(), attack.to_string());
        async move { root_sh(&c, &id, &attack).await }
    })
    .await;
    let report = match &attempt {
        Some(o) => format!("{}{}", o.stdout_text(), o.stderr_text()),
        None => "the attack command never ended".to_string(),
    };

    // The sandbox still runs commands, and its agent is in no command cgroup.
    let alive = bounded({
        let (c, id) = (c.clone(), id.clone());
        async move { sh(&c, &id, "echo alive; cat /proc/1/cgroup").await }
    })
    .await;
    let delete_started = std::time::Instant::now();
    let deleted = async {
        let op = c.delete_sandbox(&id).await.expect("delete");
        c.wait_operation(&op.id, DELETE_BOUND).await
    };
    let deleted = tokio::time::timeout(DELETE_BOUND, deleted).await;
    let alive =
        alive.unwrap_or_else(|| panic!("the sandbox runs no command after the attack ({report})"));
    let out = alive.stdout_text();
    assert!(out.starts_with("alive\n"), "{out} ({report})");
    assert!(
        !out.contains("cove-commands"),
        "the agent was moved into a command cgroup: {out} ({report})"
    );
    assert!(
        attempt.is_some_and(|o| !o.stdout_text().contains("moved PID 1")),
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

/// Host pid of sandbox `id`'s init (its guest agent), from runc's state.
fn agent_pid(id: &str) -> u32 {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(server().data_dir.join("runc"))
        .args(["state", id])
        .output()
        .expect("runc state");
    assert!(out.status.success(), "runc state {id} failed");
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).expect("state json");
    let pid = state["pid"].as_u64().expect("pid") as u32;
    assert!(pid > 1, "a real pid: {state}");
    pid
}

/// Kill and delete thaw every cgroup below the sandbox's own before killing, so a delete ends
/// within its bound even when the agent and a command sit frozen in a cgroup below (done here
/// from the host, the way a sandbox could once do it from inside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_frozen_below_its_cgroup_is_deleted_within_a_bound() {
    let c = client();
    let id = sandbox(&c, "base").await;
    c.create_command(&id, &cove_e2e::shell("sleep 600"))
        .await
        .expect("start a command");
    let pid = agent_pid(&id);
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("agent's cgroups");
    let rel = own
        .lines()
        .find_map(|l| l.split_once(":freezer:").map(|(_, p)| p.to_string()))
        .expect("a v1 freezer cgroup (this machine is hybrid)");
    let sandbox_cgroup =
        std::path::Path::new("/sys/fs/cgroup/freezer").join(rel.trim_start_matches('/'));
    let evil = sandbox_cgroup.join("cove-commands").join("evil-from-host");
    std::fs::create_dir_all(&evil).expect("mkdir");
    std::fs::write(evil.join("cgroup.procs"), pid.to_string()).expect("move the agent");
    std::fs::write(evil.join("freezer.state"), "FROZEN").expect("freeze");
    // A second level, frozen too, with nothing in it.
    std::fs::create_dir_all(evil.join("deeper")).expect("mkdir");
    std::fs::write(evil.join("deeper").join("freezer.state"), "FROZEN").expect("freeze");

    let began = std::time::Instant::now();
    let deleted = async {
        let op = c.delete_sandbox(&id).await.expect("delete");
        c.wait_operation(&op.id, DELETE_BOUND).await
    };
    let op = tokio::time::timeout(DELETE_BOUND, deleted)
        .await
        .unwrap_or_else(|_| panic!("delete did not finish within {DELETE_BOUND:?}"))
        .expect("delete finishes");
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "delete failed after {:?}: {:?}",
        began.elapsed(),
        op.error
    );
    // Gone, or a zombie its reaper has not collected yet (or the pid reused by another).
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let running_agent = status.contains("cove-guest-agen")
        && status.lines().any(|l| {
            l.starts_with("State:") && !l.contains("Z (zombie)") && !l.contains("X (dead)")
        });
    assert!(!running_agent, "the agent still runs: {status}");
    assert!(!runc_containers(&server().data_dir).contains(&id));
    assert!(!sandbox_cgroup.exists(), "the sandbox's cgroup is left");
    assert!(
        mounts_with(&id).is_empty(),
        "mounts left: {:?}",
        mounts_with(&id)
    );
}
