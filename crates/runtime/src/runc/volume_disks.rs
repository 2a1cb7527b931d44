//! The node's persistent volume disks: one sparse ext4 image per volume, loop-mounted once on
//! the node, which sandboxes then bind (`volumes.rs`).
//!
//! Under the root given (`<data-dir>/volumes`): `<id>/disk.img` and its mount point
//! `<id>/mnt`. The image is made with `mkfs.ext4 -m 0` (no blocks reserved for root: a full
//! volume is full for everyone, so writes past the size fail with `ENOSPC` inside a sandbox and
//! through the files API alike) and its root directory belongs to uid and gid 1000 (`user` of
//! the built-in templates). Mounting uses `mount -o loop` with autoclear, so unmounting
//! detaches the loop device too. Nothing here removes a tree recursively: a directory that is
//! still a mount is never emptied by mistake.
//!
//! Blocking calls; callers run them on `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::process::Command;

use parking_lot::Mutex;

use super::layout::io_err;
use super::mounts;
use crate::RuntimeError;

/// Owner (uid, gid) of a new volume's root directory.
pub const VOLUME_OWNER: (u32, u32) = (1000, 1000);

/// Space of a mounted volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes free for new data.
    pub free_bytes: u64,
}

/// The volume disks of one node.
#[derive(Debug)]
pub struct VolumeDisks {
    root: PathBuf,
    /// Held while a volume is mounted or unmounted: two sandboxes starting at once mount it
    /// once.
    mounting: Mutex<()>,
}

impl VolumeDisks {
    /// Volume disks kept below `root` (created when the first volume is).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        VolumeDisks {
            root: root.into(),
            mounting: Mutex::new(()),
        }
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    fn image(&self, id: &str) -> PathBuf {
        self.dir(id).join("disk.img")
    }

    /// Where volume `id` is mounted on the node.
    pub fn mount_point(&self, id: &str) -> PathBuf {
        self.dir(id).join("mnt")
    }

    /// The image file of volume `id` (for an object volume's upload: unmount it first).
    pub fn image_path(&self, id: &str) -> PathBuf {
        self.image(id)
    }

    /// Unmounts volume `id` so all its data is in the image (unless it is not mounted). Never
    /// lazily: a mount still in use (a files call in flight) is an error (`EBUSY`), not a
    /// detach that would leave data unwritten.
    pub fn unmount(&self, id: &str) -> Result<(), RuntimeError> {
        check_id(id)?;
        let _held = self.mounting.lock();
        let mnt = self.mount_point(id);
        if !mounts::is_mounted(&mnt)? {
            return Ok(());
        }
        // Flushed first: the filesystem's data reaches the image even if another mount of it
        // (a bind somewhere) kept it alive past the unmount.
        let dir = std::fs::File::open(&mnt).map_err(io_err(format!("open {}", mnt.display())))?;
        nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)).map_err(|e| {
            RuntimeError::Io {
                context: format!("syncfs {}", mnt.display()),
                source: e.into(),
            }
        })?;
        drop(dir);
        nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()).map_err(|e| RuntimeError::Io {
            context: format!("unmount {}", mnt.display()),
            source: e.into(),
        })
    }

    /// Installs `staged` (a complete image, on the same filesystem) as volume `id`'s image,
    /// replacing any copy the node has (which is unmounted and removed first).
    pub fn install(&self, id: &str, staged: &Path) -> Result<(), RuntimeError> {
        self.remove(id)?;
        let dir = self.dir(id);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        std::fs::rename(staged, self.image(id))
            .map_err(io_err(format!("install {}", staged.display())))
    }

    /// A path beside the volumes to stage a downloaded image of `id` in (its folder made).
    pub fn staging_path(&self, id: &str) -> Result<PathBuf, RuntimeError> {
        check_id(id)?;
        std::fs::create_dir_all(&self.root)
            .map_err(io_err(format!("create {}", self.root.display())))?;
        Ok(self.root.join(format!(".{id}.download")))
    }

    /// Whether the node has volume `id`'s image.
    pub fn exists(&self, id: &str) -> bool {
        self.image(id).is_file()
    }

    /// Makes volume `id`: a sparse image of `size_mib` MiB with an empty ext4 filesystem.
    /// Errors: `Io` with kind `AlreadyExists` when there is one; mkfs failures (a full node
    /// disk is [`RuntimeError::is_no_space`]).
    pub fn create(&self, id: &str, size_mib: u64) -> Result<(), RuntimeError> {
        check_id(id)?;
        let dir = self.dir(id);
        std::fs::create_dir_all(&self.root)
            .map_err(io_err(format!("create {}", self.root.display())))?;
        std::fs::create_dir(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        let made = super::disk::make_image(&self.image(id), size_mib, VOLUME_OWNER);
        if made.is_err() {
            let _ = std::fs::remove_dir(&dir);
        }
        made
    }

    /// Mounts volume `id` unless it is mounted; returns its mount point. Errors: `Io` with
    /// kind `NotFound` when the node has no such volume.
    pub fn mount(&self, id: &str) -> Result<PathBuf, RuntimeError> {
        check_id(id)?;
        let _held = self.mounting.lock();
        let img = self.image(id);
        if !img.is_file() {
            return Err(RuntimeError::Io {
                context: format!("volume {id} is not on this node"),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        let mnt = self.mount_point(id);
        std::fs::create_dir_all(&mnt).map_err(io_err(format!("create {}", mnt.display())))?;
        if !mounts::is_mounted(&mnt)? {
            super::disk::run(
                Command::new("mount")
                    .args(["-t", "ext4", "-o", "loop,nodev,nosuid,noinit_itable"])
                    .arg(&img)
                    .arg(&mnt),
                "mount a volume",
            )?;
        }
        Ok(mnt)
    }

    /// Space of volume `id` (mounting it first).
    pub fn usage(&self, id: &str) -> Result<Usage, RuntimeError> {
        let mnt = self.mount(id)?;
        let st = nix::sys::statvfs::statvfs(&mnt).map_err(|e| RuntimeError::Io {
            context: format!("statvfs {}", mnt.display()),
            source: std::io::Error::from(e),
        })?;
        let frag = st.fragment_size();
        let total = st.blocks().saturating_mul(frag);
        let free = st.blocks_free().saturating_mul(frag);
        Ok(Usage {
            used_bytes: total.saturating_sub(free),
            free_bytes: st.blocks_available().saturating_mul(frag),
        })
    }

    /// Unmounts volume `id` and removes its image and directories. None is fine. Errors:
    /// the unmount failed, or something unexpected is left in its directory.
    pub fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        check_id(id)?;
        let _held = self.mounting.lock();
        let mnt = self.mount_point(id);
        mounts::unmount(&mnt)?;
        remove_if_present(&mnt, |p| std::fs::remove_dir(p))?;
        remove_if_present(&self.image(id), |p| std::fs::remove_file(p))?;
        remove_if_present(&self.dir(id), |p| std::fs::remove_dir(p))
    }
}

fn remove_if_present(
    path: &Path,
    remove: fn(&Path) -> std::io::Result<()>,
) -> Result<(), RuntimeError> {
    match remove(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(format!("remove {}", path.display()))(e)),
    }
}

/// A volume id is one path component of `[a-z0-9-]`.
fn check_id(id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::Io {
            context: format!("bad volume id {id:?}"),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })
    }
}
