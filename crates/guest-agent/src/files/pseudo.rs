//! Pseudo-filesystems (`/proc`, `/sys`, `/dev`, cgroup, ...), which hold kernel interfaces and
//! devices rather than files: the file API does not create or replace anything there
//! (`InvalidArgument`, naming the filesystem). Reading them works as for any file.
//!
//! A path counts as pseudo when its canonical form lies below `/proc`, `/sys` or `/dev` (except
//! `/dev/shm`, an ordinary tmpfs) or when `statfs` of its nearest existing directory names a
//! pseudo-filesystem type. (`devtmpfs` reports tmpfs's type, hence the `/dev` rule.)

use std::path::Path;

use nix::sys::statfs::{statfs, FsType};

use super::path::display;
use super::reserved::real_path;
use crate::error::AgentError;

/// Mount points of pseudo-filesystems by convention, and what they are.
const PSEUDO_DIRS: [(&str, &str); 3] = [("/proc", "proc"), ("/sys", "sysfs"), ("/dev", "devices")];

/// Below `/dev` but an ordinary filesystem.
const DEV_SHM: &str = "/dev/shm";

/// `statfs` magic numbers of pseudo-filesystems (from `linux/magic.h`).
const PSEUDO_TYPES: [(i64, &str); 14] = [
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x1cd1, "devpts"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6165_676c, "pstore"),
    (0x6265_6570, "configfs"),
    (0xde5e_81e4, "efivarfs"),
    (0x1980_0202, "mqueue"),
    (0x4249_4e4d, "binfmt_misc"),
];

/// `InvalidArgument` when `path` (to be created or replaced) is on a pseudo-filesystem.
pub fn check_writable(path: &Path) -> Result<(), AgentError> {
    match pseudo_kind(path) {
        Some(kind) => Err(AgentError::invalid(format!(
            "{} is on a pseudo-filesystem ({kind}) holding kernel interfaces, not files; the \
             file API does not write there",
            display(path)
        ))),
        None => Ok(()),
    }
}

/// The kind of pseudo-filesystem `path` is on, if any.
pub fn pseudo_kind(path: &Path) -> Option<&'static str> {
    let real = real_path(path, true);
    for candidate in [path, real.as_path()] {
        if candidate.starts_with(DEV_SHM) {
            continue;
        }
        if let Some((_, kind)) = PSEUDO_DIRS.iter().find(|(d, _)| candidate.starts_with(d)) {
            return Some(kind);
        }
    }
    let mut dir = real.as_path();
    loop {
        if let Ok(st) = statfs(dir) {
            return type_name(st.filesystem_type());
        }
        dir = dir.parent()?;
    }
}

fn type_name(t: FsType) -> Option<&'static str> {
    // The field's integer type differs between C libraries and targets.
    #[allow(clippy::unnecessary_cast)]
    let raw = t.0 as i64;
    PSEUDO_TYPES
        .iter()
        .find(|(magic, _)| *magic == raw || *magic == (raw & 0xffff_ffff))
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_kernel_filesystems() {
        assert_eq!(
            pseudo_kind(Path::new("/proc/sys/kernel/hostname")),
            Some("proc")
        );
        assert_eq!(pseudo_kind(Path::new("/sys/kernel/x")), Some("sysfs"));
        assert_eq!(pseudo_kind(Path::new("/dev/null")), Some("devices"));
        assert_eq!(pseudo_kind(Path::new("/dev/shm/x")), None);
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(pseudo_kind(&dir.path().join("new/file")), None);
        let e = check_writable(Path::new("/proc/self/comm")).expect_err("pseudo");
        assert_eq!(e.code, cove_guest_protocol::ErrorCode::InvalidArgument);
        assert!(
            e.message.contains("pseudo-filesystem (proc)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn statfs_finds_a_cgroup_mount_anywhere() {
        // A symlink elsewhere that leads into /sys is judged where it leads.
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("sys");
        std::os::unix::fs::symlink("/sys/fs/cgroup", &link).expect("symlink");
        assert!(pseudo_kind(&link.join("x")).is_some());
    }
}
