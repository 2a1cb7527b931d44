//! Persistent volumes: the rules for their names, sizes and where a sandbox mounts them.
//!
//! A volume is a node-local ext4 filesystem of a fixed size that sandboxes mount at create.
//! These checks run in the control plane before anything is recorded; the node trusts them.

use crate::InvalidInput;

/// Smallest volume, MiB (ext4 needs a few MiB for its own metadata and journal).
pub const MIN_SIZE_MIB: u64 = 16;
/// Largest volume, MiB (1 TiB; the image is sparse, so only written blocks take room).
pub const MAX_SIZE_MIB: u64 = 1 << 20;
/// Most volumes one sandbox mounts.
pub const MAX_MOUNTS: usize = 16;
/// Longest volume name, bytes.
pub const MAX_NAME: usize = crate::validate::MAX_RESOURCE_NAME;

/// Paths a volume may not be mounted at nor below: kernel filesystems and the guest agent.
const RESERVED_TREES: &[&str] = &["/proc", "/sys", "/dev", "/.cove"];
/// Paths a volume may not be mounted at exactly (hiding them breaks the sandbox).
const RESERVED_PATHS: &[&str] = &["/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64"];

/// Checks a volume name as template names are checked
/// ([`crate::validate::resource_name`]).
pub fn name(field: &str, name: &str) -> Result<(), InvalidInput> {
    crate::validate::resource_name(field, name)
}

/// Checks a volume size: [`MIN_SIZE_MIB`] to [`MAX_SIZE_MIB`] MiB.
pub fn size_mib(field: &str, mib: u64) -> Result<(), InvalidInput> {
    if (MIN_SIZE_MIB..=MAX_SIZE_MIB).contains(&mib) {
        Ok(())
    } else {
        Err(InvalidInput::new(
            field,
            format!("must be {MIN_SIZE_MIB} to {MAX_SIZE_MIB} (MiB)"),
        ))
    }
}

/// Checks where a sandbox mounts a volume: an absolute, normalised path (no `.`, `..`, empty
/// component or trailing `/`), at most 4096 bytes, not `/` nor another path the sandbox needs
/// (`/etc`, `/usr`, ...), and not at or below `/proc`, `/sys`, `/dev` or `/.cove`.
pub fn mount_path(field: &str, path: &str) -> Result<(), InvalidInput> {
    crate::validate::path(field, path.as_bytes())?;
    if !path.starts_with('/') {
        return Err(InvalidInput::new(field, "must be an absolute path"));
    }
    if RESERVED_PATHS.contains(&path) {
        return Err(InvalidInput::new(
            field,
            format!("cannot mount a volume at {path}"),
        ));
    }
    if path[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(InvalidInput::new(
            field,
            "must be normalised (no `.`, `..`, `//` or trailing `/`)",
        ));
    }
    for tree in RESERVED_TREES {
        if path == *tree || path.starts_with(&format!("{tree}/")) {
            return Err(InvalidInput::new(
                field,
                format!("cannot mount a volume at or below {tree}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes() {
        assert!(name("name", "data-1_x").is_ok());
        for bad in ["", "-x", "Data", "a/b", "a.b", &"a".repeat(64)] {
            assert!(name("name", bad).is_err(), "{bad}");
        }
        assert!(size_mib("size_mib", 16).is_ok());
        assert!(size_mib("size_mib", 15).is_err());
        assert!(size_mib("size_mib", MAX_SIZE_MIB + 1).is_err());
    }

    #[test]
    fn mount_paths() {
        for ok in ["/data", "/home/user/work", "/mnt/v", "/procfs", "/devices"] {
            assert!(mount_path("path", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/",
            "data",
            "/proc",
            "/proc/x",
            "/sys/fs",
            "/dev",
            "/dev/shm",
            "/.cove/run",
            "/etc",
            "/a/../b",
            "/a/./b",
            "/a//b",
            "/a/",
            "/a\0b",
        ] {
            assert!(mount_path("path", bad).is_err(), "{bad:?}");
        }
    }
}
