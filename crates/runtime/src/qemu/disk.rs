//! VM disks: the ext4 image form of a release, and each sandbox's qcow2 overlay on it.
//!
//! - A release's image is `<release>/rootfs.ext4`, next to its `rootfs/` directory, made once with
//!   `mkfs.ext4 -d` (no loop mount, no root privileges beyond reading the tree) and sized to its
//!   content plus headroom; it is opened read-only by every VM of the release.
//! - A sandbox's disk is `<sandbox>/upper/disk.qcow2`, a copy-on-write overlay whose backing file
//!   is the release image; its virtual size is `disk_mib` (at least the image's size), and the
//!   guest grows the filesystem to it online at boot. It lives in `upper/` because that is what
//!   the snapshot store keeps of a sandbox. On every start the backing path is rewritten
//!   (`qemu-img rebase -u`), so a disk saved on one node works on another whose data dir differs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::RuntimeError;

/// Free space added to a release image beyond its content, in MiB.
const IMAGE_HEADROOM_MIB: u64 = 256;
/// Virtual disk size beyond the image when a sandbox asks for no size, in MiB.
pub const DEFAULT_EXTRA_MIB: u64 = 1024;

fn cmd_err(what: &str, out: &std::process::Output) -> RuntimeError {
    RuntimeError::Command {
        op: "disk",
        id: what.to_string(),
        detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>, RuntimeError> {
    let out = cmd.output().map_err(|e| {
        RuntimeError::Unavailable(format!("{what}: cannot run {:?}: {e}", cmd.get_program()))
    })?;
    if !out.status.success() {
        return Err(cmd_err(what, &out));
    }
    Ok(out.stdout)
}

/// Makes an ext4 image of `mib` MiB at `img` holding the tree `content`, labelled `label`.
pub fn mkfs_ext4(content: &Path, img: &Path, mib: u64, label: &str) -> Result<(), RuntimeError> {
    run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-i", "8192", "-L", label, "-d"])
            .arg(content)
            .arg(img)
            .arg(format!("{mib}M")),
        "mkfs.ext4",
    )?;
    Ok(())
}

/// Size of a tree in MiB as `du` counts it.
fn tree_mib(dir: &Path) -> Result<u64, RuntimeError> {
    let out = run(Command::new("du").arg("-sxk").arg(dir), "du")?;
    let kib: u64 = String::from_utf8_lossy(&out)
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(kib.div_ceil(1024))
}

/// Makes (once) the ext4 image of the release whose tree is `rootfs` and returns its path and
/// size in MiB. Blocking; callers serialise concurrent first uses.
pub fn ensure_release_image(rootfs: &Path) -> Result<(PathBuf, u64), RuntimeError> {
    let parent = rootfs.parent().unwrap_or(Path::new("/"));
    let img = parent.join("rootfs.ext4");
    if let Ok(meta) = std::fs::metadata(&img) {
        return Ok((img, meta.len() >> 20));
    }
    let content = tree_mib(rootfs)?;
    let mib = content + content / 4 + IMAGE_HEADROOM_MIB;
    eprintln!(
        "cove: making the VM disk image of {} ({mib} MiB)…",
        rootfs.display()
    );
    let tmp = parent.join(".rootfs.ext4.tmp");
    let _ = std::fs::remove_file(&tmp);
    if let Err(e) = mkfs_ext4(rootfs, &tmp, mib, "cove-root") {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &img).map_err(|source| RuntimeError::Io {
        context: format!("rename into {}", img.display()),
        source,
    })?;
    Ok((img, mib))
}

/// Creates the sandbox's overlay `disk` on `base` (virtual size `mib` MiB) if it does not exist,
/// or points an existing one at `base`.
pub fn ensure_overlay(
    qemu_img: &Path,
    base: &Path,
    disk: &Path,
    mib: u64,
) -> Result<(), RuntimeError> {
    if disk.exists() {
        run(
            Command::new(qemu_img)
                .args(["rebase", "-u", "-f", "qcow2", "-F", "raw", "-b"])
                .arg(base)
                .arg(disk),
            "qemu-img rebase",
        )?;
        return Ok(());
    }
    if let Some(dir) = disk.parent() {
        std::fs::create_dir_all(dir).map_err(|source| RuntimeError::Io {
            context: format!("create {}", dir.display()),
            source,
        })?;
    }
    run(
        Command::new(qemu_img)
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(base)
            .arg(disk)
            .arg(format!("{mib}M")),
        "qemu-img create",
    )?;
    Ok(())
}

/// Disk use of a sandbox's overlay: the host blocks allocated to `overlay` (what the sandbox
/// wrote) against its virtual size (read from the qcow2 header).
pub(crate) fn overlay_usage(overlay: &Path) -> Result<crate::DiskUsage, RuntimeError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let io = |what: &str| {
        let context = format!("{what} {}", overlay.display());
        move |source| RuntimeError::Io { context, source }
    };
    let meta = std::fs::metadata(overlay).map_err(io("stat"))?;
    let mut header = [0u8; 32];
    std::fs::File::open(overlay)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(io("read the header of"))?;
    Ok(crate::DiskUsage {
        used_bytes: meta.blocks().saturating_mul(512),
        limit_bytes: qcow2_virtual_size(&header),
    })
}

/// The virtual size of a qcow2 image from its first 32 header bytes (`QFI\xfb`, then the
/// size as a big-endian u64 at offset 24); `None` when it is not a qcow2 header.
fn qcow2_virtual_size(header: &[u8; 32]) -> Option<u64> {
    if header[..4] != *b"QFI\xfb" {
        return None;
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&header[24..32]);
    Some(u64::from_be_bytes(size))
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn reads_the_qcow2_virtual_size() {
        let mut h = [0u8; 32];
        h[..4].copy_from_slice(b"QFI\xfb");
        h[24..32].copy_from_slice(&(5u64 << 30).to_be_bytes());
        assert_eq!(qcow2_virtual_size(&h), Some(5 << 30));
        assert_eq!(qcow2_virtual_size(&[0u8; 32]), None);
    }
}
