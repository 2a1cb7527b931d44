//! The overlay root filesystem: mount with the `mount(2)` syscall, unmount (lazily when busy), and
//! mount-table queries from `/proc/self/mountinfo`. These are blocking calls; callers run them on
//! `spawn_blocking`.

use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::RuntimeError;

/// Mounts an overlay of `lower` (read-only) and `upper`/`work` on `target`.
///
/// Paths must not contain `,` `:` or `\`, which the overlay option syntax would misread.
pub(crate) fn mount_overlay(
    lower: &Path,
    upper: &Path,
    work: &Path,
    target: &Path,
) -> Result<(), RuntimeError> {
    for p in [lower, upper, work] {
        let s = p.to_string_lossy();
        if s.contains([',', ':', '\\']) || s.contains('\n') {
            return Err(RuntimeError::Io {
                context: format!("overlay path {} has a character overlayfs cannot take", s),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            });
        }
    }
    let data = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| RuntimeError::Io {
        context: format!("mount overlay on {}", target.display()),
        source: e.into(),
    })
}

/// Unmounts `target`; detaches lazily when it is busy. Not mounted (or missing) is fine.
pub(crate) fn unmount(target: &Path) -> Result<(), RuntimeError> {
    // A path can carry stacked mounts; take them all off.
    for _ in 0..16 {
        if !is_mounted(target)? {
            return Ok(());
        }
        match umount2(target, MntFlags::empty()) {
            Ok(()) => {}
            Err(Errno::EBUSY) => {
                umount2(target, MntFlags::MNT_DETACH).map_err(|e| RuntimeError::Io {
                    context: format!("detach {}", target.display()),
                    source: e.into(),
                })?;
            }
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => return Ok(()),
            Err(e) => {
                return Err(RuntimeError::Io {
                    context: format!("unmount {}", target.display()),
                    source: e.into(),
                })
            }
        }
    }
    Err(RuntimeError::Io {
        context: format!("unmount {}: still mounted", target.display()),
        source: std::io::Error::from(std::io::ErrorKind::ResourceBusy),
    })
}

/// Whether something is mounted exactly at `path` in this process's mount namespace.
pub(crate) fn is_mounted(path: &Path) -> Result<bool, RuntimeError> {
    let path = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(RuntimeError::Io {
                context: format!("resolve {}", path.display()),
                source,
            })
        }
    };
    Ok(mount_points()?.contains(&path))
}

/// All mount points of this process's mount namespace.
pub(crate) fn mount_points() -> Result<Vec<PathBuf>, RuntimeError> {
    let text =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| RuntimeError::Io {
            context: "read /proc/self/mountinfo".to_string(),
            source,
        })?;
    Ok(parse_mount_points(&text))
}

fn parse_mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape(field)))
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mount_points_with_escapes() {
        let info = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                    90 27 0:50 / /tmp/a\\040b rw - overlay overlay rw,lowerdir=/x\n";
        assert_eq!(
            parse_mount_points(info),
            vec![PathBuf::from("/proc"), PathBuf::from("/tmp/a b")]
        );
    }
}
