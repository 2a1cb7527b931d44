//! The guest's boot files, made by Cove from Debian packages and kept in a cache directory:
//!
//! | file | what |
//! |---|---|
//! | `<cache>/kernel-<package>-v<n>/vmlinux` | the PVH-bootable ELF kernel, the decompressed payload of the package's bzImage |
//! | `<cache>/kernel-<package>-v<n>/modules/*.ko` | the virtio modules (disk, console, net) the initramfs loads |
//! | `<cache>/kernel-<package>-v<n>/initramfs.cpio` | busybox + modules + `/init` (see [`INIT`]) |
//! | `<cache>/agent-<size>-<mtime>.ext4` | a small read-only disk holding the guest agent binary (the newest only) |
//!
//! The kernel comes from `apt-get download` of the package `linux-image-cloud-amd64` depends on;
//! its bzImage's payload (found through the setup header's `payload_offset`/`payload_length`) is
//! decompressed with `lz4`, `gzip`, `xz` or `zstd` according to its magic. Each file is made in a
//! temporary directory and renamed into place, so a crash leaves either nothing or the whole file.
//! Progress goes to stderr (first use takes a few seconds).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::RuntimeError;

/// The Debian metapackage whose dependency is the kernel package.
const KERNEL_META_PACKAGE: &str = "linux-image-cloud-amd64";
/// The modules the initramfs loads, in dependency order (paths under `kernel/`).
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_mmio",
    "drivers/block/virtio_blk",
    "drivers/char/virtio_console",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
];
/// Version of the boot files' layout: a new one (other modules, another `/init`) is made in a
/// directory of its own.
const BOOT_FILES_VERSION: u32 = 2;
/// Static busybox on the host (Debian `busybox-static`).
const BUSYBOX: &str = "/bin/busybox";

/// The initramfs's `/init`: load virtio modules, find the disks by serial (`cove-root`,
/// `cove-agent`), mount the root read-write and the agent disk read-only under a tmpfs at
/// `/.cove`, move `/dev`, `/proc`, `/sys` over, and `switch_root` to the guest agent as PID 1
/// with `COVE_VPORT` naming the virtio-serial port `cove-agent`. Kernel arguments:
/// `cove.hostname=NAME` and `cove.arg=ARG` (repeatable, the agent's extra arguments).
pub const INIT: &str = r#"#!/bin/busybox sh
B=/bin/busybox
fail() { echo "cove-init: $*"; $B poweroff -f; }
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in virtio_ring virtio virtio_mmio virtio_blk virtio_console failover net_failover virtio_net; do $B insmod /lib/modules/$m.ko; done
root=; agent=; port=; i=0
while :; do
  for d in /sys/block/vd*; do
    [ -e "$d/serial" ] || continue
    case "$($B cat $d/serial)" in cove-root) root=/dev/${d##*/};; cove-agent) agent=/dev/${d##*/};; esac
  done
  for p in /sys/class/virtio-ports/*; do
    [ -e "$p/name" ] && [ "$($B cat $p/name)" = cove-agent ] && port=/dev/${p##*/}
  done
  [ -n "$root" ] && [ -n "$agent" ] && [ -n "$port" ] && [ -e "$root" ] && [ -e "$agent" ] && [ -e "$port" ] && break
  i=$((i+1)); [ $i -gt 2000 ] && fail "disks or port not found"
  $B usleep 5000
done
host=; args=
for a in $($B cat /proc/cmdline); do
  case "$a" in cove.hostname=*) host=${a#cove.hostname=};; cove.arg=*) args="$args ${a#cove.arg=}";; esac
done
$B mount -t ext4 -o rw "$root" /newroot || fail "cannot mount the root disk"
$B mkdir -p /newroot/.cove /newroot/dev /newroot/proc /newroot/sys /newroot/tmp /newroot/run
$B mount -t tmpfs -o mode=0711 cove /newroot/.cove
$B mkdir -p /newroot/.cove/bin /newroot/.cove/run
$B mount -t ext4 -o ro "$agent" /newroot/.cove/bin || fail "cannot mount the agent disk"
$B mount --move /dev /newroot/dev
$B mkdir -p /newroot/dev/pts /newroot/dev/shm
$B mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /newroot/dev/pts
$B mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
$B mount --move /proc /newroot/proc
$B mount --move /sys /newroot/sys
$B mount -t tmpfs -o mode=0755 run /newroot/run
[ -n "$host" ] && $B hostname "$host"
export COVE_VPORT="$port"
exec $B switch_root /newroot /.cove/bin/cove-guest-agent --listen /.cove/run/agent.sock $args
"#;

/// The prepared boot files.
#[derive(Debug, Clone)]
pub struct BootFiles {
    /// PVH ELF kernel.
    pub kernel: PathBuf,
    /// Initramfs (uncompressed newc cpio).
    pub initramfs: PathBuf,
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let context = context.into();
    move |source| RuntimeError::Io { context, source }
}

fn unavailable(msg: impl Into<String>) -> RuntimeError {
    RuntimeError::Unavailable(msg.into())
}

/// Runs `cmd` and returns its stdout; a failure is `Unavailable` with its stderr.
fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, RuntimeError> {
    let out = cmd
        .output()
        .map_err(|e| unavailable(format!("{what}: cannot run {:?}: {e}", cmd.get_program())))?;
    if !out.status.success() {
        return Err(unavailable(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Makes (once) and returns the kernel and initramfs in `cache`. Blocking.
pub fn ensure_boot_files(cache: &Path) -> Result<BootFiles, RuntimeError> {
    std::fs::create_dir_all(cache).map_err(io_err(format!("create {}", cache.display())))?;
    let package = kernel_package()?;
    let dir = cache.join(format!("kernel-{package}-v{BOOT_FILES_VERSION}"));
    let files = BootFiles {
        kernel: dir.join("vmlinux"),
        initramfs: dir.join("initramfs.cpio"),
    };
    if files.kernel.exists() && files.initramfs.exists() {
        return Ok(files);
    }
    eprintln!("cove: preparing the VM guest kernel from Debian's {package} (first use only)…");
    let tmp = tempfile::Builder::new()
        .prefix(".kernel-")
        .tempdir_in(cache)
        .map_err(io_err("create a temporary directory"))?;
    eprintln!("cove:   downloading {package}.deb");
    run(
        Command::new("apt-get")
            .args(["download", "-q", &package])
            .current_dir(tmp.path()),
        "apt-get download",
    )?;
    let deb = std::fs::read_dir(tmp.path())
        .map_err(io_err("list the download"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| unavailable("apt-get download produced no .deb"))?;
    eprintln!("cove:   extracting");
    let ex = tmp.path().join("x");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&ex),
        "dpkg-deb -x",
    )?;
    let version = package.trim_start_matches("linux-image-");
    let bz = ex.join("boot").join(format!("vmlinuz-{version}"));
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join("modules")).map_err(io_err("create out dir"))?;
    eprintln!("cove:   turning the bzImage into a PVH ELF");
    extract_vmlinux(&bz, &out.join("vmlinux"))?;
    let kdir = ex.join("lib/modules").join(version).join("kernel");
    for m in MODULES {
        let src = kdir.join(format!("{m}.ko"));
        let name = Path::new(m).file_name().unwrap_or_default();
        let dst = out.join("modules").join(name).with_extension("ko");
        std::fs::copy(&src, &dst).map_err(io_err(format!("copy module {}", src.display())))?;
    }
    eprintln!("cove:   building the initramfs");
    build_initramfs(&out.join("modules"), &out.join("initramfs.cpio"))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&out, &dir).map_err(io_err(format!("rename into {}", dir.display())))?;
    eprintln!("cove: VM guest kernel ready in {}", dir.display());
    Ok(files)
}

/// The versioned kernel package the metapackage depends on (`linux-image-6.1.0-57-cloud-amd64`).
fn kernel_package() -> Result<String, RuntimeError> {
    let out = run(
        Command::new("apt-cache").args(["depends", KERNEL_META_PACKAGE]),
        "apt-cache depends",
    )?;
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-") && p.chars().any(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| unavailable(format!("no kernel package behind {KERNEL_META_PACKAGE}")))
}

/// Decompresses the bzImage's payload (the vmlinux ELF) into `out`.
fn extract_vmlinux(bz: &Path, out: &Path) -> Result<(), RuntimeError> {
    let data = std::fs::read(bz).map_err(io_err(format!("read {}", bz.display())))?;
    let payload = bzimage_payload(&data).ok_or_else(|| unavailable("not a bzImage"))?;
    let tool: &[&str] = match payload {
        [0x02, 0x21, 0x4c, 0x18, ..] => &["lz4", "-dc"],
        [0x1f, 0x8b, ..] => &["gzip", "-dc"],
        [0xfd, b'7', b'z', b'X', ..] => &["xz", "-dc"],
        [0x28, 0xb5, 0x2f, 0xfd, ..] => &["zstd", "-dc"],
        _ => return Err(unavailable("unknown bzImage compression")),
    };
    let packed = out.with_extension("packed");
    std::fs::write(&packed, payload).map_err(io_err("write the payload"))?;
    let file = std::fs::File::create(out).map_err(io_err("create vmlinux"))?;
    let status = Command::new(tool[0])
        .args(&tool[1..])
        .arg(&packed)
        .stdout(file)
        .status()
        .map_err(|e| unavailable(format!("cannot run {}: {e}", tool[0])))?;
    let _ = std::fs::remove_file(&packed);
    // The kernel's lz4 stream has trailing bytes lz4 warns about; the ELF magic decides.
    let head = std::fs::read(out).map_err(io_err("read vmlinux"))?;
    if !head.starts_with(b"\x7fELF") {
        return Err(unavailable(format!(
            "{} did not produce an ELF ({status})",
            tool[0]
        )));
    }
    Ok(())
}

/// The compressed payload of a bzImage, from its setup header (boot protocol ≥ 2.08).
pub fn bzimage_payload(d: &[u8]) -> Option<&[u8]> {
    if d.len() < 0x250 || &d[0x202..0x206] != b"HdrS" {
        return None;
    }
    let setup_sects = match d[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let u32_at = |o: usize| u32::from_le_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]) as usize;
    let start = (setup_sects + 1) * 512 + u32_at(0x248);
    let len = u32_at(0x24c);
    d.get(start..start.checked_add(len)?)
}

/// Writes the initramfs: busybox, the modules, `/init`, and empty mount points.
fn build_initramfs(modules: &Path, out: &Path) -> Result<(), RuntimeError> {
    let busybox = std::fs::read(BUSYBOX)
        .map_err(|e| unavailable(format!("static busybox needed at {BUSYBOX}: {e}")))?;
    let mut w = Cpio::default();
    for d in ["bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"] {
        w.dir(d);
    }
    w.file("bin/busybox", 0o755, &busybox);
    w.file("init", 0o755, INIT.as_bytes());
    let mut names: Vec<_> = std::fs::read_dir(modules)
        .map_err(io_err("list modules"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        let data = std::fs::read(&p).map_err(io_err(format!("read {}", p.display())))?;
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        w.file(&format!("lib/modules/{name}"), 0o644, &data);
    }
    let bytes = w.finish();
    let mut f = std::fs::File::create(out).map_err(io_err("create initramfs"))?;
    f.write_all(&bytes).map_err(io_err("write initramfs"))?;
    Ok(())
}

/// A minimal writer of the `newc` cpio format the kernel unpacks.
#[derive(Default)]
struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let namesize = name.len() + 1;
        let header =
            format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino, mode, 0, 0, 1, 0, data.len(), 0, 0, 0, 0, namesize, 0
        );
        self.buf.extend_from_slice(header.as_bytes());
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.buf
    }
}

/// Makes (once per agent binary) a read-only ext4 disk holding the guest agent as
/// `cove-guest-agent`, and returns its path. Blocking.
pub fn ensure_agent_disk(cache: &Path, agent: &Path) -> Result<PathBuf, RuntimeError> {
    let meta = std::fs::metadata(agent).map_err(io_err(format!("stat {}", agent.display())))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let path = cache.join(format!("agent-{}-{mtime}.ext4", meta.len()));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(cache).map_err(io_err(format!("create {}", cache.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix(".agent-")
        .tempdir_in(cache)
        .map_err(io_err("create a temporary directory"))?;
    let content = tmp.path().join("d");
    std::fs::create_dir(&content).map_err(io_err("create agent dir"))?;
    std::fs::copy(agent, content.join("cove-guest-agent")).map_err(io_err("copy the agent"))?;
    let mib = meta.len().div_ceil(1 << 20) + 16;
    let img = tmp.path().join("agent.ext4");
    super::disk::mkfs_ext4(&content, &img, mib, "cove-agent")?;
    std::fs::rename(&img, &path).map_err(io_err(format!("rename into {}", path.display())))?;
    // Disks of earlier agent builds are stale (VMs using one keep it open).
    if let Ok(rd) = std::fs::read_dir(cache) {
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p != path && name.starts_with("agent-") && name.ends_with(".ext4") {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut w = Cpio::default();
        w.dir("bin");
        w.file("init", 0o755, b"#!/bin/sh\n");
        let b = w.finish();
        assert!(b.starts_with(b"070701"));
        assert_eq!(b.len() % 4, 0);
        assert!(b.windows(10).any(|x| x == b"TRAILER!!!"));
    }

    #[test]
    fn payload_of_a_fake_bzimage() {
        let mut d = vec![0u8; 0x1000];
        d[0x1f1] = 1;
        d[0x202..0x206].copy_from_slice(b"HdrS");
        d[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        d[0x24c..0x250].copy_from_slice(&4u32.to_le_bytes());
        d[1024 + 16..1024 + 20].copy_from_slice(&[0x02, 0x21, 0x4c, 0x18]);
        assert_eq!(bzimage_payload(&d), Some(&[0x02, 0x21, 0x4c, 0x18][..]));
        assert_eq!(bzimage_payload(&d[..0x100]), None);
    }
}
