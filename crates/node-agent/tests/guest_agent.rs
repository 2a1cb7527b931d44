//! The real guest agent binary, run as a host process, driven through `GuestClient`.
//!
//! The binary is `$COVE_GUEST_AGENT`, else `$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/
//! cove-guest-agent`, (re)built once per run with `scripts/build-guest-agent.sh` (a no-op when up
//! to date). Each test starts its own agent with a temporary socket and run dir. Commands run on
//! the host as the test's user.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cove_guest_protocol::{
    CommandInfo, CommandState, ErrorCode, FileType, GuestPath, Program, SetXattrsRequest,
    SpawnRequest, Stream, WriteFileRequest, XattrValue, MAX_XATTR_BYTES,
};
use cove_node_agent::guest::{AttachEvent, GuestClient, GuestError};
use futures::StreamExt;

// ---------------------------------------------------------------------------------------------
// Harness

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn agent_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("COVE_GUEST_AGENT") {
                return PathBuf::from(p);
            }
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target"));
            let path = target.join("x86_64-unknown-linux-gnu/debug/cove-guest-agent");
            // Build once per test run: cheap when up to date, and never tests a stale binary.
            let built = Command::new(workspace_root().join("scripts/build-guest-agent.sh"))
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !built {
                eprintln!("scripts/build-guest-agent.sh failed; using the existing binary");
            }
            assert!(path.exists(), "no guest agent binary at {}", path.display());
            path
        })
        .clone()
}

struct Agent {
    child: Child,
    dir: tempfile::TempDir,
    client: GuestClient,
}

impl Agent {
    async fn start() -> Agent {
        Self::start_with(&[]).await
    }

    async fn start_with(args: &[&str]) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agent.sock");
        let child = Command::new(agent_binary())
            .arg("--listen")
            .arg(&socket)
            .arg("--run-dir")
            .arg(dir.path().join("run"))
            .args(args)
            .env("COVE_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start the guest agent");
        let client = GuestClient::new(std::sync::Arc::new(cove_runtime::UnixSocketConnector::new(
            socket,
        )));
        client
            .connect(Duration::from_secs(10))
            .await
            .expect("agent answers hello");
        Agent { child, dir, client }
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// A scratch directory for the test's files.
    fn scratch(&self) -> PathBuf {
        let p = self.dir.path().join("scratch");
        std::fs::create_dir_all(&p).expect("scratch dir");
        p
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn req(id: &str, program: Program) -> SpawnRequest {
    // These agents run on the host as root, so `bash -l` would read root's own profile. Where
    // that runs `pyenv init` (this CI machine's does), each shell takes pyenv's rehash lock, and
    // a shell a test kills while it holds the lock leaves it behind: every later login shell
    // then waits 60 s and complains on stderr. A home without a profile keeps the host's
    // dotfiles out of the output these tests compare byte for byte.
    let env = BTreeMap::from([("HOME".to_string(), "/nonexistent".to_string())]);
    SpawnRequest {
        command_id: id.to_string(),
        program,
        env,
        cwd: None,
        user: None,
        stdin: false,
        timeout_ms: None,
        pty: None,
    }
}

fn shell(id: &str, script: &str) -> SpawnRequest {
    req(id, Program::Shell(script.to_string()))
}

fn argv(id: &str, args: &[&str]) -> SpawnRequest {
    req(
        id,
        Program::Argv(args.iter().map(|s| s.to_string()).collect()),
    )
}

fn gpath(p: impl AsRef<Path>) -> GuestPath {
    use std::os::unix::ffi::OsStrExt;
    GuestPath(p.as_ref().as_os_str().as_bytes().to_vec())
}

#[derive(Debug, Default)]
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// (arrival, stream, bytes) of every chunk.
    chunks: Vec<(Instant, Stream, Vec<u8>)>,
    info: Option<CommandInfo>,
    exited_at: Option<Instant>,
    /// Dropped ranges `(offset, len)`.
    gaps: Vec<(u64, u64)>,
}

impl Output {
    fn info(&self) -> &CommandInfo {
        self.info.as_ref().expect("exited")
    }
}

/// Collects a command's output from `offset` until `Exited` (or `End`).
async fn collect(client: &GuestClient, id: &str, offset: u64, follow: bool) -> Output {
    let stream = client.attach(id, offset, follow).await.expect("attach");
    futures::pin_mut!(stream);
    let mut out = Output::default();
    let mut next = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("attach stream stalled")
    {
        match event.expect("attach event") {
            AttachEvent::Output {
                offset,
                stream,
                data,
            } => {
                if let Some(n) = next {
                    assert_eq!(offset, n, "contiguous offsets");
                }
                next = Some(offset + data.len() as u64);
                match stream {
                    Stream::Stdout => out.stdout.extend_from_slice(&data),
                    Stream::Stderr => out.stderr.extend_from_slice(&data),
                }
                out.chunks.push((Instant::now(), stream, data.to_vec()));
            }
            AttachEvent::Gap { offset, len } => {
                if let Some(n) = next {
                    assert_eq!(offset, n, "contiguous offsets");
                }
                next = Some(offset + len);
                out.gaps.push((offset, len));
            }
            AttachEvent::Exited(info) => {
                out.info = Some(info);
                out.exited_at = Some(Instant::now());
            }
            AttachEvent::End => {}
        }
    }
    out
}

async fn run(client: &GuestClient, request: SpawnRequest) -> Output {
    let id = request.command_id.clone();
    client.spawn(request).await.expect("spawn");
    collect(client, &id, 0, true).await
}

fn code(err: GuestError) -> ErrorCode {
    match err {
        GuestError::Guest { code, .. } => code,
        other => panic!("expected a guest error, got {other:?}"),
    }
}

/// Live processes whose session is `sid`, seen from the host's /proc.
fn session_members(sid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if fields.len() > 3 && fields[3] == sid.to_string() && fields[0] != "Z" {
            out.push(entry.file_name().to_string_lossy().parse().unwrap_or(0));
        }
    }
    out
}

/// Waits until a command has produced at least `bytes` bytes of output.
async fn wait_for_output(c: &GuestClient, id: &str, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.get_command(id).await.expect("get").output_bytes < bytes {
        assert!(Instant::now() < deadline, "no output from {id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

// ---------------------------------------------------------------------------------------------
// Commands: output bytes and exit status (C01, C02, C03)

#[tokio::test]
async fn c01_c03_output_is_byte_exact() {
    let a = Agent::start().await;
    let c = &a.client;

    let o = run(c, shell("c1", "printf 'no-newline'")).await;
    assert_eq!(o.stdout, b"no-newline");
    assert_eq!(o.info().exit_code, Some(0));

    let o = run(c, shell("c2", "printf 'a\\nb\\nlast'")).await;
    assert_eq!(o.stdout, b"a\nb\nlast");

    let o = run(c, shell("c3", "printf 'partial-err' >&2")).await;
    assert_eq!(o.stderr, b"partial-err");
    assert!(o.stdout.is_empty());

    let o = run(c, shell("c4", "printf 'A\\000B\\377C\\n'")).await;
    assert_eq!(o.stdout, [0x41, 0x00, 0x42, 0xFF, 0x43, 0x0A]);
    assert_eq!(o.info().output_bytes, 6);

    let o = run(
        c,
        shell("c5", "printf '\\342'; sleep 0.3; printf '\\211\\244\\n'"),
    )
    .await;
    assert_eq!(o.stdout, [0xE2, 0x89, 0xA4, 0x0A]);

    let o = run(
        c,
        shell(
            "c6",
            "i=0; while [ $i -lt 20000 ]; do printf '─'; i=$((i+1)); done",
        ),
    )
    .await;
    assert_eq!(o.stdout.len(), 60000);
    assert_eq!(
        String::from_utf8(o.stdout).expect("utf-8").chars().count(),
        20000
    );

    let z = a.scratch().join("z");
    std::fs::create_dir_all(&z).expect("mkdir");
    std::fs::write(z.join("p"), b"").expect("p");
    std::fs::write(z.join("q"), b"").expect("q");
    let script = format!("find {} -type f -print0 | sort -z", z.display());
    let o = run(c, shell("c7", &script)).await;
    let expected = format!("{0}/p\0{0}/q\0", z.display());
    assert_eq!(o.stdout, expected.as_bytes());

    let o = run(c, argv("c8", &["printf", "%s|%s", "a b", "$HOME"])).await;
    assert_eq!(o.stdout, b"a b|$HOME");
    assert_eq!(o.info().argv, ["printf", "%s|%s", "a b", "$HOME"]);
}

#[tokio::test]
async fn c02_exit_codes_follow_the_shell() {
    let a = Agent::start().await;
    let c = &a.client;

    let o = run(c, shell("nf", "no-such-cmd-9f3a")).await;
    assert_eq!(o.info().exit_code, Some(127));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not found"),
        "{:?}",
        o.stderr
    );
    assert!(o.stdout.is_empty());

    assert_eq!(run(c, shell("f", "false")).await.info().exit_code, Some(1));
    assert_eq!(
        run(c, shell("e42", "sh -c 'exit 42'"))
            .await
            .info()
            .exit_code,
        Some(42)
    );

    let script = a.scratch().join("ne.sh");
    let cmd = format!(
        "printf '#!/bin/sh\\necho hi\\n' > {0} && chmod 644 {0} && {0}",
        script.display()
    );
    let o = run(c, shell("ne", &cmd)).await;
    assert_eq!(o.info().exit_code, Some(126));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));

    let o = run(c, shell("term", "sh -c 'kill -TERM $$'")).await;
    assert_eq!((o.info().exit_code, o.info().signal), (None, Some(15)));
    assert_eq!(o.info().state, CommandState::Exited);

    // Argv programs: not found / not executable are exit statuses, not spawn errors.
    let o = run(c, argv("anf", &["no-such-cmd-9f3a", "x"])).await;
    assert_eq!(o.info().exit_code, Some(127));
    assert_eq!(o.stderr, b"no-such-cmd-9f3a: command not found\n");
    let path = script.to_string_lossy().into_owned();
    let o = run(c, argv("ane", &[&path])).await;
    assert_eq!(o.info().exit_code, Some(126));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));

    assert_eq!(
        code(c.spawn(argv("empty", &[])).await.expect_err("empty argv")),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        code(c.spawn(shell("f", "true")).await.expect_err("dup id")),
        ErrorCode::AlreadyExists
    );
    assert_eq!(
        code(c.spawn(shell("a/b", "true")).await.expect_err("bad id")),
        ErrorCode::InvalidArgument
    );
}

#[tokio::test]
async fn c02_a_256_kib_shell_command_runs() {
    let a = Agent::start().await;
    let script = format!("echo {} | wc -c", "a".repeat(262_144));
    let o = run(&a.client, shell("big", &script)).await;
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "262145");
    assert_eq!(o.info().exit_code, Some(0));
    assert!(
        o.info().argv.iter().all(|s| s.len() < 1024),
        "the script went through a file"
    );
    let left: Vec<_> = std::fs::read_dir(a.run_dir().join("scripts"))
        .expect("scripts")
        .collect();
    assert!(left.is_empty(), "script file removed after exit");
}

// ---------------------------------------------------------------------------------------------
// Streaming and kept output

#[tokio::test]
async fn c01_streaming_is_live() {
    let a = Agent::start().await;
    let o = run(&a.client, shell("live", "printf x; sleep 1; printf y")).await;
    assert_eq!(o.stdout, b"xy");
    let (x_at, _, first) = &o.chunks[0];
    assert_eq!(first, b"x");
    let exited = o.exited_at.expect("exited");
    assert!(
        exited.duration_since(*x_at) > Duration::from_millis(500),
        "x arrived before the exit"
    );
}

#[tokio::test]
async fn reattach_returns_exactly_the_remaining_bytes() {
    let a = Agent::start().await;
    let c = &a.client;
    let o = run(
        c,
        shell(
            "r",
            "printf 0123456789; sleep 0.3; printf ABC >&2; sleep 0.3; printf Z",
        ),
    )
    .await;
    assert_eq!(o.info().output_bytes, 14);

    let r = collect(c, "r", 4, false).await;
    assert_eq!(r.stdout, b"456789Z");
    assert_eq!(r.stderr, b"ABC");
    let order: Vec<(Stream, Vec<u8>)> = r.chunks.iter().map(|(_, s, d)| (*s, d.clone())).collect();
    assert_eq!(
        order,
        vec![
            (Stream::Stdout, b"456789".to_vec()),
            (Stream::Stderr, b"ABC".to_vec()),
            (Stream::Stdout, b"Z".to_vec())
        ]
    );
    assert!(r.info.is_some(), "an exited command ends with Exited");

    let r = collect(c, "r", 11, true).await;
    assert_eq!(r.stdout, b"Z");
    let r = collect(c, "r", 1000, true).await;
    assert!(r.chunks.is_empty());
    assert_eq!(r.info().output_bytes, 14);

    // Without follow on a running command: the kept bytes, then End.
    c.spawn(shell("slow", "printf abc; sleep 5"))
        .await
        .expect("spawn");
    wait_for_output(c, "slow", 3).await;
    let r = collect(c, "slow", 1, false).await;
    assert_eq!(r.stdout, b"bc");
    assert!(r.info.is_none());
    c.kill("slow", Duration::from_millis(100))
        .await
        .expect("kill");

    let err = c
        .attach("nope", 0, true)
        .await
        .expect("connect")
        .next()
        .await
        .expect("item");
    assert_eq!(code(err.expect_err("unknown command")), ErrorCode::NotFound);
}

#[tokio::test]
async fn spilled_output_is_exact() {
    let a = Agent::start_with(&["--output-memory-bytes", "4096"]).await;
    let c = &a.client;
    let script = "seq 1 40000; seq 1 3000 >&2; seq 40001 60000";
    let o = run(c, shell("spill", script)).await;
    let mut expected_out = String::new();
    for i in (1..=40000).chain(40001..=60000) {
        expected_out.push_str(&format!("{i}\n"));
    }
    let expected_err: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    assert_eq!(o.stdout, expected_out.as_bytes());
    assert_eq!(o.stderr, expected_err.as_bytes());
    let total = (expected_out.len() + expected_err.len()) as u64;
    assert_eq!(o.info().output_bytes, total);
    assert!(!o.info().truncated);
    let log = a.run_dir().join("output/spill.0.log");
    assert!(log.exists(), "output spilled to the run dir");

    // Any offset reads back exactly the rest of the combined output.
    let mut combined = Vec::new();
    for (_, _, d) in &o.chunks {
        combined.extend_from_slice(d);
    }
    for offset in [1u64, 4095, 4096, 100_000, 200_003, total - 1] {
        let r = collect(c, "spill", offset, false).await;
        let mut got = Vec::new();
        for (_, _, d) in &r.chunks {
            got.extend_from_slice(d);
        }
        assert_eq!(got, combined[offset as usize..], "offset {offset}");
    }

    c.forget_command("spill").await.expect("forget");
    assert!(!log.exists(), "forget deletes the spill file");
    assert_eq!(
        code(c.get_command("spill").await.expect_err("forgotten")),
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn output_beyond_the_cap_keeps_head_and_tail() {
    let a = Agent::start_with(&[
        "--output-cap-bytes",
        "1000",
        "--output-tail-bytes",
        "400",
        "--output-memory-bytes",
        "100",
    ])
    .await;
    let c = &a.client;
    c.spawn(shell(
        "cap",
        "head -c 5000 /dev/zero | tr '\\000' A; echo; echo tail >&2; exit 7",
    ))
    .await
    .expect("spawn");
    let info = loop {
        let i = c.get_command("cap").await.expect("get");
        if i.state == CommandState::Exited {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Every byte counts (both streams); the first 600 and the last 400 are kept.
    assert_eq!(info.output_bytes, 5006);
    assert!(info.truncated);
    assert_eq!(info.exit_code, Some(7));
    let o = collect(c, "cap", 0, true).await;
    assert_eq!(o.gaps, vec![(600, 5006 - 1000)]);
    assert_eq!(o.stdout.len() + o.stderr.len(), 1000);
    assert_eq!(o.stderr, b"tail\n", "the tail keeps the last line");
    assert!(o.stdout.starts_with(&[b'A'; 600]) && o.stdout.ends_with(b"A\n"));
}

// ---------------------------------------------------------------------------------------------
// stdin (C05)

#[tokio::test]
async fn c05_stdin() {
    let a = Agent::start().await;
    let c = &a.client;

    let t0 = Instant::now();
    let mut r = shell("cat", "cat");
    r.timeout_ms = Some(10_000);
    let o = run(c, r).await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!((o.info().exit_code, o.stdout.len()), (Some(0), 0));
    let err = c.stdin_close("cat").await.expect_err("no stdin");
    assert_eq!(code(err), ErrorCode::FailedPrecondition);

    let mut r = shell("wc", "wc -c | tr -d ' '");
    r.stdin = true;
    c.spawn(r).await.expect("spawn");
    assert!(c.get_command("wc").await.expect("get").stdin_open);
    c.stdin_write("wc", Bytes::from_static(b"hello\n"))
        .await
        .expect("write");
    c.stdin_close("wc").await.expect("close");
    let o = collect(c, "wc", 0, true).await;
    assert_eq!(o.stdout, b"6\n");
    assert!(!o.info().stdin_open);

    let mut r = shell("od", "od -An -tx1 | tr -d ' \\n'");
    r.stdin = true;
    c.spawn(r).await.expect("spawn");
    c.stdin_write("od", Bytes::from_static(&[0, 1, 2, 0xFF]))
        .await
        .expect("write");
    c.stdin_close("od").await.expect("close");
    assert_eq!(collect(c, "od", 0, true).await.stdout, b"000102ff");

    let mut r = shell("head", "head -n1");
    r.stdin = true;
    c.spawn(r).await.expect("spawn");
    c.stdin_write("head", Bytes::from_static(b"first\nsecond\n"))
        .await
        .expect("write");
    let o = collect(c, "head", 0, true).await;
    assert_eq!(
        (o.stdout.as_slice(), o.info().exit_code),
        (&b"first\n"[..], Some(0))
    );
    let err = c
        .stdin_write("head", Bytes::from_static(b"x"))
        .await
        .expect_err("gone");
    assert_eq!(code(err), ErrorCode::FailedPrecondition);

    // A write blocked on a full pipe does not block a close.
    let mut r = shell("stuck", "sleep 30");
    r.stdin = true;
    c.spawn(r).await.expect("spawn");
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            c.stdin_write("stuck", Bytes::from(vec![b'x'; 300_000]))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    c.stdin_close("stuck").await.expect("close");
    assert!(t0.elapsed() < Duration::from_secs(2));
    let err = writer.await.expect("task").expect_err("aborted");
    assert_eq!(code(err), ErrorCode::FailedPrecondition);
    c.kill("stuck", Duration::ZERO).await.expect("kill");

    let err = c
        .stdin_write("nope", Bytes::from_static(b"x"))
        .await
        .expect_err("unknown");
    assert_eq!(code(err), ErrorCode::NotFound);
}

// ---------------------------------------------------------------------------------------------
// Timeout, kill, signals (C06, C07)

#[tokio::test]
async fn c07_timeout_kills_the_tree_promptly() {
    let a = Agent::start().await;
    let marker = a.scratch().join("should-not-exist");
    let mut r = shell(
        "to",
        &format!("sleep 10 & sleep 10; touch {}", marker.display()),
    );
    r.timeout_ms = Some(1000);
    let t0 = Instant::now();
    let pid = a.client.spawn(r).await.expect("spawn").pid;
    let o = collect(&a.client, "to", 0, true).await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    assert!(o.info().timed_out);
    assert_eq!(o.info().signal, Some(9));
    assert!(
        session_members(pid).is_empty(),
        "no process of the command remains"
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn c06_kill_ends_the_whole_tree() {
    let a = Agent::start().await;
    let c = &a.client;

    let p = c
        .spawn(shell(
            "p",
            "sh -c 'sleep 3001 & sleep 3002 & echo ready; wait'",
        ))
        .await
        .expect("spawn")
        .pid;
    let q = c
        .spawn(shell(
            "q",
            "sh -c 'trap \"\" TERM; echo ready; while :; do sleep 1; done'",
        ))
        .await
        .expect("spawn")
        .pid;
    wait_for_output(c, "p", 6).await;
    wait_for_output(c, "q", 6).await;
    assert!(session_members(p).len() >= 3);

    let info = c
        .kill("p", Duration::from_millis(500))
        .await
        .expect("kill p");
    assert_eq!(info.state, CommandState::Exited);
    assert!(info.signal.is_some(), "{info:?}");
    assert!(session_members(p).is_empty());

    let t0 = Instant::now();
    let info = c
        .kill("q", Duration::from_millis(500))
        .await
        .expect("kill q");
    assert!(t0.elapsed() >= Duration::from_millis(450));
    assert_eq!(
        (info.state, info.signal, info.exit_code),
        (CommandState::Exited, Some(9), None)
    );
    assert!(
        session_members(q).is_empty(),
        "TERM-ignoring children are gone"
    );
    assert!(c
        .list_commands()
        .await
        .expect("list")
        .iter()
        .all(|i| i.state == CommandState::Exited));

    let err = c.signal("q", 15).await.expect_err("exited");
    assert_eq!(code(err), ErrorCode::FailedPrecondition);
}

#[tokio::test]
async fn c06_signal_is_delivered_as_is() {
    let a = Agent::start().await;
    let c = &a.client;
    c.spawn(shell(
        "r",
        "sh -c 'trap \"echo got-int; exit 42\" INT; echo ready; while :; do sleep 0.2; done'",
    ))
    .await
    .expect("spawn");
    wait_for_output(c, "r", 6).await;
    c.signal("r", 2).await.expect("signal");
    let o = collect(c, "r", 0, true).await;
    assert!(String::from_utf8_lossy(&o.stdout).contains("got-int"));
    assert_eq!(o.info().exit_code, Some(42));
    assert_eq!(
        code(c.signal("r", 0).await.expect_err("bad signal")),
        ErrorCode::InvalidArgument
    );
}

// ---------------------------------------------------------------------------------------------
// Environment, cwd, user (C08, C09)

#[tokio::test]
async fn c08_env_is_exact_and_per_command() {
    let a = Agent::start().await;
    let c = &a.client;
    let tricky = " a b'c\"d$HOME`x`\nline2 ";
    let mut r = shell("t", "printf '%s' \"$TRICKY\"");
    r.env.insert("TRICKY".into(), tricky.into());
    assert_eq!(run(c, r).await.stdout, tricky.as_bytes());

    let mut r = shell("n", "sh -c 'printf %s \"$SHARED\"'");
    r.env.insert("SHARED".into(), "nested".into());
    assert_eq!(run(c, r).await.stdout, b"nested");
    assert_eq!(
        run(c, shell("leak", "printf '%s' \"$SHARED\""))
            .await
            .stdout,
        b""
    );

    let o = run(c, argv("defaults", &["/usr/bin/env"])).await;
    let env = String::from_utf8_lossy(&o.stdout).into_owned();
    for line in [
        "HOME=",
        "USER=",
        "LOGNAME=",
        "SHELL=",
        "LANG=C.UTF-8",
        "PATH=/usr/local/sbin:",
    ] {
        assert!(env.lines().any(|l| l.starts_with(line)), "{line} in {env}");
    }

    for bad in ["A=B", ""] {
        let mut r = shell("bad", "true");
        r.env.insert(bad.into(), "x".into());
        assert_eq!(
            code(c.spawn(r).await.expect_err(bad)),
            ErrorCode::InvalidArgument
        );
    }
}

#[tokio::test]
async fn c09_cwd_is_enforced() {
    let a = Agent::start().await;
    let c = &a.client;
    let proj = a.scratch().join("proj");
    std::fs::create_dir_all(&proj).expect("mkdir");

    let mut r = shell("w", "true & wait; pwd > where.txt");
    r.cwd = Some(gpath(&proj));
    run(c, r).await;
    let where_ = std::fs::read_to_string(proj.join("where.txt")).expect("where.txt");
    assert_eq!(where_, format!("{}\n", proj.display()));

    let marker = a.scratch().join("ran-anyway");
    let mut r = shell("m", &format!("touch {}", marker.display()));
    r.cwd = Some(gpath("/nonexistent/dir"));
    let err = c.spawn(r).await.expect_err("missing cwd");
    match err {
        GuestError::Guest { code, message } => {
            assert_eq!(code, ErrorCode::NotFound);
            assert!(message.contains("/nonexistent/dir"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!marker.exists());

    let mut r = shell("f", "true");
    r.cwd = Some(gpath(proj.join("where.txt")));
    assert_eq!(
        code(c.spawn(r).await.expect_err("file cwd")),
        ErrorCode::WrongType
    );
}

#[tokio::test]
async fn c09_user_switching_and_ownership() {
    let a = Agent::start().await;
    let c = &a.client;
    let mut r = shell("unknown", "true");
    r.user = Some("no-such-user-x".into());
    assert_eq!(
        code(c.spawn(r).await.expect_err("unknown user")),
        ErrorCode::UnknownUser
    );

    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if !is_root() || !passwd.lines().any(|l| l.starts_with("nobody:")) {
        eprintln!("skipping user switching: not root or no 'nobody' user");
        return;
    }
    let mut r = argv("root", &["id", "-un"]);
    r.user = Some("root".into());
    assert_eq!(run(c, r).await.stdout, b"root\n");
    let mut r = argv("nobody", &["id", "-un"]);
    r.user = Some("nobody".into());
    let o = run(c, r).await;
    assert_eq!(o.stdout, b"nobody\n");
    assert_eq!(o.info().user, "nobody");

    // C09 step 5: created parents belong to the user. File operations have the user's
    // permissions, so `nobody` gets a directory it may write to.
    use std::os::unix::fs::PermissionsExt;
    let scratch = a.scratch();
    for (p, mode) in [(a.dir.path(), 0o755), (scratch.as_path(), 0o777)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let base = scratch.join("n1");
    let file = base.join("n2/f.txt");
    let body = futures::stream::iter(vec![Ok(Bytes::from_static(b"x"))]);
    let wreq = WriteFileRequest {
        path: gpath(&file),
        user: Some("nobody".into()),
        mode: None,
        max_bytes: None,
    };
    let info = c.write_file(wreq, body).await.expect("write");
    assert_eq!(info.owner, "nobody");
    for p in [base.clone(), base.join("n2"), file.clone()] {
        let st = c.stat(gpath(&p), None).await.expect("stat");
        assert_eq!(st.owner, "nobody", "{}", p.display());
    }
}

// ---------------------------------------------------------------------------------------------
// Files (C10, C11)

fn random_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|_| rand::random::<u8>()).collect()
}

async fn write(
    c: &GuestClient,
    path: &Path,
    data: &[u8],
) -> Result<cove_guest_protocol::FileInfo, GuestError> {
    let chunks: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(300_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let req = WriteFileRequest {
        path: gpath(path),
        user: None,
        mode: None,
        max_bytes: None,
    };
    c.write_file(req, futures::stream::iter(chunks)).await
}

async fn read(
    c: &GuestClient,
    path: &Path,
    offset: u64,
    length: Option<u64>,
) -> Result<Vec<u8>, GuestError> {
    let (_, body) = c.read_file(gpath(path), None, offset, length).await?;
    futures::pin_mut!(body);
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

#[tokio::test]
async fn c10_files_round_trip_exactly() {
    let a = Agent::start().await;
    let c = &a.client;
    let up = a.scratch().join("up");
    for size in [0usize, 1, 18431, (1 << 20) + 1] {
        let data = random_bytes(size);
        let path = up.join(format!("f_{size}"));
        let info = write(c, &path, &data).await.expect("write");
        assert_eq!(
            (info.size, info.file_type, info.mode),
            (size as u64, FileType::File, 0o644)
        );
        assert_eq!(std::fs::read(&path).expect("host read"), data);
        assert_eq!(read(c, &path, 0, None).await.expect("read"), data);
    }
    let data = std::fs::read(up.join("f_18431")).expect("read");
    assert_eq!(
        read(c, &up.join("f_18431"), 100, Some(50))
            .await
            .expect("range"),
        data[100..150]
    );
    assert_eq!(
        read(c, &up.join("f_18431"), 18000, None)
            .await
            .expect("tail"),
        data[18000..]
    );

    let (info, body) = c
        .read_file(gpath(up.join("f_0")), None, 0, None)
        .await
        .expect("empty");
    assert_eq!(info.size, 0);
    assert_eq!(body.collect::<Vec<_>>().await.len(), 0);

    let err = c
        .read_file(gpath(&up), None, 0, None)
        .await
        .err()
        .expect("dir");
    assert_eq!(code(err), ErrorCode::WrongType);
    let err = c
        .read_file(gpath(up.join("missing")), None, 0, None)
        .await
        .err()
        .expect("missing");
    assert_eq!(code(err), ErrorCode::NotFound);

    // Replacing keeps the old mode unless one is given.
    let p = up.join("f_1");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    assert_eq!(write(c, &p, b"new").await.expect("write").mode, 0o600);

    // Too large: refused, nothing left at the path.
    let req = WriteFileRequest {
        path: gpath(up.join("big")),
        user: None,
        mode: None,
        max_bytes: Some(10),
    };
    let body = futures::stream::iter(vec![Ok(Bytes::from(vec![1u8; 100]))]);
    assert_eq!(
        code(c.write_file(req, body).await.expect_err("too large")),
        ErrorCode::TooLarge
    );
    assert!(!up.join("big").exists());

    // A directory at the path.
    assert_eq!(
        code(write(c, &up, b"x").await.expect_err("dir")),
        ErrorCode::WrongType
    );
}

#[tokio::test]
async fn xattrs_are_replaced_under_a_namespace_and_read_in_batches() {
    let a = Agent::start().await;
    let c = &a.client;
    let dir = a.scratch().join("x");
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("f");
    std::fs::write(&f, b"x").expect("file");
    xattr::set(&f, "user.other", b"kept").expect("other namespace");
    let set = |entries: &[(&str, &str)]| SetXattrsRequest {
        path: gpath(&f),
        user: None,
        namespace: "user.e2b.".into(),
        entries: entries
            .iter()
            .map(|(k, v)| (k.to_string(), XattrValue(v.as_bytes().to_vec())))
            .collect(),
    };
    c.set_xattrs(set(&[("a", "1"), ("b", "2")]))
        .await
        .expect("set");
    assert_eq!(
        xattr::get(&f, "user.e2b.a").expect("get"),
        Some(b"1".to_vec())
    );
    // Replacing drops what is not given, and leaves other namespaces alone.
    c.set_xattrs(set(&[("b", "3")])).await.expect("replace");
    let paths = vec![gpath(&f), gpath(dir.join("missing")), gpath(&dir)];
    let maps = c
        .get_xattrs(paths, None, "user.e2b.".into())
        .await
        .expect("get");
    assert_eq!(maps.len(), 3);
    let b: BTreeMap<String, XattrValue> =
        BTreeMap::from([("b".to_string(), XattrValue(b"3".to_vec()))]);
    assert_eq!(maps[0], b);
    assert!(maps[1].is_empty() && maps[2].is_empty());
    assert_eq!(
        xattr::get(&f, "user.other").expect("get"),
        Some(b"kept".to_vec())
    );

    // Outside the user class, on a symlink, or too much: refused, nothing changed.
    let mut bad = set(&[("x", "1")]);
    bad.namespace = "trusted.".into();
    assert_eq!(
        code(c.set_xattrs(bad).await.expect_err("namespace")),
        ErrorCode::InvalidArgument
    );
    let link = dir.join("link");
    std::os::unix::fs::symlink(&f, &link).expect("symlink");
    let mut on_link = set(&[("x", "1")]);
    on_link.path = gpath(&link);
    assert_eq!(
        code(c.set_xattrs(on_link).await.expect_err("symlink")),
        ErrorCode::FailedPrecondition
    );
    let big = "v".repeat(MAX_XATTR_BYTES);
    assert_eq!(
        code(c.set_xattrs(set(&[("big", &big)])).await.expect_err("big")),
        ErrorCode::InvalidArgument
    );
    let mut missing = set(&[("x", "1")]);
    missing.path = gpath(dir.join("missing"));
    assert_eq!(
        code(c.set_xattrs(missing).await.expect_err("missing")),
        ErrorCode::NotFound
    );
    assert_eq!(
        xattr::get(&f, "user.e2b.b").expect("get"),
        Some(b"3".to_vec())
    );
}

#[tokio::test]
async fn interrupted_upload_leaves_the_old_file() {
    let a = Agent::start().await;
    let c = &a.client;
    let dir = a.scratch().join("w");
    let path = dir.join("f");
    write(c, &path, b"old").await.expect("write");
    let body = futures::stream::iter(vec![
        Ok(Bytes::from(vec![7u8; 500_000])),
        Err(std::io::Error::other("client went away")),
    ]);
    let req = WriteFileRequest {
        path: gpath(&path),
        user: None,
        mode: None,
        max_bytes: None,
    };
    assert!(c.write_file(req, body).await.is_err());
    // The guest notices the closed connection and removes its temporary file.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        if names.len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "temporary file left: {names:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(read(c, &path, 0, None).await.expect("read"), b"old");
}

#[tokio::test]
async fn c11_symlinks_are_listed_not_followed() {
    let a = Agent::start().await;
    let c = &a.client;
    let d = a.scratch().join("l");
    std::fs::create_dir_all(d.join("sub/deeper")).expect("mkdir");
    std::fs::write(d.join("file"), b"hello").expect("file");
    std::fs::write(d.join("sub/inner"), b"i").expect("inner");
    std::os::unix::fs::symlink("/", d.join("rootlink")).expect("link");
    std::os::unix::fs::symlink("/nonexistent", d.join("broken")).expect("link");
    std::os::unix::fs::symlink(d.join("file"), d.join("flink")).expect("link");

    let entries = c.list_dir(gpath(&d), None, 1).await.expect("list");
    let names: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name.0).into_owned())
        .collect();
    assert_eq!(names, ["broken", "file", "flink", "rootlink", "sub"]);
    for e in &entries {
        let name = String::from_utf8_lossy(&e.name.0);
        match name.as_ref() {
            "broken" | "flink" | "rootlink" => {
                assert_eq!(e.file_type, FileType::Symlink);
                assert!(e.symlink_target.is_some());
            }
            "file" => assert_eq!((e.file_type, e.size), (FileType::File, 5)),
            _ => assert_eq!(e.file_type, FileType::Dir),
        }
    }
    let broken = entries
        .iter()
        .find(|e| e.name.0 == b"broken")
        .expect("broken");
    assert_eq!(
        broken.symlink_target,
        Some(GuestPath(b"/nonexistent".to_vec()))
    );

    let deep = c.list_dir(gpath(&d), None, 3).await.expect("list deep");
    let paths: Vec<String> = deep
        .iter()
        .map(|e| String::from_utf8_lossy(&e.path.0).into_owned())
        .collect();
    let expected: Vec<String> = [
        "broken",
        "file",
        "flink",
        "rootlink",
        "sub",
        "sub/deeper",
        "sub/inner",
    ]
    .iter()
    .map(|n| d.join(n).to_string_lossy().into_owned())
    .collect();
    assert_eq!(paths, expected, "symlinks are not descended into");

    // Reading through a symlinked directory reads the target inside the same root.
    assert_eq!(
        read(
            c,
            &d.join("rootlink")
                .join(d.strip_prefix("/").expect("abs"))
                .join("file"),
            0,
            None
        )
        .await
        .expect("read"),
        b"hello"
    );

    c.remove(gpath(d.join("rootlink")), None)
        .await
        .expect("remove link");
    c.remove(gpath(d.join("flink")), None)
        .await
        .expect("remove link");
    assert!(std::fs::symlink_metadata(d.join("rootlink")).is_err());
    assert_eq!(
        std::fs::read(d.join("file")).expect("target kept"),
        b"hello"
    );

    let st = c.stat(gpath(d.join("broken")), None).await.expect("stat");
    assert_eq!(st.file_type, FileType::Symlink);
    assert_eq!(
        code(
            c.list_dir(gpath(d.join("file")), None, 1)
                .await
                .expect_err("file")
        ),
        ErrorCode::WrongType
    );
}

#[tokio::test]
async fn mkdir_rename_remove() {
    let a = Agent::start().await;
    let c = &a.client;
    let d = a.scratch().join("m");
    let info = c
        .make_dir(gpath(d.join("a/b/c")), None)
        .await
        .expect("mkdir");
    assert_eq!((info.file_type, info.mode), (FileType::Dir, 0o755));
    c.make_dir(gpath(d.join("a/b/c")), None)
        .await
        .expect("mkdir again");
    write(c, &d.join("a/f"), b"1").await.expect("write");
    assert_eq!(
        code(
            c.make_dir(gpath(d.join("a/f")), None)
                .await
                .expect_err("file")
        ),
        ErrorCode::AlreadyExists
    );

    let info = c
        .rename(gpath(d.join("a/f")), gpath(d.join("a/g")), None)
        .await
        .expect("rename");
    assert_eq!(info.name.0, b"g");
    assert_eq!(
        code(c.stat(gpath(d.join("a/f")), None).await.expect_err("moved")),
        ErrorCode::NotFound
    );

    c.remove(gpath(d.join("a")), None)
        .await
        .expect("remove tree");
    assert!(!d.join("a").exists());
    assert_eq!(
        code(c.remove(gpath(d.join("a")), None).await.expect_err("gone")),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(
            c.stat(GuestPath(b"/a\0b".to_vec()), None)
                .await
                .expect_err("nul")
        ),
        ErrorCode::InvalidArgument
    );
}

// ---------------------------------------------------------------------------------------------
// Protocol and bookkeeping

#[tokio::test]
async fn commands_are_listed_and_forgotten() {
    let a = Agent::start().await;
    let c = &a.client;
    c.ping().await.expect("ping");
    c.spawn(shell("long", "sleep 5")).await.expect("spawn");
    run(c, shell("short", "true")).await;
    let list = c.list_commands().await.expect("list");
    let ids: Vec<&str> = list.iter().map(|i| i.command_id.as_str()).collect();
    assert_eq!(ids, ["long", "short"]);
    let long = &list[0];
    assert_eq!(long.state, CommandState::Running);
    assert_eq!(long.argv[..3], ["/bin/bash", "-l", "-c"]);
    if is_root() {
        assert_eq!(long.user, "root");
    }
    assert_eq!(
        code(c.forget_command("long").await.expect_err("running")),
        ErrorCode::FailedPrecondition
    );
    c.kill("long", Duration::from_millis(100))
        .await
        .expect("kill");
    c.forget_command("long").await.expect("forget");
    assert_eq!(c.list_commands().await.expect("list").len(), 1);
}

#[tokio::test]
async fn many_calls_share_one_connection() {
    let a = Agent::start().await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let c = a.client.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("p{i}");
            c.spawn(shell(&id, &format!("printf {i}")))
                .await
                .expect("spawn");
            c.ping().await.expect("ping");
            let o = collect(&c, &id, 0, true).await;
            assert_eq!(o.stdout, i.to_string().as_bytes());
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(a.client.list_commands().await.expect("list").len(), 40);
}

#[tokio::test]
async fn bad_frames_drop_only_their_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let a = Agent::start().await;
    let socket = a.dir.path().join("agent.sock");

    // Garbage instead of a frame.
    let mut raw = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    raw.write_all(&[0, 0, 0, 3, 0xFF, 0xFF, 0xFF])
        .await
        .expect("write");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut buf))
        .await
        .expect("closed");

    // An oversized length prefix.
    let mut raw = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    raw.write_all(&u32::MAX.to_be_bytes()).await.expect("write");
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut buf))
        .await
        .expect("closed");

    // A wrong version.
    let mut raw = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let hello = cove_guest_protocol::HostFrame {
        id: 0,
        request: cove_guest_protocol::Request::Hello { version: 999 },
    };
    cove_guest_protocol::write_frame(&mut raw, &hello)
        .await
        .expect("write");
    let answer: cove_guest_protocol::GuestFrame = cove_guest_protocol::read_frame(&mut raw)
        .await
        .expect("answer");
    assert!(matches!(
        answer.response,
        cove_guest_protocol::Response::Error {
            code: ErrorCode::UnsupportedVersion,
            ..
        }
    ));

    a.client.ping().await.expect("the agent still serves");
}

#[tokio::test]
async fn background_processes_do_not_hold_the_result() {
    let a = Agent::start().await;
    let c = &a.client;
    let t0 = Instant::now();
    let pid = c
        .spawn(shell("bg", "(sleep 30; echo late) & echo hi"))
        .await
        .expect("spawn")
        .pid;
    let o = collect(c, "bg", 0, true).await;
    assert_eq!(o.stdout, b"hi\n");
    assert_eq!(o.info().exit_code, Some(0));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(
        !session_members(pid).is_empty(),
        "the background process still runs"
    );
    // Kill reaches what is left of an exited command.
    let info = c
        .kill("bg", Duration::from_millis(200))
        .await
        .expect("kill");
    assert_eq!(info.exit_code, Some(0));
    assert!(session_members(pid).is_empty());

    // Orphans are reaped by the agent (a subreaper): no zombie children stay.
    run(
        c,
        shell("orphans", "for i in 1 2 3; do (sleep 0.1 &) ; done"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let agent_pid = a.child.id().to_string();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        assert!(
            !(fields.len() > 1 && fields[1] == agent_pid && fields[0] == "Z"),
            "zombie child of the agent: {stat}"
        );
    }
}

/// C04 at full size: exact bytes, bounded agent memory (the output spills to the run dir).
#[tokio::test]
async fn c04_100_mb_of_output() {
    let a = Agent::start().await;
    let c = &a.client;
    let t0 = Instant::now();
    let script = "head -c 104857600 /dev/zero | tr '\\000' 'A'; printf '\\nEND-OF-STDOUT\\n'; \
                  echo STDERR-TAIL >&2; exit 7";
    c.spawn(shell("big", script)).await.expect("spawn");
    let stream = c.attach("big", 0, true).await.expect("attach");
    futures::pin_mut!(stream);
    let (mut out_len, mut tail, mut err) = (0u64, Vec::new(), Vec::new());
    let mut info = None;
    while let Some(event) = stream.next().await {
        match event.expect("event") {
            AttachEvent::Output {
                stream: Stream::Stdout,
                data,
                ..
            } => {
                out_len += data.len() as u64;
                tail.extend_from_slice(&data);
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
            }
            AttachEvent::Output { data, .. } => err.extend_from_slice(&data),
            AttachEvent::Exited(i) => info = Some(i),
            AttachEvent::Gap { .. } => panic!("a reader that keeps up sees no gap"),
            AttachEvent::End => {}
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert_eq!(out_len, 104_857_615);
    assert!(tail.ends_with(b"\nEND-OF-STDOUT\n"));
    assert_eq!(err, b"STDERR-TAIL\n");
    assert_eq!(info.expect("exited").exit_code, Some(7));
    let o = run(c, shell("alive", "echo alive")).await;
    assert_eq!(o.stdout, b"alive\n");
    let status = std::fs::read_to_string(format!("/proc/{}/status", a.child.id())).expect("status");
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or_default()
        .to_string();
    eprintln!("agent peak memory: {rss}");
}

// ---------------------------------------------------------------------------------------------
// Quiesce (gVisor checkpoints)

/// Waits until `path` exists (`present`) or is gone.
async fn wait_path(path: &Path, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while path.exists() != present {
        assert!(
            Instant::now() < deadline,
            "{} still {}",
            path.display(),
            if present { "missing" } else { "there" }
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_quiesced_agent_drops_its_socket_and_connections_and_keeps_its_commands() {
    use nix::sys::signal::{kill, Signal};
    let agent = Agent::start_with(&[cove_guest_protocol::QUIESCE_FLAG]).await;
    let pid = nix::unistd::Pid::from_raw(agent.child.id() as i32);
    let socket = agent.dir.path().join("agent.sock");
    let marker = agent.run_dir().join(cove_guest_protocol::QUIESCED_MARKER);
    let c = &agent.client;
    c.spawn(shell(
        "count",
        "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo $i; sleep 0.05; done",
    ))
    .await
    .expect("spawn");
    wait_for_output(c, "count", 4).await;
    // A stream the host holds open (an attach of a running command) is closed too.
    let stream = c.attach("count", 0, true).await.expect("attach");
    futures::pin_mut!(stream);

    kill(pid, Signal::SIGUSR1).expect("quiesce signal");
    wait_path(&marker, true).await;
    // On the host (unlike in gVisor) the agent removes its socket itself.
    assert!(!socket.exists(), "the socket is gone");
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = stream.next().await {
            if event.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the attach stream was not closed");
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_err(),
        "nothing listens"
    );
    // The relisten signal of before is not taken for one of after: only a new one counts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!socket.exists(), "still quiet");

    kill(pid, Signal::SIGUSR2).expect("relisten signal");
    wait_path(&socket, true).await;
    assert!(
        !marker.exists(),
        "the marker goes when the agent listens again"
    );
    // A new client finds the command that ran on meanwhile, with all of its output.
    let again = GuestClient::new(std::sync::Arc::new(cove_runtime::UnixSocketConnector::new(
        socket.clone(),
    )));
    again
        .connect(Duration::from_secs(10))
        .await
        .expect("agent answers again");
    let out = collect(&again, "count", 0, true).await;
    let want: String = (1..=40).map(|i| format!("{i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert_eq!(out.info().exit_code, Some(0));

    // A second quiesce works the same.
    kill(pid, Signal::SIGUSR1).expect("quiesce signal");
    wait_path(&marker, true).await;
    kill(pid, Signal::SIGUSR2).expect("relisten signal");
    wait_path(&socket, true).await;
    again
        .connect(Duration::from_secs(10))
        .await
        .expect("agent answers after the second quiesce");
}
