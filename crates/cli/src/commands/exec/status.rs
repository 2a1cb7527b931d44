//! How a command that `cove` ran ended: the exit code `cove` takes from it, the one line on
//! stderr when it did not end by itself, and the `--json` summary.

use cove_api_types::Command;
use serde_json::json;

use crate::exit::{EXIT_KILLED, EXIT_TIMED_OUT};

/// How a command followed by `exec`, `run` or `attach` ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// The exit code `cove` exits with.
    pub code: u8,
    /// The ended command, when its end was seen.
    pub command: Option<Command>,
    /// The sandbox was suspended while the command ran, which ended it unseen.
    pub suspended: bool,
}

impl Ended {
    /// A command whose exit was seen.
    pub fn exited(command: Command) -> Ended {
        Ended {
            code: exit_status(&command),
            command: Some(command),
            suspended: false,
        }
    }

    /// `cove` stopped following before the command ended (Ctrl-C, a closed stdout).
    pub fn stopped(code: u8) -> Ended {
        Ended {
            code,
            command: None,
            suspended: false,
        }
    }

    /// The command was cut short by a suspend of its sandbox.
    pub fn suspended() -> Ended {
        Ended {
            code: EXIT_KILLED,
            command: None,
            suspended: true,
        }
    }

    /// The one line for stderr when the command did not end by itself: killed by the OOM
    /// killer, by its timeout, or by a suspend of the sandbox (with the next step).
    pub fn note(&self, sandbox: &str) -> Option<String> {
        if self.suspended {
            return Some(format!(
                "cove: the command was cut short: sandbox {sandbox} was suspended (its processes \
                 did not survive); run 'cove wake {sandbox}' to use it again"
            ));
        }
        let command = self.command.as_ref()?;
        if command.oom_killed {
            return Some(format!(
                "cove: the command was killed by the out-of-memory killer (exit {}): sandbox \
                 {sandbox} hit its memory limit; create it with a larger --memory-mib",
                self.code
            ));
        }
        if command.timed_out {
            return Some(format!(
                "cove: the command timed out and was killed (exit {EXIT_TIMED_OUT})"
            ));
        }
        None
    }

    /// The `--json` summary: `{exit_code, signal, oom_killed, timed_out, suspended}` of the
    /// command (nulls when its end was not seen).
    pub fn json(&self) -> serde_json::Value {
        let c = self.command.as_ref();
        json!({
            "exit_code": c.and_then(|c| c.exit_code),
            "signal": c.and_then(|c| c.signal.clone()),
            "oom_killed": c.is_some_and(|c| c.oom_killed),
            "timed_out": c.is_some_and(|c| c.timed_out),
            "suspended": self.suspended,
        })
    }
}

/// The exit code `cove` reports for an ended command: its own exit code; 124 when its timeout
/// fired; 128 + the signal number when a signal ended it.
pub fn exit_status(command: &Command) -> u8 {
    if command.timed_out {
        return EXIT_TIMED_OUT;
    }
    if let Some(code) = command.exit_code {
        return u8::try_from(code.rem_euclid(256)).unwrap_or(1);
    }
    match command.signal.as_deref().and_then(signal_number) {
        Some(n) => 128u8.saturating_add(n),
        None => 1,
    }
}

/// The Linux number of a signal named `SIGTERM`, `TERM`, `SIGRTMIN+2` or `"15"`.
pub(crate) fn signal_number(name: &str) -> Option<u8> {
    if let Ok(n) = name.parse::<u8>() {
        return Some(n);
    }
    let name = name.strip_prefix("SIG").unwrap_or(name);
    if let Some(rest) = name.strip_prefix("RTMIN+") {
        return rest.parse::<u8>().ok().map(|n| 34u8.saturating_add(n));
    }
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    match name {
        "IOT" => Some(6),
        "POLL" => Some(29),
        "RTMIN" => Some(34),
        "RTMAX" => Some(64),
        _ => NAMES
            .iter()
            .position(|n| *n == name)
            .and_then(|i| u8::try_from(i + 1).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn ended(exit_code: Option<i32>, signal: Option<&str>, timed_out: bool) -> Command {
        serde_json::from_value(serde_json::json!({
            "id": "cmd-1", "sandbox_id": "sb-1", "argv": ["x"], "user": "user", "cwd": "/",
            "pid": 2, "state": "exited", "exit_code": exit_code, "signal": signal,
            "timed_out": timed_out, "truncated": false, "output_bytes": 0, "stdin_open": false,
            "started_at": "2025-01-01T00:00:00Z", "ended_at": "2025-01-01T00:00:01Z"
        }))
        .expect("command")
    }

    #[test]
    fn exit_statuses_follow_the_shell() {
        assert_eq!(exit_status(&ended(Some(0), None, false)), 0);
        assert_eq!(exit_status(&ended(Some(42), None, false)), 42);
        assert_eq!(exit_status(&ended(Some(256 + 3), None, false)), 3);
        assert_eq!(exit_status(&ended(None, Some("SIGKILL"), false)), 137);
        assert_eq!(exit_status(&ended(None, Some("SIGINT"), false)), 130);
        assert_eq!(exit_status(&ended(None, Some("TERM"), false)), 143);
        assert_eq!(exit_status(&ended(None, Some("SIGKILL"), true)), 124);
        assert_eq!(exit_status(&ended(None, Some("SIGWHAT"), false)), 1);
    }

    #[test]
    fn signal_names_map_to_linux_numbers() {
        assert_eq!(signal_number("SIGHUP"), Some(1));
        assert_eq!(signal_number("SIGSEGV"), Some(11));
        assert_eq!(signal_number("SIGSYS"), Some(31));
        assert_eq!(signal_number("9"), Some(9));
        assert_eq!(signal_number("SIGRTMIN+2"), Some(36));
    }

    #[test]
    fn notes_say_why_a_command_did_not_end_by_itself() {
        assert_eq!(
            Ended::exited(ended(Some(1), None, false)).note("sb-1"),
            None
        );
        let timed_out = Ended::exited(ended(None, Some("SIGKILL"), true));
        assert!(timed_out.note("sb-1").expect("note").contains("timed out"));
        let mut oom = ended(None, Some("SIGKILL"), false);
        oom.oom_killed = true;
        let oom = Ended::exited(oom);
        assert_eq!(oom.code, 137);
        assert!(oom.note("sb-1").expect("note").contains("out-of-memory"));
        let cut = Ended::suspended();
        assert!(cut
            .note("sb-1")
            .expect("note")
            .contains("run 'cove wake sb-1'"));
        assert_eq!(
            Ended::exited(ended(Some(3), None, false)).json(),
            serde_json::json!({"exit_code": 3, "signal": null, "oom_killed": false,
                "timed_out": false, "suspended": false})
        );
        assert_eq!(Ended::suspended().json()["suspended"], true);
    }
}
