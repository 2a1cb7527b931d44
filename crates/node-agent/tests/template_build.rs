//! Template builders, for real: busybox trees, mmdebstrap builds, the cache, failures and
//! cancellation. Needs root, `/bin/busybox` (busybox-static), mmdebstrap and a reachable Debian
//! mirror. The base recipe is cached in `$COVE_TEST_CACHE_DIR` (default
//! `/var/cache/cove/templates`), so a machine builds it once.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use cove_node_agent::template::{
    build_rootfs, BuildError, BuildEvent, BuildOptions, BuiltRootfs, Recipe,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Runs a build, collecting its events.
async fn build(
    recipe: Recipe,
    dest: &Path,
    opts: &BuildOptions,
    cancel: CancellationToken,
) -> (Result<BuiltRootfs, BuildError>, Vec<BuildEvent>) {
    let (tx, mut rx) = mpsc::channel(64);
    let collector = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        events
    });
    let result = build_rootfs(recipe, dest, opts, tx, cancel).await;
    let events = collector.await.expect("collector");
    (result, events)
}

/// Entries of `dir` (to show that no temp dir is left beside a destination).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let prefix = dir.to_string_lossy().into_owned();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// Runs `sh -c script` chrooted into `root`; returns trimmed stdout.
fn in_chroot(root: &Path, script: &str) -> String {
    let out = Command::new("chroot")
        .arg(root)
        .args(["/bin/sh", "-c", script])
        .output()
        .expect("chroot");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn last_progress(events: &[BuildEvent]) -> Option<u8> {
    events.iter().rev().find_map(|e| match e {
        BuildEvent::Progress { percent, .. } => Some(*percent),
        BuildEvent::Log(_) => None,
    })
}

#[tokio::test]
async fn tiny_builds_in_moments() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let parent = tmp.path().join("releases/tiny/1");
    let dest = parent.join("rootfs");
    let began = Instant::now();
    let (result, events) = build(
        Recipe::Tiny,
        &dest,
        &BuildOptions::default(),
        CancellationToken::new(),
    )
    .await;
    let built = result.expect("tiny build");
    eprintln!("timing: tiny build {:?}", began.elapsed());
    assert!(!built.from_cache);
    assert!(built.size_bytes > 1_000_000, "{built:?}");
    assert_eq!(last_progress(&events), Some(100));
    assert_eq!(entries(&parent), ["rootfs"], "no temp dir left");

    assert!(dest.join("bin/busybox").is_file());
    for applet in ["bin/sh", "bin/ls", "usr/bin/env", "bin/mount"] {
        let target = std::fs::read_link(dest.join(applet)).expect(applet);
        assert_eq!(target, PathBuf::from("/bin/busybox"), "{applet}");
    }
    let passwd = std::fs::read_to_string(dest.join("etc/passwd")).expect("passwd");
    assert!(passwd.contains("user:x:1000:1000:user:/home/user:/bin/sh"));
    assert!(passwd.contains("root:x:0:0:"));
    let home = std::fs::metadata(dest.join("home/user")).expect("home");
    assert_eq!((home.uid(), home.gid()), (1000, 1000));
    let tmp_mode = std::fs::metadata(dest.join("tmp"))
        .expect("tmp")
        .permissions();
    assert_eq!(tmp_mode.mode() & 0o7777, 0o1777);
    assert_eq!(
        std::fs::read_to_string(dest.join("etc/hostname")).expect("hostname"),
        "cove\n"
    );
    assert_eq!(in_chroot(&dest, "id -u user; id -g user"), "1000\n1000");
    assert_eq!(in_chroot(&dest, "echo hello | tr a-z A-Z"), "HELLO");
}

#[tokio::test]
async fn second_build_comes_from_the_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let opts = BuildOptions {
        cache_dir: Some(cache.clone()),
        mirror: None,
    };
    let first = tmp.path().join("a/rootfs");
    let (result, _) = build(Recipe::Tiny, &first, &opts, CancellationToken::new()).await;
    assert!(!result.expect("first build").from_cache);
    let entry = cache.join(format!("tiny-{}", Recipe::Tiny.recipe_hash()));
    assert!(entry.join("rootfs/bin/busybox").is_file(), "cache filled");
    assert_eq!(
        entries(&cache),
        [format!("tiny-{}", Recipe::Tiny.recipe_hash())]
    );

    let second = tmp.path().join("b/rootfs");
    let (result, events) = build(Recipe::Tiny, &second, &opts, CancellationToken::new()).await;
    let built = result.expect("second build");
    assert!(built.from_cache);
    assert_eq!(last_progress(&events), Some(100));
    assert_eq!(entries(&tmp.path().join("b")), ["rootfs"]);
    assert!(second.join("bin/busybox").is_file());
    assert_eq!(
        std::fs::read_link(second.join("bin/sh")).expect("sh"),
        PathBuf::from("/bin/busybox")
    );
    // Same filesystem: the copy is a hard-link tree of the cache entry.
    let ino = |p: &Path| std::fs::metadata(p).expect("stat").ino();
    assert_eq!(
        ino(&second.join("bin/busybox")),
        ino(&entry.join("rootfs/bin/busybox"))
    );
}

#[tokio::test]
async fn failed_builds_leave_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");

    // The destination exists: refused, and left as it was.
    let dest = tmp.path().join("exists/rootfs");
    std::fs::create_dir_all(dest.join("keep")).expect("mkdir");
    let (result, _) = build(
        Recipe::Tiny,
        &dest,
        &BuildOptions::default(),
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(result, Err(BuildError::Io { .. })), "{result:?}");
    assert!(dest.join("keep").is_dir());

    // The destination's parent cannot be created (a file is in the way).
    std::fs::write(tmp.path().join("file"), "x").expect("write");
    let dest = tmp.path().join("file/sub/rootfs");
    let (result, _) = build(
        Recipe::Tiny,
        &dest,
        &BuildOptions::default(),
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(result, Err(BuildError::Io { .. })), "{result:?}");

    // Cancelled before it starts.
    let parent = tmp.path().join("cancelled");
    let dest = parent.join("rootfs");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let (result, _) = build(Recipe::Tiny, &dest, &BuildOptions::default(), cancel).await;
    assert!(matches!(result, Err(BuildError::Cancelled)), "{result:?}");
    assert!(!dest.exists());

    // mmdebstrap fails (nothing listens at the mirror): its half-made tree is removed.
    let parent = tmp.path().join("badmirror");
    let dest = parent.join("rootfs");
    let opts = BuildOptions {
        cache_dir: Some(tmp.path().join("cache")),
        mirror: Some("http://127.0.0.1:9/debian".to_string()),
    };
    let (result, events) = build(Recipe::Base, &dest, &opts, CancellationToken::new()).await;
    match &result {
        Err(BuildError::Failed { step, detail }) => {
            assert_eq!(step, "mmdebstrap");
            assert!(detail.contains("127.0.0.1"), "{detail}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(events.iter().any(|e| matches!(e, BuildEvent::Log(_))));
    assert!(!dest.exists());
    assert!(entries(&parent).is_empty(), "{:?}", entries(&parent));
    assert!(mounts_under(tmp.path()).is_empty());
    assert!(entries(&tmp.path().join("cache")).is_empty());
}

#[tokio::test]
async fn cancelling_a_base_build_kills_it_and_cleans_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let parent = tmp.path().join("releases/base/1");
    let dest = parent.join("rootfs");
    let cancel = CancellationToken::new();
    let (tx, mut rx) = mpsc::channel(64);
    let opts = BuildOptions::default();
    let task = {
        let dest = dest.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { build_rootfs(Recipe::Base, &dest, &opts, tx, cancel).await })
    };
    // Cancel once apt is downloading, with mmdebstrap's tree and mounts half made.
    while let Some(event) = rx.recv().await {
        if let BuildEvent::Progress { percent, .. } = event {
            if percent >= 15 {
                cancel.cancel();
            }
        }
    }
    let result = task.await.expect("join");
    assert!(matches!(result, Err(BuildError::Cancelled)), "{result:?}");
    assert!(!dest.exists());
    assert!(entries(&parent).is_empty(), "{:?}", entries(&parent));
    assert!(mounts_under(tmp.path()).is_empty());
    let leftover = Command::new("pgrep")
        .args(["-f", &tmp.path().to_string_lossy()])
        .output()
        .expect("pgrep");
    assert!(
        leftover.stdout.is_empty(),
        "build processes left: {}",
        String::from_utf8_lossy(&leftover.stdout)
    );
}

#[tokio::test]
async fn base_build_has_the_tools_agents_expect() {
    let cache = std::env::var_os("COVE_TEST_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/cove/templates"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let dest = tmp.path().join("rootfs");
    let opts = BuildOptions {
        cache_dir: Some(cache),
        mirror: None,
    };
    let began = Instant::now();
    let (result, events) = build(Recipe::Base, &dest, &opts, CancellationToken::new()).await;
    let built = result.expect("base build");
    eprintln!(
        "timing: base build {:?} (from cache: {}, {} MB)",
        began.elapsed(),
        built.from_cache,
        built.size_bytes / 1_000_000
    );
    assert!(built.size_bytes > 50_000_000, "{built:?}");
    assert_eq!(last_progress(&events), Some(100));
    if !built.from_cache {
        assert!(events.iter().any(
            |e| matches!(e, BuildEvent::Progress { phase, .. } if phase == "downloading packages")
        ));
    }

    let found = in_chroot(
        &dest,
        "for t in python3 python bash sudo git curl getfattr tput; do command -v $t || echo missing-$t; done",
    );
    assert!(!found.contains("missing-"), "{found}");
    assert_eq!(in_chroot(&dest, "python -c 'print(6 * 7)'"), "42");
    assert_eq!(in_chroot(&dest, "id -u user; id -g user"), "1000\n1000");
    assert_eq!(
        in_chroot(&dest, "getent passwd user | cut -d: -f6,7"),
        "/home/user:/bin/bash"
    );
    let home = std::fs::metadata(dest.join("home/user")).expect("home");
    assert_eq!((home.uid(), home.gid()), (1000, 1000));

    let sudoers = dest.join("etc/sudoers.d/90-cove-user");
    let meta = std::fs::metadata(&sudoers).expect("sudoers");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o440);
    assert!(std::fs::read_to_string(&sudoers)
        .expect("read")
        .contains("user ALL=(ALL:ALL) NOPASSWD: ALL"));
    in_chroot(&dest, "visudo -c >/dev/null");
    assert!(in_chroot(&dest, "sudo -l -U user").contains("NOPASSWD: ALL"));

    assert_eq!(
        std::fs::read_to_string(dest.join("etc/hostname")).expect("hostname"),
        "cove\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("etc/resolv.conf")).expect("resolv"),
        ""
    );
    assert!(entries(&dest.join("var/lib/apt/lists"))
        .iter()
        .all(|e| e == "lock" || e == "partial"));
}
