//! The baseline: raw runc (or gVisor's `runsc`, [`RawRunc::runsc`]) containers of the same
//! `tiny` rootfs, driven with the CLI under their own `--root` in a temporary directory. Calls are blocking (std processes), so a
//! measurement times runc itself and nothing of an async runtime.
//!
//! Dropping a [`RawRunc`] deletes every container under its root, unmounts every overlay under
//! its directory and removes the directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context};
use cove_node_agent::template::{build_rootfs, BuildOptions, Recipe};
use tokio_util::sync::CancellationToken;

mod bundle;

pub use bundle::Bundle;

/// Raw runc with its own state root and a `tiny` rootfs built by Cove's template builder.
#[derive(Debug)]
pub struct RawRunc {
    runc: PathBuf,
    /// Flags before every verb (`runsc`: `--platform=… --network=none`).
    global: Vec<String>,
    /// Temporary directory holding everything below.
    dir: PathBuf,
    /// `runc --root`.
    root: PathBuf,
    /// The `tiny` rootfs, lower dir of every bundle's overlay.
    rootfs: PathBuf,
    next: AtomicU64,
}

impl RawRunc {
    /// Makes the temporary directory and builds the `tiny` rootfs into it (copied from
    /// `cache_dir` when the cache has it).
    pub async fn new(runc: &Path, cache_dir: &Path) -> anyhow::Result<RawRunc> {
        Self::with_flags(runc, Vec::new(), cache_dir).await
    }

    /// Raw gVisor: `runsc --platform=<platform> --network=none` with the same verbs (gVisor's
    /// loopback only, as a Cove sandbox without a network has).
    pub async fn runsc(runsc: &Path, platform: &str, cache_dir: &Path) -> anyhow::Result<RawRunc> {
        let flags = vec![format!("--platform={platform}"), "--network=none".into()];
        Self::with_flags(runsc, flags, cache_dir).await
    }

    async fn with_flags(
        runc: &Path,
        global: Vec<String>,
        cache_dir: &Path,
    ) -> anyhow::Result<RawRunc> {
        let dir = tempfile::Builder::new()
            .prefix("cove-bench-raw-")
            .tempdir()
            .context("create the raw runc directory")?
            .keep();
        let raw = RawRunc {
            runc: runc.to_path_buf(),
            global,
            root: dir.join("state"),
            rootfs: dir.join("rootfs"),
            dir,
            next: AtomicU64::new(0),
        };
        let opts = BuildOptions {
            cache_dir: Some(cache_dir.to_path_buf()),
            mirror: None,
        };
        // Nobody listens to the build's progress: a closed channel makes the builder skip it.
        let (events, _) = tokio::sync::mpsc::channel(1);
        build_rootfs(
            Recipe::Tiny,
            &raw.rootfs,
            &opts,
            events,
            CancellationToken::new(),
        )
        .await
        .context("build the tiny rootfs for the baseline")?;
        Ok(raw)
    }

    /// A fresh name for a container or bundle (`raw-<pid>-<n>`: names are also cgroup names,
    /// which other bench processes on the host share).
    pub fn new_name(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("raw-{}-{n}", std::process::id())
    }

    /// The `tiny` rootfs's static busybox: the program a sandbox's `head`, `cat`, ... run, for
    /// host baselines that must use the same writer.
    pub fn busybox(&self) -> PathBuf {
        self.rootfs.join("bin/busybox")
    }

    /// A new bundle whose container runs `args`, overlay mounted.
    pub fn bundle(&self, args: &[&str]) -> anyhow::Result<Bundle> {
        let name = self.new_name();
        let dir = self.dir.join("bundles").join(&name);
        Bundle::create(dir, &self.rootfs, &name, args)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.runc);
        cmd.arg("--root")
            .arg(&self.root)
            .args(&self.global)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `runc <args>` to completion; fails with runc's stderr when it fails.
    fn run_to_end(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = self
            .command()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("run {} {}", self.runc.display(), args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "runc {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// `runc run --bundle <bundle> <id>` in the foreground: creates, starts, waits for the
    /// container's process and deletes the container.
    pub fn run(&self, bundle: &Bundle, id: &str) -> anyhow::Result<()> {
        let dir = bundle.dir.to_string_lossy();
        self.run_to_end(&["run", "--bundle", &dir, id])
    }

    /// `runc run --detach`: returns once the container's process runs. Its stdio (and runc's
    /// stderr) go to the bundle's `runc.stderr`, since the container keeps them open.
    pub fn run_detached(&self, bundle: &Bundle, id: &str) -> anyhow::Result<()> {
        self.detached(bundle, id, &["run", "--detach"])
    }

    /// `<verb...> --bundle <bundle> <id>` of a verb that leaves the container running with
    /// runc's stdio (`run --detach`, `restore --detach`), which go to the bundle's
    /// `runc.stderr`: the container keeps them open, so a pipe would never close.
    fn detached(&self, bundle: &Bundle, id: &str, verb: &[&str]) -> anyhow::Result<()> {
        let log_path = bundle.stderr_path();
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("create {}", log_path.display()))?;
        let status = self
            .command()
            .args(verb)
            .arg("--bundle")
            .arg(&bundle.dir)
            .arg(id)
            .stdout(Stdio::null())
            .stderr(log)
            .status()
            .with_context(|| format!("run {} {}", self.runc.display(), verb.join(" ")))?;
        if !status.success() {
            let err = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("{} {id} failed: {}", verb.join(" "), err.trim());
        }
        Ok(())
    }

    /// `runc exec <id> <args>`, waiting for the process.
    pub fn exec(&self, id: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut all = vec!["exec", id];
        all.extend_from_slice(args);
        self.run_to_end(&all)
    }

    /// `runc pause <id>`.
    pub fn pause(&self, id: &str) -> anyhow::Result<()> {
        self.run_to_end(&["pause", id])
    }

    /// `runc resume <id>`.
    pub fn resume(&self, id: &str) -> anyhow::Result<()> {
        self.run_to_end(&["resume", id])
    }

    /// `runsc checkpoint --image-path <image> <id>`: saves the container's memory and
    /// processes into `image` (a directory) and stops it.
    pub fn checkpoint(&self, id: &str, image: &Path) -> anyhow::Result<()> {
        let image = format!("--image-path={}", image.display());
        self.run_to_end(&["checkpoint", &image, id])
    }

    /// `runsc restore --detach --image-path <image> --bundle <bundle> <id>`: a new container
    /// `id` from a checkpoint, returning once it runs.
    pub fn restore(&self, bundle: &Bundle, id: &str, image: &Path) -> anyhow::Result<()> {
        let image = format!("--image-path={}", image.display());
        self.detached(bundle, id, &["restore", "--detach", &image])
    }

    /// `runc kill <id> KILL`.
    pub fn kill(&self, id: &str) -> anyhow::Result<()> {
        self.run_to_end(&["kill", id, "KILL"])
    }

    /// `runc delete --force <id>`.
    pub fn delete(&self, id: &str) -> anyhow::Result<()> {
        self.run_to_end(&["delete", "--force", id])
    }

    /// Host pids of the inits of all running raw containers.
    pub fn init_pids(&self) -> anyhow::Result<Vec<u32>> {
        container_init_pids(&self.runc, &self.root)
    }
}

impl Drop for RawRunc {
    fn drop(&mut self) {
        delete_all_containers(&self.runc, &self.root);
        for mount_point in mounts_under(&self.dir) {
            let _ = nix::mount::umount2(&mount_point, nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        remove_cgroup_parent();
    }
}

/// Removes the (by now empty) `cove-bench` parent cgroup that runc made beside this process's
/// own cgroup in each hierarchy. `rmdir` of a cgroup only succeeds when it has no processes and
/// no children, so one still in use (another bench run) stays.
fn remove_cgroup_parent() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounts: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let fstype = post.split(' ').next()?;
            (fstype == "cgroup" || fstype == "cgroup2")
                .then(|| pre.split(' ').nth(4).map(PathBuf::from))
                .flatten()
        })
        .collect();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut paths: Vec<&str> = own
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    for mount in &mounts {
        for path in &paths {
            let dir = mount
                .join(path.trim_start_matches('/'))
                .join(bundle::CGROUP_PARENT);
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Force-deletes every container under runc state root `root`. Blocking, best effort.
pub fn delete_all_containers(runc: &Path, root: &Path) {
    let ids = Command::new(runc)
        .arg("--root")
        .arg(root)
        .args(["list", "--quiet"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(ids) = ids else { return };
    for id in String::from_utf8_lossy(&ids.stdout).lines() {
        let _ = Command::new(runc)
            .arg("--root")
            .arg(root)
            .args(["delete", "--force", id.trim()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Host pids of the init of every running container under runc state root `root`
/// (`runc list --format json`).
pub fn container_init_pids(runc: &Path, root: &Path) -> anyhow::Result<Vec<u32>> {
    let out = Command::new(runc)
        .arg("--root")
        .arg(root)
        .args(["list", "--format", "json"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("run runc list")?;
    if !out.status.success() {
        bail!(
            "runc list failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // An empty root lists as `null`.
    let list: Option<Vec<serde_json::Value>> =
        serde_json::from_slice(&out.stdout).context("decode runc list")?;
    Ok(list
        .unwrap_or_default()
        .iter()
        .filter(|c| c["status"] == "running")
        .filter_map(|c| c["pid"].as_u64().and_then(|p| u32::try_from(p).ok()))
        .filter(|p| *p > 0)
        .collect())
}

/// Mount points at or below `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points
}
