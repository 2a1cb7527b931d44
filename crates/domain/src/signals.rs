//! Signal names and numbers (Linux x86-64 numbering, from signal(7)).

const SIGNALS: &[(&str, i32)] = &[
    ("SIGHUP", 1),
    ("SIGINT", 2),
    ("SIGQUIT", 3),
    ("SIGILL", 4),
    ("SIGTRAP", 5),
    ("SIGABRT", 6),
    ("SIGBUS", 7),
    ("SIGFPE", 8),
    ("SIGKILL", 9),
    ("SIGUSR1", 10),
    ("SIGSEGV", 11),
    ("SIGUSR2", 12),
    ("SIGPIPE", 13),
    ("SIGALRM", 14),
    ("SIGTERM", 15),
    ("SIGSTKFLT", 16),
    ("SIGCHLD", 17),
    ("SIGCONT", 18),
    ("SIGSTOP", 19),
    ("SIGTSTP", 20),
    ("SIGTTIN", 21),
    ("SIGTTOU", 22),
    ("SIGURG", 23),
    ("SIGXCPU", 24),
    ("SIGXFSZ", 25),
    ("SIGVTALRM", 26),
    ("SIGPROF", 27),
    ("SIGWINCH", 28),
    ("SIGIO", 29),
    ("SIGPWR", 30),
    ("SIGSYS", 31),
];

/// Parses `SIGINT`, `INT`, `int` or `2` into a signal number (1–31).
pub fn parse(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return SIGNALS.iter().any(|&(_, v)| v == n).then_some(n);
    }
    let upper = s.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    SIGNALS
        .iter()
        .find(|(name, _)| *name == full)
        .map(|&(_, n)| n)
}

/// The name of signal `n` (`SIGTERM`), or `SIG<n>` for a real-time or unknown number.
pub fn name(n: i32) -> String {
    SIGNALS
        .iter()
        .find(|&&(_, v)| v == n)
        .map(|(name, _)| (*name).to_string())
        .unwrap_or_else(|| format!("SIG{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_numbers() {
        assert_eq!(parse("SIGINT"), Some(2));
        assert_eq!(parse("term"), Some(15));
        assert_eq!(parse("9"), Some(9));
        assert_eq!(parse("99"), None);
        assert_eq!(parse("SIGFOO"), None);
        assert_eq!(name(15), "SIGTERM");
    }
}
