//! The run dir's own entries (the agent's socket, `output/`, `scripts/`) sealed against the
//! sandbox: once the agent listens, the host sets the immutable attribute (`FS_IMMUTABLE_FL`,
//! what `chattr +i` sets) on the run dir, so no entry of it can be removed, renamed or replaced
//! from inside, not even by the sandbox's root, which lacks `CAP_LINUX_IMMUTABLE` to clear it.
//! Files inside `output/` and `scripts/` stay writable for the agent. The host clears the
//! attribute before it clears or removes the directory (start, stop).
//!
//! Blocking calls; callers run them on `spawn_blocking` or in blocking preparation.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use tracing::warn;

/// `FS_IMMUTABLE_FL` of `<linux/fs.h>`.
const FS_IMMUTABLE_FL: libc::c_long = 0x10;

nix::ioctl_read!(get_flags, b'f', 1, libc::c_long);
nix::ioctl_write_ptr!(set_flags, b'f', 2, libc::c_long);

/// Makes `dir`'s entries immutable. A filesystem without the attribute only logs: the
/// sandbox then runs unsealed.
pub(crate) fn seal(dir: &Path) {
    if let Err(e) = set_immutable(dir, true) {
        warn!(dir = %dir.display(), error = %e, "cannot seal the agent's run dir");
    }
}

/// Clears what [`seal`] set; a missing directory is fine.
pub(crate) fn unseal(dir: &Path) {
    match set_immutable(dir, false) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(dir = %dir.display(), error = %e, "cannot unseal the agent's run dir"),
    }
}

fn set_immutable(dir: &Path, on: bool) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one `long` into `flags`, a valid local; the descriptor is
    // open for the whole call.
    unsafe { get_flags(f.as_raw_fd(), &mut flags) }.map_err(std::io::Error::from)?;
    let wanted = if on {
        flags | FS_IMMUTABLE_FL
    } else {
        flags & !FS_IMMUTABLE_FL
    };
    if wanted != flags {
        // SAFETY: FS_IOC_SETFLAGS reads one `long` from `wanted`, a valid local.
        unsafe { set_flags(f.as_raw_fd(), &wanted) }.map_err(std::io::Error::from)?;
    }
    Ok(())
}
