//! Issue 12, item 2: the guest agent's socket and binary cannot be removed or replaced from
//! inside the sandbox, not even by its root: the binary is a read-only bind mount, the run dir
//! a mount point whose entries the node seals (immutable) once the agent listens. After every
//! attempt the agent still serves commands with their output.

use cove_e2e::{client, delete, root_sh, sandbox, sh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_in_the_sandbox_cannot_remove_or_replace_the_agent() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let attempts = [
        "rm -f /.cove/run/agent.sock",
        "mv /.cove/run/agent.sock /tmp/stolen.sock",
        "ln -sf /tmp/other.sock /.cove/run/agent.sock",
        "rm -rf /.cove/run",
        "mv /.cove/run /.cove/run2",
        "rm -rf /.cove/run/output",
        "chattr -i /.cove/run",
        "rm -f /.cove/bin/cove-guest-agent",
        "cp /bin/true /.cove/bin/cove-guest-agent",
        "sh -c 'echo x > /.cove/bin/cove-guest-agent'",
        "mv /.cove/bin/cove-guest-agent /tmp/agent",
        "umount -l /.cove/run",
        "umount -l /.cove/bin/cove-guest-agent",
        "mount -o remount,rw /.cove/bin/cove-guest-agent",
    ];
    for attempt in attempts {
        let o = root_sh(&c, &id, &format!("{attempt}; echo rc=$?")).await;
        let out = o.stdout_text();
        assert!(
            out.starts_with("rc=") && out != "rc=0\n",
            "`{attempt}` was allowed: {out} {}",
            o.stderr_text()
        );
        let alive = root_sh(
            &c,
            &id,
            "test -S /.cove/run/agent.sock && test -s /.cove/bin/cove-guest-agent && echo alive",
        )
        .await;
        assert_eq!(alive.stdout_text(), "alive\n", "after `{attempt}`");
    }
    // The agent keeps working: output, spilled output and long scripts (in its run dir).
    assert_eq!(sh(&c, &id, "echo still").await.stdout_text(), "still\n");
    let long = format!("echo {}", "x".repeat(200 * 1024));
    assert_eq!(sh(&c, &id, &long).await.stdout.len(), 200 * 1024 + 1);
    let big = sh(&c, &id, "head -c 3000000 /dev/zero | tr '\\0' y").await;
    assert_eq!(big.stdout.len(), 3_000_000);
    delete(&c, &id).await;
}
