//! A sandbox's own disk (`Resources::disk_mib`): a sparse ext4 image `disk.img` in the sandbox
//! directory, loop-mounted on `disk/`, holding the overlay's upper and work directories
//! (`disk/upper`, `disk/work`). A full sandbox then fills its image, never the node's disk.
//!
//! - The image is made once (`mkfs.ext4 -m 0`: no blocks reserved for root, so a full disk is
//!   full for the guest agent's uploads too) and kept across stop/start; its size is fixed then.
//! - `upper` in the sandbox directory is a symlink to `disk/upper`, so readers of a sandbox's
//!   files through `<dir>/upper` (snapshots) find them while the disk is mounted. A real
//!   `upper/` directory found at start (files restored from a snapshot) is copied into the image
//!   (`cp -a`, which keeps owners, modes, links and extended attributes such as overlayfs's
//!   whiteout markers) and replaced by the symlink.
//! - `disk/run` is the guest agent's run dir (socket, spilled output, scripts), so what the agent
//!   keeps for the sandbox is bounded by the disk too, not by the node's free space.
//! - Mounting uses `mount -o loop`, whose loop device is set up with autoclear: unmounting the
//!   image (on stop) also detaches the loop device.
//!
//! These are blocking calls; callers run them on `spawn_blocking`.

use std::path::Path;
use std::process::{Command, Stdio};

use super::layout::{io_err, Layout};
use super::mounts;
use crate::RuntimeError;

/// Name of the overlay upper dir inside the disk, and of its symlink in the sandbox dir.
const UPPER: &str = "upper";
/// Name of the overlay work dir inside the disk.
const WORK: &str = "work";
/// `mkfs.ext4 -E` (besides `root_owner`): the inode tables and the journal are not
/// zeroed, by mkfs or later by the kernel (mounted with `noinit_itable`): the image is a fresh
/// sparse file whose unwritten blocks read as zeros anyway, so a 10 GiB image costs ~4 MiB on
/// the node instead of ~70 MiB.
const MKFS_EXTENDED: &str = "lazy_itable_init=1,lazy_journal_init=1,nodiscard";

/// Makes (first time), mounts and prepares the disk; returns the overlay's `(upper, work)`.
pub(crate) fn prepare(
    layout: &Layout,
    size_mib: u64,
) -> Result<(std::path::PathBuf, std::path::PathBuf), RuntimeError> {
    if !layout.disk_img.exists() {
        make_image(&layout.disk_img, size_mib, (0, 0))?;
    }
    std::fs::create_dir_all(&layout.disk_mnt)
        .map_err(io_err(format!("create {}", layout.disk_mnt.display())))?;
    if !mounts::is_mounted(&layout.disk_mnt)? {
        run(
            Command::new("mount")
                .args(["-t", "ext4", "-o", "loop,nodev,noinit_itable"])
                .arg(&layout.disk_img)
                .arg(&layout.disk_mnt),
            "mount the sandbox disk",
        )?;
    }
    let upper = layout.disk_mnt.join(UPPER);
    let work = layout.disk_mnt.join(WORK);
    for d in [&upper, &work] {
        std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
    }
    adopt_plain_upper(layout, &upper)?;
    Ok((upper, work))
}

/// Unmounts the disk (which detaches its loop device) and removes the empty mount point. Not
/// mounted is fine.
pub(crate) fn unmount(layout: &Layout) -> Result<(), RuntimeError> {
    mounts::unmount(&layout.disk_mnt)?;
    match std::fs::remove_dir(&layout.disk_mnt) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RuntimeError::Io {
            context: format!("remove mount point {}", layout.disk_mnt.display()),
            source,
        }),
    }
}

/// A sparse file of `size_mib` MiB with an ext4 filesystem whose root directory `owner`
/// (uid, gid) owns; removed again when mkfs fails.
pub(crate) fn make_image(img: &Path, size_mib: u64, owner: (u32, u32)) -> Result<(), RuntimeError> {
    let file = std::fs::File::create(img).map_err(io_err(format!("create {}", img.display())))?;
    file.set_len(size_mib.saturating_mul(1 << 20))
        .map_err(io_err(format!("size {}", img.display())))?;
    drop(file);
    let made = run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-E"])
            .arg(format!(
                "root_owner={}:{},{MKFS_EXTENDED}",
                owner.0, owner.1
            ))
            .arg(img),
        "make the sandbox disk",
    );
    if made.is_err() {
        let _ = std::fs::remove_file(img);
    }
    made
}

/// Moves the files of a real `upper/` directory (restored from a snapshot) into the disk and
/// leaves the `upper -> disk/upper` symlink in its place.
fn adopt_plain_upper(layout: &Layout, disk_upper: &Path) -> Result<(), RuntimeError> {
    match std::fs::symlink_metadata(&layout.upper) {
        Ok(m) if m.file_type().is_symlink() => return Ok(()),
        Ok(m) if m.is_dir() => {
            let mut source = layout.upper.clone().into_os_string();
            source.push("/.");
            run(
                Command::new("cp").arg("-a").arg(source).arg(disk_upper),
                "copy the sandbox's files onto its disk",
            )?;
            std::fs::remove_dir_all(&layout.upper)
                .map_err(io_err(format!("remove {}", layout.upper.display())))?;
        }
        Ok(_) => {
            return Err(RuntimeError::Io {
                context: format!(
                    "{} is neither a directory nor a symlink",
                    layout.upper.display()
                ),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(RuntimeError::Io {
                context: format!("stat {}", layout.upper.display()),
                source,
            })
        }
    }
    let target = Path::new(super::layout::DISK_DIR).join(UPPER);
    std::os::unix::fs::symlink(&target, &layout.upper)
        .map_err(io_err(format!("link {}", layout.upper.display())))
}

/// Runs a helper program; a failure carries its stderr.
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<(), RuntimeError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(io_err(format!(
        "{what}: cannot run {:?}",
        cmd.get_program()
    )))?;
    if out.status.success() {
        return Ok(());
    }
    Err(RuntimeError::Io {
        context: format!(
            "{what}: {:?} failed: {}",
            cmd.get_program(),
            super::cli::message(&out.stderr)
        ),
        source: std::io::Error::other(out.status.to_string()),
    })
}

/// Most directory entries [`usage`] walks in a writable layer without its own disk; beyond
/// that the sum covers the first ones only (a sandbox with millions of files must not make
/// every sample walk them all).
const MAX_WALK_ENTRIES: usize = 200_000;

/// Disk use of the sandbox in `layout`: its own disk's filesystem when mounted, else the
/// blocks allocated to the files of `upper/` (at most [`MAX_WALK_ENTRIES`] entries).
pub(crate) fn usage(layout: &Layout) -> Result<crate::DiskUsage, RuntimeError> {
    if layout.disk_img.exists() && mounts::is_mounted(&layout.disk_mnt)? {
        let st = nix::sys::statvfs::statvfs(&layout.disk_mnt).map_err(|e| RuntimeError::Io {
            context: format!("statvfs {}", layout.disk_mnt.display()),
            source: std::io::Error::from(e),
        })?;
        let frag = st.fragment_size();
        let total = st.blocks().saturating_mul(frag);
        let free = st.blocks_free().saturating_mul(frag);
        return Ok(crate::DiskUsage {
            used_bytes: total.saturating_sub(free),
            limit_bytes: Some(total),
        });
    }
    Ok(crate::DiskUsage {
        used_bytes: allocated_bytes(&layout.upper, MAX_WALK_ENTRIES),
        limit_bytes: None,
    })
}

/// Bytes allocated to the files below `root` (a tenant's tree, walked confined: no link
/// followed), walking at most `max_entries` entries; unreadable parts count as nothing.
fn allocated_bytes(root: &Path, max_entries: usize) -> u64 {
    let Ok(tree) = cove_confine::Tree::open(root) else {
        return 0;
    };
    let mut total = 0u64;
    let mut seen = 0usize;
    let _ = tree.walk(u64::MAX, &mut |_, _, meta| {
        seen += 1;
        if seen > max_entries {
            return Err(cove_confine::Error::TooMany {
                max: max_entries as u64,
            });
        }
        total = total.saturating_add(meta.blocks.saturating_mul(512));
        Ok(())
    });
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_bytes_sums_files_below() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("a")).expect("mkdir");
        std::fs::write(dir.path().join("a/one"), vec![7u8; 64 * 1024]).expect("write");
        std::fs::write(dir.path().join("two"), vec![7u8; 32 * 1024]).expect("write");
        let got = allocated_bytes(dir.path(), 1000);
        assert!(got >= 96 * 1024, "{got}");
        assert!(got < 96 * 1024 + 64 * 1024, "{got}");
        // The bound stops the walk.
        assert!(allocated_bytes(dir.path(), 1) < 96 * 1024);
    }
}
