//! The runc driver against real runc: a busybox rootfs, and as the guest agent a tiny static C
//! program (`fixtures/agent.c`) that runs one `/bin/sh -c` line per connection on its socket.
//!
//! Needs root, runc, `cc` with static glibc, and `/bin/busybox` (busybox-static).

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cove_guest_protocol::GUEST_AGENT_PATH;
use cove_runtime::runc::{RuncConfig, RuncRuntime};
use cove_runtime::{Runtime, RuntimeError, RuntimeState, SandboxSpec};
use tempfile::TempDir;

const MIB: u64 = 1024 * 1024;

/// Agent binary and busybox rootfs, shared (read-only) by all tests like a release shared by
/// sandboxes. Built once into `CARGO_TARGET_TMPDIR`, keyed by the fixture's source and the host's
/// busybox, through a temp dir + rename so parallel test processes do not trip over each other.
struct Fixture {
    agent: PathBuf,
    rootfs: PathBuf,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent.c");
        let source = std::fs::read(&src).expect("read agent.c");
        let busybox = std::fs::metadata("/bin/busybox").expect("/bin/busybox (busybox-static)");
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (source, busybox.len(), busybox.modified().ok()).hash(&mut hasher);
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let dir = base.join(format!("runc-fixture-{:016x}", hasher.finish()));
        if !dir.exists() {
            std::fs::create_dir_all(base).expect("mkdir target tmp");
            let tmp = tempfile::Builder::new()
                .prefix(".runc-fixture-")
                .tempdir_in(base)
                .expect("tempdir");
            build_fixture(tmp.path(), &src);
            // Another test process may have won the race; its fixture is identical.
            if std::fs::rename(tmp.path(), &dir).is_err() {
                assert!(dir.exists(), "fixture rename failed");
            }
        }
        Fixture {
            agent: dir.join("agent"),
            rootfs: dir.join("rootfs"),
        }
    })
}

fn build_fixture(dir: &Path, src: &Path) {
    let out = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(dir.join("agent"))
        .arg(src)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let rootfs = dir.join("rootfs");
    for d in ["bin", "etc", "tmp", "root", "proc", "sys", "dev"] {
        std::fs::create_dir_all(rootfs.join(d)).expect("mkdir");
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).expect("copy busybox");
    let list = Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let link = rootfs.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link).expect("symlink");
        }
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
}

/// One test's runtime (own runc state root) and sandbox directory; tears down on drop even when
/// the test panics.
struct Harness {
    runtime: RuncRuntime,
    dir: TempDir,
    spec: SandboxSpec,
}

fn unique_id(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{}-{}-{}",
        std::process::id(),
        tag,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl Harness {
    fn new(tag: &str) -> Harness {
        let f = fixture();
        let dir = tempfile::Builder::new()
            .prefix("cove-runc-test-")
            .tempdir()
            .expect("tempdir");
        let runtime = RuncRuntime::new(RuncConfig {
            runc_binary: PathBuf::from("runc"),
            state_root: dir.path().join("runc"),
            lxcfs_dir: None,
            user_namespaces: None,
        })
        .expect("runc available");
        let id = unique_id(tag);
        let spec = SandboxSpec {
            id: id.clone(),
            rootfs: f.rootfs.clone(),
            dir: dir.path().join("sandboxes").join(&id),
            guest_agent: f.agent.clone(),
            guest_agent_args: Vec::new(),
            hostname: format!("h-{id}"),
            resources: cove_domain::Resources {
                vcpus: 1,
                memory_mib: 64,
                pids_max: 64,
                disk_mib: None,
            },
            network: None,
            volumes: Vec::new(),
        };
        Harness { runtime, dir, spec }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(self.dir.path().join("runc"))
            .args(["delete", "--force", &self.spec.id])
            .output();
        for mount in ["rootfs", "disk"] {
            let path = self.spec.dir.join(mount);
            if mounted(&path) {
                let _ = Command::new("umount").arg("-l").arg(&path).output();
            }
        }
    }
}

/// Runs `line` with `/bin/sh -c` inside the sandbox through the fixture agent.
fn sh(socket: &Path, line: &str) -> String {
    let mut s = UnixStream::connect(socket).expect("connect to agent");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(format!("{line}\n").as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.trim_end().to_string()
}

fn mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let p = path.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == p))
}

fn host_has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff");
    u64::from_str_radix(hex.trim(), 16).expect("hex") & (1 << 24) != 0
}

fn read_trim(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_string()
}

#[tokio::test]
async fn sandbox_lifecycle() {
    let h = Harness::new("life");
    let rt = &h.runtime;
    let spec = &h.spec;

    let began = Instant::now();
    let started = rt.start(spec).await.expect("start");
    let start_ms = began.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(
        RuncRuntime::agent_socket(&spec.dir),
        spec.dir.join("run/agent.sock")
    );
    assert!(
        RuncRuntime::agent_socket(&spec.dir).exists(),
        "socket visible on the host"
    );
    let sock = &RuncRuntime::agent_socket(&spec.dir);

    // Identity and isolation.
    assert_eq!(sh(sock, "hostname"), spec.hostname);
    assert_eq!(sh(sock, "cat /etc/hostname"), spec.hostname);
    assert!(sh(sock, "cat /etc/hosts").contains(&spec.hostname));
    assert_eq!(
        sh(sock, "tr '\\0' ' ' < /proc/1/cmdline"),
        format!("{GUEST_AGENT_PATH} --listen /.cove/run/agent.sock")
    );
    assert_eq!(sh(sock, "readlink /proc/1/exe"), GUEST_AGENT_PATH);
    // -1000 needs CAP_SYS_RESOURCE on the host; without it the runtime leaves the score at 0.
    let expected_adj = if host_has_cap_sys_resource() {
        "-1000"
    } else {
        "0"
    };
    assert_eq!(sh(sock, "cat /proc/1/oom_score_adj"), expected_adj);
    assert_eq!(sh(sock, "cat /proc/self/oom_score_adj"), "0");
    let status = sh(sock, "cat /proc/self/status");
    assert!(status.contains("NoNewPrivs:\t0"), "{status}");
    // Docker's default capability set without CAP_NET_RAW.
    assert!(status.contains("CapBnd:\t00000000a80405fb"), "{status}");
    // Only loopback.
    let ifaces = sh(sock, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert_eq!(ifaces, "lo");
    // Seccomp: unshare is denied (root without CAP_SYS_ADMIN could otherwise make a user ns).
    assert_eq!(sh(sock, "unshare -U true 2>/dev/null; echo $?"), "1");
    // The agent's binary is read-only.
    assert_ne!(
        sh(sock, "echo x > /.cove/bin/cove-guest-agent 2>&1; echo $?"),
        "0"
    );
    // The run dir's entries are sealed once the agent listens: the socket cannot be removed
    // or replaced from inside.
    assert_eq!(
        sh(sock, "(echo x > /.cove/run/f) 2>/dev/null || echo sealed"),
        "sealed"
    );
    assert_eq!(
        sh(
            sock,
            "rm -f /.cove/run/agent.sock 2>/dev/null || echo sealed"
        ),
        "sealed"
    );
    // Writes land in upper/, the shared lower stays untouched.
    assert_eq!(sh(sock, "echo hi > /root/note && echo ok"), "ok");
    assert!(spec.dir.join("upper/root/note").exists());
    assert!(!fixture().rootfs.join("root/note").exists());

    // The host view of init.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", started.init_pid)).expect("cmdline");
    assert!(String::from_utf8_lossy(&cmdline).contains("--listen"));

    // Limits, through the cgroup paths the runtime reports.
    let cgroups = rt.cgroup_paths(&spec.id).await.expect("cgroup paths");
    let path_of = |c: &str| {
        cgroups
            .iter()
            .find(|(name, _)| name == c)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("no {c} cgroup in {cgroups:?}"))
    };
    let memory = path_of("memory");
    assert_eq!(
        read_trim(&memory.join("memory.limit_in_bytes")),
        (64 * MIB).to_string()
    );
    let memsw = memory.join("memory.memsw.limit_in_bytes");
    if memsw.exists() {
        assert_eq!(read_trim(&memsw), (64 * MIB).to_string());
    }
    assert_eq!(read_trim(&path_of("pids").join("pids.max")), "64");
    assert_eq!(
        read_trim(&path_of("cpu").join("cpu.cfs_quota_us")),
        "100000"
    );
    let procs = read_trim(&memory.join("cgroup.procs"));
    assert!(
        procs.lines().any(|l| l == started.init_pid.to_string()),
        "init in its memory cgroup"
    );

    // Pause and resume.
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Running)
    );
    let t = Instant::now();
    rt.pause(&spec.id).await.expect("pause");
    let pause_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Paused)
    );
    assert_eq!(
        read_trim(&path_of("freezer").join("freezer.state")),
        "FROZEN"
    );
    rt.resume(&spec.id).await.expect("resume");
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Running)
    );
    assert_eq!(sh(sock, "echo back"), "back");

    assert!(rt.list().await.expect("list").contains(&spec.id));

    // Stop from paused: it must still go away.
    rt.pause(&spec.id).await.expect("pause");
    let t = Instant::now();
    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    let stop_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(rt.state(&spec.id).await.expect("state"), None);
    assert!(!rt.list().await.expect("list").contains(&spec.id));
    assert!(!mounted(&spec.dir.join("rootfs")), "overlay unmounted");
    assert!(!memory.exists(), "memory cgroup removed");
    // Gone, or a zombie until the host's init reaps it (runc create exited, so init reparented).
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", started.init_pid)) {
        let state = stat.rsplit_once(')').map(|(_, r)| r.trim_start());
        assert!(state.is_some_and(|s| s.starts_with('Z')), "{stat}");
    }
    assert!(spec.dir.join("upper/root/note").exists(), "upper kept");
    for gone in ["work", "bundle", "run", "rootfs"] {
        assert!(!spec.dir.join(gone).exists(), "{gone} removed");
    }
    rt.stop(&spec.id, &spec.dir).await.expect("second stop");
    eprintln!(
        "timing: start→socket {start_ms:.1} ms, pause {pause_ms:.1} ms, stop (paused) {stop_ms:.1} ms"
    );
}

/// `runc` run against the harness's state root; its stdout.
fn raw_runc(h: &Harness, args: &[&str]) -> String {
    let out = Command::new("runc")
        .arg("--root")
        .arg(h.dir.path().join("runc"))
        .args(args)
        .output()
        .expect("run runc");
    assert!(
        out.status.success(),
        "runc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Pause and resume write the cgroup freezer directly; runc sees what it would have done
/// itself: `runc state` says paused, `runc resume` thaws, a fresh runtime (a restart) finds
/// the freezer again, and a paused container is still deleted. Processes and files survive.
#[tokio::test]
async fn freezer_pause_is_what_runc_sees() {
    let h = Harness::new("freeze");
    let rt = &h.runtime;
    let spec = &h.spec;
    rt.start(spec).await.expect("start");
    let sock = &RuncRuntime::agent_socket(&spec.dir);
    sh(
        sock,
        "echo kept > /root/file; sleep 1000 </dev/null >/dev/null 2>&1 &",
    );
    let sleeper = sh(sock, "pgrep -x sleep");
    assert!(!sleeper.is_empty(), "a background process runs");

    rt.pause(&spec.id).await.expect("pause");
    let state = raw_runc(&h, &["state", &spec.id]);
    assert!(state.contains("\"status\": \"paused\""), "{state}");
    // runc itself resumes what the freezer froze.
    raw_runc(&h, &["resume", &spec.id]);
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Running)
    );
    assert_eq!(
        sh(sock, "cat /root/file; pgrep -x sleep"),
        format!("kept\n{sleeper}")
    );

    // And the freezer resumes what runc paused.
    raw_runc(&h, &["pause", &spec.id]);
    rt.resume(&spec.id)
        .await
        .expect("resume a runc-paused container");
    assert_eq!(sh(sock, "echo alive"), "alive");

    // A new runtime over the same state root (a restart) adopts and pauses it.
    let again = RuncRuntime::new(RuncConfig {
        runc_binary: PathBuf::from("runc"),
        state_root: h.dir.path().join("runc"),
        lxcfs_dir: None,
        user_namespaces: None,
    })
    .expect("runc available");
    rt.pause(&spec.id).await.expect("pause");
    let adopted = again
        .adopt(&spec.id, &spec.dir)
        .await
        .expect("adopt")
        .expect("found");
    assert_eq!(adopted.state, RuntimeState::Paused);
    again.resume(&spec.id).await.expect("resume after adoption");
    assert_eq!(sh(sock, "pgrep -x sleep"), sleeper, "processes survive");
    // Pausing twice and resuming twice are harmless; a paused container still stops.
    again.pause(&spec.id).await.expect("pause");
    again.pause(&spec.id).await.expect("pause again");
    again.stop(&spec.id, &spec.dir).await.expect("stop paused");
    assert_eq!(rt.state(&spec.id).await.expect("state"), None);
    assert!(matches!(
        rt.pause(&spec.id).await,
        Err(RuntimeError::NotFound { .. })
    ));
}

#[tokio::test]
async fn restart_keeps_files_and_survives_oom() {
    let h = Harness::new("restart");
    let rt = &h.runtime;
    let spec = &h.spec;

    rt.start(spec).await.expect("start");
    let sock = &RuncRuntime::agent_socket(&spec.dir);
    assert_eq!(sh(sock, "echo kept > /root/file && echo ok"), "ok");
    // A child that exceeds the 64 MiB limit is OOM-killed; the agent lives on.
    let rc = sh(
        sock,
        "dd if=/dev/zero of=/dev/null bs=128M count=1 2>/dev/null; echo $?",
    );
    assert_eq!(rc, "137", "dd is OOM-killed");
    assert_eq!(sh(sock, "echo alive"), "alive");

    let t = Instant::now();
    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    let stop_ms = t.elapsed().as_secs_f64() * 1000.0;

    let t = Instant::now();
    rt.start(spec).await.expect("start again");
    let restart_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(
        sh(&RuncRuntime::agent_socket(&spec.dir), "cat /root/file"),
        "kept"
    );
    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    eprintln!("timing: stop (running) {stop_ms:.1} ms, restart→socket {restart_ms:.1} ms");
}

#[tokio::test]
async fn failed_starts_leave_nothing() {
    // The release rootfs is missing.
    let h = Harness::new("norootfs");
    let mut spec = h.spec.clone();
    spec.rootfs = h.dir.path().join("no-such-rootfs");
    let err = h.runtime.start(&spec).await.expect_err("must fail");
    assert!(matches!(err, RuntimeError::Io { .. }), "{err:?}");
    assert!(!spec.dir.exists(), "sandbox dir removed: {err}");
    assert_eq!(h.runtime.state(&spec.id).await.expect("state"), None);

    // The agent exits at once: runc created and started the container, so undo has more to do.
    let h = Harness::new("agentdies");
    let mut spec = h.spec.clone();
    spec.guest_agent_args = vec!["--exit-now".to_string()];
    let err = h.runtime.start(&spec).await.expect_err("must fail");
    match &err {
        RuntimeError::Command { detail, .. } => {
            assert!(detail.contains("told to exit"), "{detail}")
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(h.runtime.state(&spec.id).await.expect("state"), None);
    assert!(h.runtime.list().await.expect("list").is_empty());
    assert!(!mounted(&spec.dir.join("rootfs")));
    assert!(!spec.dir.exists(), "sandbox dir removed");

    // A second start with an id runc already has must not disturb the running one.
    let h = Harness::new("dup");
    h.runtime.start(&h.spec).await.expect("start");
    let err = h.runtime.start(&h.spec).await.expect_err("duplicate");
    assert!(
        matches!(err, RuntimeError::Command { op: "create", .. }),
        "{err:?}"
    );
    assert_eq!(
        sh(&RuncRuntime::agent_socket(&h.spec.dir), "echo still"),
        "still"
    );
    h.runtime.stop(&h.spec.id, &h.spec.dir).await.expect("stop");
}

#[tokio::test]
async fn stop_and_queries_of_unknown_sandboxes() {
    let h = Harness::new("unknown");
    let rt = &h.runtime;
    rt.stop(&h.spec.id, &h.spec.dir)
        .await
        .expect("stop of nothing");
    assert_eq!(rt.state(&h.spec.id).await.expect("state"), None);
    assert!(matches!(
        rt.pause(&h.spec.id).await,
        Err(RuntimeError::NotFound { .. })
    ));
    assert!(matches!(
        rt.cgroup_paths(&h.spec.id).await,
        Err(RuntimeError::NotFound { .. })
    ));
    assert!(rt.list().await.expect("list").is_empty());
}

#[test]
fn missing_runc_is_unavailable() {
    let err = RuncRuntime::new(RuncConfig {
        runc_binary: PathBuf::from("/nonexistent/runc"),
        state_root: std::env::temp_dir().join("cove-unused-runc-root"),
        lxcfs_dir: None,
        user_namespaces: None,
    })
    .expect_err("no runc");
    assert!(matches!(err, RuntimeError::Unavailable(_)), "{err:?}");
}

/// Loop devices backed by `image` (`losetup -a` lines naming it).
/// Whether no loop device is attached to `image` within 5 s: the kernel frees an autoclear
/// loop device once its last user is gone, which can trail the unmount on a busy host.
async fn detached(image: &Path) -> bool {
    let began = Instant::now();
    while !loop_devices_of(image).is_empty() {
        if began.elapsed() > Duration::from_secs(5) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

fn loop_devices_of(image: &Path) -> Vec<String> {
    let out = Command::new("losetup").arg("-a").output().expect("losetup");
    let image = image.to_string_lossy().into_owned();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&image))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn own_disk_holds_the_files_and_survives_stop_and_start() {
    let mut h = Harness::new("disk");
    h.spec.resources.disk_mib = Some(64);
    let rt = &h.runtime;
    let spec = &h.spec;
    let image = spec.dir.join("disk.img");

    let began = Instant::now();
    rt.start(spec).await.expect("start");
    let start_ms = began.elapsed().as_millis();
    assert_eq!(std::fs::metadata(&image).expect("image").len(), 64 * MIB);
    assert!(mounted(&spec.dir.join("disk")));
    assert_eq!(loop_devices_of(&image).len(), 1);
    assert_eq!(
        std::fs::read_link(spec.dir.join("upper")).expect("upper is a link"),
        Path::new("disk/upper")
    );
    let sock = &RuncRuntime::agent_socket(&spec.dir);
    let kib: u64 = sh(sock, "df -k / | tail -1 | awk '{print $2}'")
        .parse()
        .expect("df");
    assert!(
        (50_000..=65_536).contains(&kib),
        "root is the 64 MiB disk: {kib} KiB"
    );
    assert_eq!(sh(sock, "echo kept > /root/f && cat /root/f"), "kept");
    assert!(
        spec.dir.join("upper/root/f").exists(),
        "files are on the disk"
    );
    // Filling it fails inside the sandbox only.
    let out = sh(sock, "dd if=/dev/zero of=/root/fill bs=1M 2>&1; echo rc=$?");
    assert!(out.contains("No space left on device"), "{out}");

    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    assert!(!mounted(&spec.dir.join("rootfs")));
    assert!(!mounted(&spec.dir.join("disk")));
    assert!(detached(&image).await, "stop detached the loop device");
    assert!(
        image.exists(),
        "the image (the sandbox's files) survives stop"
    );

    // Starting again mounts the same image, with the files (and without a new mkfs).
    rt.start(spec).await.expect("restart on a full disk");
    assert_eq!(
        sh(&RuncRuntime::agent_socket(&spec.dir), "cat /root/f"),
        "kept"
    );
    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    assert!(detached(&image).await, "stop detached the loop device");
    println!("start with a 64 MiB disk: {start_ms} ms");
}

/// A `runc` wrapper in `dir` that appends each invocation's arguments (one line) to
/// `dir/runc.calls` and runs the real runc; returns the wrapper's path.
fn counting_runc(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v runc"])
            .output()
            .expect("find runc")
            .stdout,
    )
    .expect("utf-8 path");
    let log = dir.join("runc.calls");
    let script = dir.join("runc-counting");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.trim()
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

/// The runc verbs the wrapper saw since the last call (the word after `--root <dir>`), and
/// forgets them.
fn take_runc_verbs(dir: &Path) -> Vec<String> {
    let log = dir.join("runc.calls");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    text.lines()
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.iter().position(|w| *w == "--root") {
                Some(i) => words.get(i + 2).copied().unwrap_or("").to_string(),
                None => words.first().copied().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// A start is one runc process (`runc run --detach`) and a stop one more (`runc delete`), the
/// init being killed directly through a pidfd; a paused sandbox is stopped the same way, and
/// state and pause start no runc at all. Counted with a wrapper runc that logs each call.
#[tokio::test]
async fn one_runc_process_per_start_and_per_stop() {
    let h = Harness::new("count");
    let wrapper = counting_runc(h.dir.path());
    let rt = RuncRuntime::new(RuncConfig {
        runc_binary: wrapper,
        state_root: h.dir.path().join("runc"),
        lxcfs_dir: None,
        user_namespaces: None,
    })
    .expect("runc available");
    assert_eq!(take_runc_verbs(h.dir.path()), ["--version"]);
    let spec = &h.spec;

    let started = rt.start(spec).await.expect("start");
    assert_eq!(take_runc_verbs(h.dir.path()), ["run"], "one runc per start");
    let init = proc_start_time(started.init_pid).expect("the init runs");
    let sock = RuncRuntime::agent_socket(&spec.dir);
    assert_eq!(sh(&sock, "echo up"), "up");
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Running)
    );
    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    assert_eq!(
        take_runc_verbs(h.dir.path()),
        ["delete"],
        "one runc per stop"
    );
    assert_ne!(
        proc_start_time(started.init_pid),
        Some(init),
        "the init is gone"
    );
    assert!(rt.list().await.expect("list").is_empty());

    // Paused: thawed through the freezer and killed directly, still one runc process.
    let started = rt.start(spec).await.expect("restart");
    let init = proc_start_time(started.init_pid).expect("the init runs");
    rt.pause(&spec.id).await.expect("pause");
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Paused)
    );
    assert_eq!(take_runc_verbs(h.dir.path()), ["run"]);
    rt.stop(&spec.id, &spec.dir).await.expect("stop paused");
    assert_eq!(take_runc_verbs(h.dir.path()), ["delete"]);
    assert_eq!(rt.state(&spec.id).await.expect("state"), None);
    assert_ne!(
        proc_start_time(started.init_pid),
        Some(init),
        "the paused init is gone"
    );
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22) while it runs and is no zombie.
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first().is_some_and(|s| *s == "Z" || *s == "X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}
