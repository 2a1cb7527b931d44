//! The sandbox's OOM-kill counter, read from its memory cgroup as the sandbox sees it
//! (`/sys/fs/cgroup/memory/memory.oom_control` on cgroup v1, `/sys/fs/cgroup/memory.events` on
//! v2; with a cgroup namespace both name the sandbox's own cgroup).
//!
//! A command whose lifetime saw the counter grow and that ended by SIGKILL (or exited 137, a
//! shell reporting a SIGKILLed child) is reported `oom_killed`.

use std::path::Path;

/// Files that hold an `oom_kill N` line, in the order tried.
const COUNTER_FILES: [&str; 2] = [
    "/sys/fs/cgroup/memory/memory.oom_control",
    "/sys/fs/cgroup/memory.events",
];

/// OOM kills recorded by the sandbox's memory cgroup so far, or `None` where no counter is
/// readable (no memory cgroup mounted, an old kernel).
pub fn kills() -> Option<u64> {
    COUNTER_FILES
        .iter()
        .find_map(|f| parse_counter(&std::fs::read_to_string(Path::new(f)).ok()?))
}

/// The value of the `oom_kill` line of a `memory.oom_control` or `memory.events` file.
pub fn parse_counter(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

/// Whether a command that ended with `exit_code`/`signal`, during whose life the counter went
/// from `before` to `after`, was killed by the OOM killer.
pub fn was_oom_kill(
    before: Option<u64>,
    after: Option<u64>,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> bool {
    let sigkill = signal == Some(libc::SIGKILL) || exit_code == Some(128 + libc::SIGKILL);
    match (before, after) {
        (Some(b), Some(a)) => sigkill && a > b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2_counters() {
        assert_eq!(
            parse_counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"),
            Some(3)
        );
        assert_eq!(
            parse_counter("low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n"),
            Some(2)
        );
        assert_eq!(parse_counter("oom_kill_disable 0\n"), None);
    }

    #[test]
    fn only_a_sigkill_during_a_counted_kill_is_an_oom_kill() {
        assert!(was_oom_kill(Some(1), Some(2), None, Some(9)));
        assert!(was_oom_kill(Some(0), Some(1), Some(137), None));
        assert!(!was_oom_kill(Some(1), Some(1), None, Some(9)));
        assert!(!was_oom_kill(Some(1), Some(2), Some(1), None));
        assert!(!was_oom_kill(None, Some(2), None, Some(9)));
    }
}
