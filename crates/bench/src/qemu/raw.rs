//! The raw baseline of the qemu run: `qemu-system-x86_64` started by the bench itself with a
//! microvm command line of its own (the tuned one of `../shared/reference/runtimes-here.md`),
//! on the same kernel, initramfs, agent disk and release image the Cove server prepared, with
//! no node agent, control plane or store in between. "Up" is the guest agent answering a mux
//! session on the virtio-serial port (the first thing a VM can do for anyone); pause is QMP
//! `stop`/`cont`; a save is `stop` + `migrate` to a file, then QEMU quits; a restore is the same
//! command line with `-incoming` + `cont`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cove_runtime::qemu::connector::MuxConnector;
use cove_runtime::qemu::qmp::Qmp;
use serde_json::{json, Value};

/// Longest a boot or restore may take until the agent answers (TCG on a busy host).
const UP_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest a memory save may take.
const SAVE_TIMEOUT: Duration = Duration::from_secs(120);

/// What every raw VM boots from.
#[derive(Debug, Clone)]
pub struct RawQemu {
    /// Scratch directory of the baseline's VMs.
    pub dir: PathBuf,
    /// PVH kernel.
    pub kernel: PathBuf,
    /// Initramfs.
    pub initramfs: PathBuf,
    /// Read-only disk with the guest agent.
    pub agent_disk: PathBuf,
    /// The release's ext4 image (the overlays' backing file).
    pub base_image: PathBuf,
    /// vCPUs and MiB of every VM (the Cove sandboxes' own).
    pub vcpus: u32,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// `-accel` value.
    pub accel: &'static str,
}

/// One raw VM.
pub struct RawVm {
    child: tokio::process::Child,
    dir: PathBuf,
    agent: MuxConnector,
}

impl RawQemu {
    /// The overlay of VM `name` on the release image.
    fn new_overlay(&self, name: &str) -> anyhow::Result<PathBuf> {
        let disk = self.dir.join(name).join("disk.qcow2");
        let _ = std::fs::remove_dir_all(self.dir.join(name));
        std::fs::create_dir_all(self.dir.join(name)).context("create a VM dir")?;
        let status = std::process::Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(&self.base_image)
            .arg(&disk)
            .status()
            .context("run qemu-img")?;
        if !status.success() {
            bail!("qemu-img create failed: {status}");
        }
        Ok(disk)
    }

    fn args(&self, dir: &Path, disk: &Path, incoming: Option<&Path>) -> Vec<String> {
        let mut cmdline = String::from(
            "console=ttyS0 reboot=t panic=-1 quiet cryptomgr.notests 8250.nr_uarts=1 \
             i8042.noaux i8042.nokbd i8042.nopnp no_timer_check random.trust_cpu=on \
             cove.hostname=raw",
        );
        if self.accel.starts_with("tcg") {
            cmdline.push_str(" mitigations=off");
            if let Some(khz) = cove_runtime::qemu::vm::host_tsc_khz() {
                cmdline.push_str(&format!(" tsc_early_khz={khz}"));
            }
        }
        let d = |name: &str| dir.join(name).display().to_string();
        let mut a: Vec<String> = [
            "-M",
            "microvm",
            "-accel",
            self.accel,
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ]
        .map(String::from)
        .to_vec();
        a.extend([
            "-smp".into(),
            self.vcpus.to_string(),
            "-m".into(),
            self.memory_mib.to_string(),
            "-chardev".into(),
            format!("file,id=console,path={}", d("console.log")),
            "-serial".into(),
            "chardev:console".into(),
            "-kernel".into(),
            self.kernel.display().to_string(),
            "-initrd".into(),
            self.initramfs.display().to_string(),
            "-append".into(),
            cmdline,
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", d("qmp.sock")),
            "-device".into(),
            "virtio-serial-device".into(),
            "-chardev".into(),
            format!(
                "socket,id=agent,path={},server=on,wait=off",
                d("agent.sock")
            ),
            "-device".into(),
            "virtserialport,chardev=agent,name=cove-agent".into(),
            "-drive".into(),
            format!("id=root,file={},format=qcow2,if=none", disk.display()),
            "-device".into(),
            "virtio-blk-device,drive=root,serial=cove-root".into(),
            "-drive".into(),
            format!(
                "id=agent,file={},format=raw,if=none,readonly=on",
                self.agent_disk.display()
            ),
            "-device".into(),
            "virtio-blk-device,drive=agent,serial=cove-agent".into(),
        ]);
        if let Some(state) = incoming {
            a.extend([
                "-incoming".into(),
                format!("exec:cat '{}'", state.display()),
            ]);
        }
        a
    }

    fn spawn(&self, dir: &Path, disk: &Path, incoming: Option<&Path>) -> anyhow::Result<RawVm> {
        let child = tokio::process::Command::new("qemu-system-x86_64")
            .args(self.args(dir, disk, incoming))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start qemu-system-x86_64")?;
        Ok(RawVm {
            child,
            dir: dir.to_path_buf(),
            agent: MuxConnector::new(dir.join("agent.sock")),
        })
    }

    /// Cold-boots VM `name` until its agent answers.
    pub async fn boot(&self, name: &str) -> anyhow::Result<RawVm> {
        let disk = self.new_overlay(name)?;
        let mut vm = self.spawn(&self.dir.join(name), &disk, None)?;
        vm.wait_up().await?;
        Ok(vm)
    }

    /// Restores VM `name` from `memory` with a copy of `disk` until its agent answers.
    pub async fn restore(&self, name: &str, memory: &Path, disk: &Path) -> anyhow::Result<RawVm> {
        let dir = self.dir.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).context("create a VM dir")?;
        let copy = dir.join("disk.qcow2");
        if copy != disk {
            std::fs::copy(disk, &copy).context("copy the saved disk")?;
        }
        let mut vm = self.spawn(&dir, &copy, Some(memory))?;
        vm.cont_incoming().await?;
        vm.wait_up().await?;
        Ok(vm)
    }
}

impl RawVm {
    async fn qmp(&self) -> anyhow::Result<Qmp> {
        let sock = self.dir.join("qmp.sock");
        let began = Instant::now();
        while !sock.exists() {
            if began.elapsed() > UP_TIMEOUT {
                bail!("QMP socket {} did not appear", sock.display());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Qmp::connect(&sock).await.context("connect to QMP")
    }

    async fn wait_up(&mut self) -> anyhow::Result<()> {
        tokio::select! {
            r = self.agent.session(UP_TIMEOUT) => {
                r.context("the raw VM's agent did not answer")?;
                Ok(())
            }
            status = self.child.wait() => bail!("raw qemu ended before its agent answered: {status:?}"),
        }
    }

    async fn cont_incoming(&self) -> anyhow::Result<()> {
        let mut q = self.qmp().await?;
        let began = Instant::now();
        loop {
            match q.status().await.context("query-status")?.as_str() {
                "inmigrate" => {}
                "running" => return Ok(()),
                _ => break,
            }
            if began.elapsed() > UP_TIMEOUT {
                bail!("the raw restore did not finish loading");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        q.execute("cont", Value::Null).await.context("cont")?;
        Ok(())
    }

    /// QMP `stop` then `cont`, each answered.
    pub async fn pause_resume(&self) -> anyhow::Result<()> {
        let mut q = self.qmp().await?;
        q.execute("stop", Value::Null).await.context("stop")?;
        q.execute("cont", Value::Null).await.context("cont")?;
        Ok(())
    }

    /// `stop` + `migrate` to `file` until completed, then ends QEMU (the disk stays in its
    /// directory).
    pub async fn save(mut self, file: &Path) -> anyhow::Result<PathBuf> {
        let mut q = self.qmp().await?;
        q.execute(
            "migrate-set-parameters",
            json!({ "max-bandwidth": 100u64 << 30 }),
        )
        .await
        .context("raise the migration bandwidth")?;
        q.execute("stop", Value::Null).await.context("stop")?;
        let uri = format!("exec:cat > '{}'", file.display());
        q.execute("migrate", json!({ "uri": uri }))
            .await
            .context("migrate")?;
        let began = Instant::now();
        loop {
            let v = q
                .execute("query-migrate", Value::Null)
                .await
                .context("query-migrate")?;
            match v.get("status").and_then(Value::as_str).unwrap_or("") {
                "completed" => break,
                "failed" | "cancelled" => bail!("raw save failed: {v}"),
                _ => {}
            }
            if began.elapsed() > SAVE_TIMEOUT {
                bail!("raw save timed out");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = q.execute("quit", Value::Null).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        Ok(self.dir.join("disk.qcow2"))
    }

    /// Ends QEMU and removes the VM's directory.
    pub async fn kill(mut self) {
        self.agent.shutdown().await;
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
