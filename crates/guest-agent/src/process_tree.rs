//! A command's process tree: its session (the leader calls `setsid`, so session id = process
//! group id = leader pid), found through `/proc` and signalled as a whole.
#![allow(unsafe_code)]

use std::io;

/// Highest signal number Linux accepts (`SIGRTMAX`).
pub const MAX_SIGNAL: i32 = 64;

/// Sends `signal` to one process (`pid > 0`) or a process group (`pid < 0`).
pub fn send_signal(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill() takes plain integers and has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: i32,
    /// State letter (`R`, `S`, `D`, `Z`, ...).
    pub state: u8,
    /// Parent pid.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// Session id.
    pub session: i32,
}

impl ProcStat {
    /// A zombie or dead task: it no longer runs and only waits to be reaped.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses the contents of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so parsing starts after its last `)`.
pub fn parse_stat(data: &[u8]) -> Option<ProcStat> {
    let open = data.iter().position(|&b| b == b'(')?;
    let close = data.iter().rposition(|&b| b == b')')?;
    let pid = std::str::from_utf8(&data[..open])
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let rest = std::str::from_utf8(data.get(close + 1..)?).ok()?;
    let mut f = rest.split_ascii_whitespace();
    let state = *f.next()?.as_bytes().first()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
    })
}

/// Every process visible in `/proc` (those that vanish while walking are skipped).
pub fn all_processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let name = e.file_name();
        let name = name.to_str()?;
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        parse_stat(&std::fs::read(e.path().join("stat")).ok()?)
    })
    .collect()
}

/// Live (not zombie) processes of session `sid` or process group `sid`.
pub fn members(sid: i32) -> Vec<i32> {
    all_processes()
        .into_iter()
        .filter(|p| (p.session == sid || p.pgrp == sid) && !p.is_dead())
        .map(|p| p.pid)
        .collect()
}

/// Whether any live process of the tree remains.
pub fn alive(sid: i32) -> bool {
    !members(sid).is_empty()
}

/// Sends `signal` to the process group and to every live member of the session (including those
/// that moved to another process group). Returns how many processes of the session were found.
pub fn signal_tree(sid: i32, signal: i32) -> usize {
    if sid <= 1 {
        return 0;
    }
    let _ = send_signal(-sid, signal);
    let found = members(sid);
    for pid in &found {
        let _ = send_signal(*pid, signal);
    }
    found.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_name() {
        let s = b"1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0";
        let p = parse_stat(s).expect("parse");
        assert_eq!(
            p,
            ProcStat {
                pid: 1234,
                state: b'S',
                ppid: 1,
                pgrp: 1234,
                session: 1234
            }
        );
        assert!(!p.is_dead());
        let z = parse_stat(b"7 (sh) Z 1 7 7 0").expect("parse");
        assert!(z.is_dead());
        assert!(parse_stat(b"garbage").is_none());
    }

    #[test]
    fn finds_own_process() {
        let me = std::process::id() as i32;
        assert!(all_processes().iter().any(|p| p.pid == me));
    }
}
