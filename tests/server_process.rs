//! The real server as its own process (`cove-e2e-server`), for tests that kill it with
//! SIGKILL or run it on a data dir of their own (a small filesystem): start, kill -9, restart
//! on the same data dir; on drop every container, mount and namespace it left is removed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

use cove_client::Client;

/// A server process on a data dir; killed and the data dir cleaned when dropped.
pub struct ServerProcess {
    /// Its data dir (removed on drop unless [`ServerProcess::keep_data_dir`]).
    pub data_dir: PathBuf,
    /// The running process, if started.
    pub child: Option<Child>,
    /// Management API base URL of the last start.
    pub api_url: String,
    reconcile_ms: u64,
    /// Extra environment of the server process.
    pub env: Vec<(String, String)>,
    /// The `cove-e2e-server` binary.
    exe: PathBuf,
    /// Leave the data dir in place on drop (its owner, e.g. a mount, removes it).
    pub keep_data_dir: bool,
    /// Where its stderr goes (default `server.log` in the data dir).
    pub log: Option<PathBuf>,
}

/// A free loopback address (`127.0.0.1:port`).
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

impl ServerProcess {
    /// A server of binary `exe` (`env!("CARGO_BIN_EXE_cove-e2e-server")`) on a fresh
    /// temporary data dir, reconciling every `reconcile_ms` while serving. Not started yet.
    pub fn new(exe: &Path, reconcile_ms: u64) -> Self {
        let data_dir = tempfile::Builder::new()
            .prefix("cove-crash-")
            .tempdir()
            .expect("data dir")
            .keep();
        Self::on(exe, data_dir, reconcile_ms)
    }

    /// A server of binary `exe` on `data_dir` (which must exist). Not started yet.
    pub fn on(exe: &Path, data_dir: PathBuf, reconcile_ms: u64) -> Self {
        ServerProcess {
            data_dir,
            child: None,
            api_url: String::new(),
            reconcile_ms,
            env: Vec::new(),
            exe: exe.to_path_buf(),
            keep_data_dir: false,
            log: None,
        }
    }

    /// Pid of the running server process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the server and waits until it answers (at most 60 s).
    pub async fn start(&mut self) -> Client {
        let api = free_addr();
        let cache = std::env::var("COVE_TEST_CACHE_DIR")
            .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log");
        let child = Process::new(&self.exe)
            .arg(&self.data_dir)
            .arg(&api)
            .arg(free_addr())
            .arg(crate::guest_agent())
            .arg(cache)
            .arg("250")
            .arg(self.reconcile_ms.to_string())
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn server");
        self.child = Some(child);
        self.api_url = format!("http://{api}");
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(token) = std::fs::read_to_string(self.data_dir.join("admin.token")) {
                let c = Client::new(&self.api_url, token.trim()).expect("client");
                if c.health().await.is_ok() {
                    return c;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("server exited with {status}: {}", self.log_tail());
            }
            assert!(
                Instant::now() < until,
                "server did not come up: {}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs the server. It is stopped first, so it starts no new helper process, and the
    /// helpers it had (runc invocations) are waited for: a restart by a supervisor also comes
    /// after the old process's helpers are gone.
    pub fn kill9(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        signal(pid, "STOP");
        let helpers = children_of(pid);
        signal(pid, "KILL");
        let _ = child.wait();
        let until = Instant::now() + Duration::from_secs(30);
        while helpers
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}")).exists())
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_path(&self) -> PathBuf {
        self.log
            .clone()
            .unwrap_or_else(|| self.data_dir.join("server.log"))
    }

    /// The last 30 lines of its log (`server.log` in the data dir).
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        log.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The warnings and errors of its log (lines with `WARN` or `ERROR`), at most the last
    /// 40: what a failed assertion about the server's answers should show.
    pub fn log_problems(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl ServerProcess {
    /// Stops the server as an operator does, with SIGTERM, and waits (at most 60 s, then
    /// SIGKILL) for it to exit; returns what it left on the host that it prepared rather than
    /// a running sandbox holds ([`crate::left_after_stop`]; empty after a clean stop), or a
    /// line saying it had to be killed.
    pub fn stop(&mut self) -> Vec<String> {
        let Some(mut child) = self.child.take() else {
            return Vec::new();
        };
        signal(child.id(), "TERM");
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return crate::left_after_stop(&self.data_dir),
                Ok(None) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return vec!["the server did not exit within 60 s of SIGTERM".into()];
                }
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let left = self.stop();
        let failure = (!left.is_empty() && !std::thread::panicking()).then(|| {
            format!(
                "the server left network state behind after SIGTERM: {left:?}\n{}",
                self.log_tail()
            )
        });
        crate::release_node_resources(&self.data_dir);
        if !self.keep_data_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
        if let Some(failure) = failure {
            panic!("{failure}");
        }
    }
}

/// Pids whose parent is `pid` (and which are not zombies).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|s| s.parse::<u32>().ok()) == Some(pid)
            && fields.first() != Some(&"Z")
        {
            out.push(p);
        }
    }
    out
}

/// Sandbox ids with an overlay mounted under the data dir.
pub fn overlay_mounts(data_dir: &Path) -> BTreeSet<String> {
    let prefix = format!("{}/sandboxes/", data_dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter_map(|m| m.strip_prefix(&prefix))
        .filter_map(|rest| rest.split('/').next())
        .map(str::to_string)
        .collect()
}

/// Names of the entries of `dir` (empty when it cannot be read).
pub fn dir_names(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Sends signal `name` to `pid` (with kill(1)).
pub fn signal(pid: u32, name: &str) {
    let status = Process::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{name} {pid}");
}
