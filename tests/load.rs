//! A mixed workload for the load and fault suites (issue 12): each client creates a sandbox,
//! then cycles through commands with output, uploads and downloads, pause/resume,
//! suspend/wake, and deletes it and starts over, until its deadline or a stop flag. Every
//! answer is checked (command output byte for byte, downloaded bytes against what was
//! uploaded); nothing panics: failures are counted and described in [`Stats`], so a test can
//! decide which ones it tolerates (none under plain load; those after a kill -9 of the server).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cove_api_types::{CreateCommandRequest, CreateSandboxRequest, Operation, OperationState};
use cove_client::{AttachEvent, Client, ClientError, UploadOptions};
use futures::StreamExt;
use parking_lot::Mutex;

/// How long one operation or command may take before it counts as a failure.
const STEP_LIMIT: Duration = Duration::from_secs(120);
/// Rounds of work on one sandbox before it is deleted and a new one created.
const ROUNDS_PER_SANDBOX: u64 = 6;
/// Size of each uploaded file.
const UPLOAD_BYTES: usize = 48 * 1024;
/// At most this many failure descriptions are kept.
const KEEP_FAILURES: usize = 50;

/// What the clients did and saw; shared by all of them.
#[derive(Default)]
pub struct Stats {
    /// HTTP requests sent (SSE attaches and operation waits count once).
    pub requests: AtomicU64,
    /// Answers with a 5xx status.
    pub server_errors: AtomicU64,
    /// Other failures: 4xx, transport errors, wrong output, failed operations, timeouts.
    pub other_failures: AtomicU64,
    /// Commands whose output was checked.
    pub commands: AtomicU64,
    /// Uploads, downloads, lifecycle operations (pause, resume, suspend, wake) that succeeded.
    pub uploads: AtomicU64,
    /// Downloads that succeeded with the right bytes.
    pub downloads: AtomicU64,
    /// Pause, resume, suspend and wake operations that succeeded.
    pub lifecycle: AtomicU64,
    /// Creates and deletes that succeeded.
    pub creates: AtomicU64,
    /// Deletes that succeeded.
    pub deletes: AtomicU64,
    failures: Mutex<Vec<String>>,
    created: Mutex<BTreeSet<String>>,
    delete_requested: Mutex<BTreeSet<String>>,
}

impl Stats {
    fn fail(&self, what: String, server_error: bool) {
        if server_error {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
        } else {
            self.other_failures.fetch_add(1, Ordering::Relaxed);
        }
        let mut f = self.failures.lock();
        if f.len() < KEEP_FAILURES {
            f.push(what);
        }
    }

    /// The first failures, described.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().clone()
    }

    /// Sandboxes whose create was accepted (202).
    pub fn created(&self) -> BTreeSet<String> {
        self.created.lock().clone()
    }

    /// Sandboxes a delete was sent for (it may or may not have finished).
    pub fn delete_requested(&self) -> BTreeSet<String> {
        self.delete_requested.lock().clone()
    }

    /// Total failures of any kind.
    pub fn total_failures(&self) -> u64 {
        self.server_errors.load(Ordering::Relaxed) + self.other_failures.load(Ordering::Relaxed)
    }

    /// A one-line summary.
    pub fn summary(&self) -> String {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "requests {}, 5xx {}, other failures {}, commands {}, uploads {}, downloads {}, \
             lifecycle ops {}, creates {}, deletes {}",
            n(&self.requests),
            n(&self.server_errors),
            n(&self.other_failures),
            n(&self.commands),
            n(&self.uploads),
            n(&self.downloads),
            n(&self.lifecycle),
            n(&self.creates),
            n(&self.deletes)
        )
    }
}

/// One client of the workload.
pub struct LoadClient {
    c: Client,
    no: usize,
    template: String,
    until: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
}

/// Outcome of one step: `None` = it failed (already counted).
type Step<T> = Option<T>;

impl LoadClient {
    /// Client number `no` of the workload on `template`, working until `until` or `stop`.
    pub fn new(
        c: Client,
        no: usize,
        template: &str,
        until: Instant,
        stop: Arc<AtomicBool>,
        stats: Arc<Stats>,
    ) -> Self {
        LoadClient {
            c,
            no,
            template: template.to_string(),
            until,
            stop,
            stats,
        }
    }

    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.until
    }

    /// Runs the workload until the deadline or the stop flag; deletes what it holds at the
    /// end (unless stopped).
    pub async fn run(self) {
        let mut life = 0u64;
        while !self.done() {
            life += 1;
            let Some(id) = self.create().await else {
                continue;
            };
            let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
            let mut ok = true;
            for round in 0..ROUNDS_PER_SANDBOX {
                if self.done() || !ok {
                    break;
                }
                let tag = format!("c{}-l{life}-r{round}", self.no);
                ok = match (round + self.no as u64) % 4 {
                    0 => self.exec_checks(&id, &tag).await.is_some(),
                    1 => self.upload_download(&id, &tag, &mut kept).await.is_some(),
                    2 => self.pause_resume(&id).await.is_some(),
                    _ => self.suspend_wake(&id, &kept).await.is_some(),
                };
            }
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            self.delete(&id).await;
        }
    }

    /// Counts a request and turns its error into a recorded failure.
    async fn call<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, ClientError>>,
    ) -> Step<T> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(STEP_LIMIT, f).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                let server = e.status().is_some_and(|s| s >= 500);
                self.stats
                    .fail(format!("client {}: {what}: {e}", self.no), server);
                None
            }
            Err(_) => {
                self.stats.fail(
                    format!("client {}: {what}: no answer in time", self.no),
                    false,
                );
                None
            }
        }
    }

    fn wrong(&self, what: String) -> Step<()> {
        self.stats
            .fail(format!("client {}: {what}", self.no), false);
        None
    }

    async fn finish(&self, what: &str, op: Operation) -> Step<()> {
        let op = self
            .call(what, self.c.wait_operation(&op.id, STEP_LIMIT))
            .await?;
        if op.state != OperationState::Succeeded {
            return self.wrong(format!("{what}: operation {:?} {:?}", op.state, op.error));
        }
        Some(())
    }

    async fn create(&self) -> Step<String> {
        let req = CreateSandboxRequest {
            template: Some(self.template.clone()),
            ..Default::default()
        };
        let resp = self
            .call("create", self.c.create_sandbox(&req, None))
            .await?;
        let id = resp.sandbox.id.clone();
        self.stats.created.lock().insert(id.clone());
        self.finish("create", resp.operation).await?;
        self.stats.creates.fetch_add(1, Ordering::Relaxed);
        Some(id)
    }

    async fn delete(&self, id: &str) {
        self.stats.delete_requested.lock().insert(id.to_string());
        let Some(op) = self.call("delete", self.c.delete_sandbox(id)).await else {
            return;
        };
        if self.finish("delete", op).await.is_some() {
            self.stats.deletes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Runs `shell` and returns `(stdout, stderr, exit code)`.
    async fn exec(&self, id: &str, shell: &str) -> Step<(Vec<u8>, Vec<u8>, Option<i32>)> {
        let req = CreateCommandRequest {
            shell: Some(shell.to_string()),
            ..Default::default()
        };
        let resp = self.call("exec", self.c.create_command(id, &req)).await?;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let collect = async {
            let mut events = Box::pin(self.c.attach(&resp.attachment, 0));
            let (mut out, mut err) = (Vec::new(), Vec::new());
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(AttachEvent::Stdout { data, .. }) => out.extend_from_slice(&data),
                    Ok(AttachEvent::Stderr { data, .. }) => err.extend_from_slice(&data),
                    Ok(AttachEvent::Gap { .. }) => {}
                    Ok(AttachEvent::Exit(cmd)) => return Ok((out, err, cmd.exit_code)),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err("the output stream ended without an exit".to_string())
        };
        match tokio::time::timeout(STEP_LIMIT, collect).await {
            Ok(Ok(r)) => Some(r),
            Ok(Err(e)) => {
                self.wrong(format!("attach: {e}"));
                None
            }
            Err(_) => {
                self.wrong("attach: no exit in time".into());
                None
            }
        }
    }

    /// Two commands whose whole output is known: one line, and many lines on both streams.
    async fn exec_checks(&self, id: &str, tag: &str) -> Step<()> {
        let (out, err, code) = self.exec(id, &format!("echo {tag}")).await?;
        if out != format!("{tag}\n").as_bytes() || !err.is_empty() || code != Some(0) {
            return self.wrong(format!(
                "echo {tag}: stdout {:?} stderr {:?} exit {code:?}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            ));
        }
        let script = format!("seq 1 500; echo {tag} >&2; exit 3");
        let (out, err, code) = self.exec(id, &script).await?;
        let want: String = (1..=500).map(|i| format!("{i}\n")).collect();
        if out != want.as_bytes() || err != format!("{tag}\n").as_bytes() || code != Some(3) {
            return self.wrong(format!(
                "seq: {} stdout bytes (want {}), stderr {:?}, exit {code:?}",
                out.len(),
                want.len(),
                String::from_utf8_lossy(&err)
            ));
        }
        self.stats.commands.fetch_add(2, Ordering::Relaxed);
        Some(())
    }

    /// Uploads random bytes and downloads them back; keeps them to check after a wake.
    async fn upload_download(
        &self,
        id: &str,
        tag: &str,
        kept: &mut Vec<(String, Vec<u8>)>,
    ) -> Step<()> {
        let data = crate::random_bytes(UPLOAD_BYTES);
        let path = format!("/home/user/{tag}.bin");
        self.call(
            "upload",
            self.c
                .upload(id, path.as_str(), data.clone(), &UploadOptions::default()),
        )
        .await?;
        self.stats.uploads.fetch_add(1, Ordering::Relaxed);
        let back = self
            .call("download", self.c.read_file(id, path.as_str()))
            .await?;
        if back != data {
            return self.wrong(format!("download of {path}: {} bytes differ", back.len()));
        }
        self.stats.downloads.fetch_add(1, Ordering::Relaxed);
        kept.push((path, data));
        Some(())
    }

    async fn pause_resume(&self, id: &str) -> Step<()> {
        let op = self.call("pause", self.c.pause_sandbox(id)).await?;
        self.finish("pause", op).await?;
        let op = self.call("resume", self.c.resume_sandbox(id)).await?;
        self.finish("resume", op).await?;
        self.stats.lifecycle.fetch_add(2, Ordering::Relaxed);
        Some(())
    }

    /// Suspends and wakes, then checks every file uploaded so far came back.
    async fn suspend_wake(&self, id: &str, kept: &[(String, Vec<u8>)]) -> Step<()> {
        let op = self.call("suspend", self.c.suspend_sandbox(id)).await?;
        self.finish("suspend", op).await?;
        let op = self.call("wake", self.c.wake_sandbox(id)).await?;
        self.finish("wake", op).await?;
        self.stats.lifecycle.fetch_add(2, Ordering::Relaxed);
        for (path, data) in kept {
            let back = self
                .call("download after wake", self.c.read_file(id, path.as_str()))
                .await?;
            if &back != data {
                return self.wrong(format!("{path} changed across suspend/wake"));
            }
            self.stats.downloads.fetch_add(1, Ordering::Relaxed);
        }
        Some(())
    }
}

/// Peak and current resident memory of process `pid` in KiB (`VmHWM`, `VmRSS` of
/// `/proc/<pid>/status`); `None` when it cannot be read.
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// `name` from the environment as a number, else `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
