//! The QEMU driver against real QEMU (TCG here): one VM on a busybox rootfs with the real guest
//! agent, spoken to over the mux connector. One test, one VM at a time, to keep TCG time small.
//!
//! Needs root, `qemu-system-x86_64`, `qemu-img`, `mkfs.ext4`, `apt-get` (first use downloads the
//! Debian cloud kernel into the cache), `/bin/busybox`, and `COVE_GUEST_AGENT` pointing at a
//! static `cove-guest-agent` (`scripts/build-guest-agent.sh`). Skips (passes with a message)
//! when QEMU or the agent are missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cove_guest_protocol::{
    read_frame, write_frame, GuestFrame, HostFrame, Program, Request, Response, SpawnRequest,
    PROTOCOL_VERSION,
};
use cove_runtime::qemu::{QemuConfig, QemuRuntime};
use cove_runtime::{GuestConnector, Runtime, RuntimeState, SandboxSpec};

fn busybox_rootfs(dir: &Path) -> PathBuf {
    let rootfs = dir.join("release/rootfs");
    for d in ["bin", "etc", "tmp", "root", "proc", "sys", "dev"] {
        std::fs::create_dir_all(rootfs.join(d)).expect("mkdir");
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).expect("copy busybox");
    let list = Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .expect("busybox --list");
    for name in String::from_utf8_lossy(&list.stdout).lines() {
        if name != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(name));
        }
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n").expect("group");
    rootfs
}

/// Runs `script` with `sh -c` in the guest and returns its combined output.
async fn sh(c: &dyn GuestConnector, id: &str, script: &str) -> String {
    let mut s = c.connect().await.expect("connect");
    hello(&mut s).await;
    let spawn = SpawnRequest {
        command_id: id.to_string(),
        program: Program::Argv(vec!["/bin/sh".into(), "-c".into(), script.into()]),
        env: BTreeMap::from([("PATH".to_string(), "/bin".to_string())]),
        cwd: None,
        user: None,
        stdin: false,
        timeout_ms: Some(30_000),
        pty: None,
    };
    let r = call(&mut s, 1, Request::Spawn(spawn)).await;
    assert!(matches!(r, Response::SpawnedCommand(_)), "spawn: {r:?}");
    let mut a = c.connect().await.expect("connect");
    hello(&mut a).await;
    let attach = Request::Attach {
        command_id: id.to_string(),
        offset: 0,
        follow: true,
    };
    write_frame(
        &mut a,
        &HostFrame {
            id: 1,
            request: attach,
        },
    )
    .await
    .expect("attach");
    let mut out = Vec::new();
    loop {
        let f: GuestFrame = read_frame(&mut a).await.expect("frame");
        match f.response {
            Response::Output { data, .. } => out.extend(data),
            Response::Exited(_) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn hello(s: &mut cove_runtime::GuestStream) {
    let r = call(
        s,
        0,
        Request::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .await;
    assert!(matches!(r, Response::Hello { .. }), "hello: {r:?}");
}

async fn call(s: &mut cove_runtime::GuestStream, id: u64, request: Request) -> Response {
    write_frame(s, &HostFrame { id, request })
        .await
        .expect("write");
    let f: GuestFrame = tokio::time::timeout(Duration::from_secs(30), read_frame(s))
        .await
        .expect("answer in time")
        .expect("read");
    f.response
}

/// Kills the test's VMs when the test ends, also when it fails.
struct KillVms(PathBuf);

impl Drop for KillVms {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if let Ok(pid) = std::fs::read_to_string(e.path().join("qemu.pid")) {
                let _ = Command::new("kill").args(["-9", pid.trim()]).output();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boots_runs_pauses_suspends_and_restores() {
    let Some(agent) = std::env::var_os("COVE_GUEST_AGENT").map(PathBuf::from) else {
        eprintln!("skipped: COVE_GUEST_AGENT is not set");
        return;
    };
    if !cove_runtime::qemu::qemu_available(Path::new("qemu-system-x86_64")) {
        eprintln!("skipped: no qemu-system-x86_64");
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("cove_runtime=info"))
        .with_writer(std::io::stderr)
        .try_init();
    let tmp = tempfile::tempdir().expect("tempdir");
    let _vms = KillVms(tmp.path().join("qemu"));
    let cache = std::env::var_os("COVE_VM_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-cache"));
    let rt = QemuRuntime::new(QemuConfig::new(tmp.path().join("qemu"), cache)).expect("runtime");
    let spec = SandboxSpec {
        id: "qemu-test-1".into(),
        rootfs: busybox_rootfs(tmp.path()),
        dir: tmp.path().join("sandboxes/qemu-test-1"),
        guest_agent: agent,
        guest_agent_args: vec![],
        hostname: "vm1".into(),
        resources: cove_domain::Resources {
            vcpus: 1,
            memory_mib: 256,
            pids_max: 256,
            disk_mib: Some(1024),
        },
        network: None,
        volumes: Vec::new(),
    };
    let t = Instant::now();
    let started = rt.start(&spec).await.expect("start");
    eprintln!("boot to agent: {:?}", t.elapsed());
    assert!(!started.memory_restored);
    let c = started.guest.clone();
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Running)
    );

    let t = Instant::now();
    let out = sh(&*c, "c1", "uname -r; hostname; df -m / | tail -1").await;
    eprintln!("first exec: {:?}\n{out}", t.elapsed());
    assert!(out.contains("cloud-amd64"), "its own kernel: {out}");
    assert!(out.contains("vm1"), "hostname: {out}");
    let size_mib: u64 = out
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(size_mib > 900, "root grown to the disk size: {out}");
    for i in 0..3 {
        let t = Instant::now();
        sh(&*c, &format!("true{i}"), "true").await;
        eprintln!("exec true: {:?}", t.elapsed());
    }

    // A counter that must keep counting across pause and suspend.
    let mut s = c.connect().await.expect("connect");
    hello(&mut s).await;
    let counter = SpawnRequest {
        command_id: "counter".into(),
        program: Program::Argv(vec![
            "/bin/sh".into(),
            "-c".into(),
            "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done".into(),
        ]),
        env: BTreeMap::from([("PATH".to_string(), "/bin".to_string())]),
        cwd: None,
        user: None,
        stdin: false,
        timeout_ms: None,
        pty: None,
    };
    assert!(matches!(
        call(&mut s, 1, Request::Spawn(counter)).await,
        Response::SpawnedCommand(_)
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    sh(&*c, "w", "echo kept > /root/file; sync").await;

    let t = Instant::now();
    rt.pause(&spec.id).await.expect("pause");
    eprintln!("pause: {:?}", t.elapsed());
    assert_eq!(
        rt.state(&spec.id).await.expect("state"),
        Some(RuntimeState::Paused)
    );
    let t = Instant::now();
    rt.resume(&spec.id).await.expect("resume");
    eprintln!("resume: {:?}", t.elapsed());
    let before: u64 = sh(&*c, "r1", "cat /tmp/count")
        .await
        .trim()
        .parse()
        .expect("count");
    assert!(before > 0);

    let t = Instant::now();
    rt.pause(&spec.id).await.expect("pause");
    assert!(rt
        .checkpoint(&spec.id, &spec.dir)
        .await
        .expect("checkpoint"));
    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    eprintln!(
        "suspend (stop + save + kill): {:?}, memory file {} MiB",
        t.elapsed(),
        std::fs::metadata(spec.dir.join("upper/vm-memory.bin")).map_or(0, |m| m.len() >> 20)
    );
    assert_eq!(rt.state(&spec.id).await.expect("state"), None);
    // Let wall time pass while suspended; the restored guest must not show the stale time.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let t = Instant::now();
    let woke = rt.start(&spec).await.expect("wake");
    eprintln!("wake to agent: {:?}", t.elapsed());
    assert!(woke.memory_restored);
    assert!(
        !spec.dir.join("upper/vm-memory.bin").exists(),
        "state consumed"
    );
    let c = woke.guest.clone();
    let host_before = unix_now();
    let out = sh(&*c, "r2", "cat /tmp/count; cat /root/file; date +%s").await;
    let mut lines = out.lines();
    let after: u64 = lines.next().unwrap_or("").trim().parse().expect("count");
    assert_eq!(lines.next(), Some("kept"));
    let guest_now: i64 = lines.next().unwrap_or("").trim().parse().expect("date");
    let host_after = unix_now();
    // Bracketed by host times taken around the command: under load its round trip alone
    // takes seconds, while a clock not set on wake is behind by the time spent suspended.
    assert!(
        guest_now >= host_before - 2 && guest_now <= host_after + 1,
        "guest clock {guest_now} outside host [{host_before}, {host_after}]"
    );
    assert!(after >= before, "the counter survived: {before} → {after}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later: u64 = sh(&*c, "r3", "cat /tmp/count")
        .await
        .trim()
        .parse()
        .expect("count");
    assert!(later > after, "and keeps counting: {after} → {later}");

    rt.stop(&spec.id, &spec.dir).await.expect("stop");
    assert_eq!(rt.state(&spec.id).await.expect("state"), None);
    assert!(rt.list().await.expect("list").is_empty());
}

/// The host's wall clock in whole seconds since the epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
