//! The `tiny` recipe: the host's static busybox, a symlink per applet, the usual directories and
//! account files. Blocking; runs on `spawn_blocking`.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use super::files::{io, write_files};
use super::recipe::{HOST_BUSYBOX, TINY_DIRS, TINY_FILES, USER_HOME, USER_ID};
use super::BuildError;

const BUSYBOX_HINT: &str = "apt-get install busybox-static";

/// Builds the tiny root filesystem into `root` (which must not exist).
pub(crate) fn build(root: &Path) -> Result<(), BuildError> {
    let busybox = Path::new(HOST_BUSYBOX);
    check_static(busybox)?;

    std::fs::create_dir(root).map_err(io(root, "create"))?;
    for (dir, mode) in TINY_DIRS {
        let path = root.join(dir);
        std::fs::create_dir_all(&path).map_err(io(&path, "create"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
            .map_err(io(&path, "chmod"))?;
    }
    let home = root.join(USER_HOME.trim_start_matches('/'));
    std::os::unix::fs::chown(&home, Some(USER_ID), Some(USER_ID)).map_err(io(&home, "chown"))?;

    let target = root.join("bin/busybox");
    std::fs::copy(busybox, &target).map_err(io(&target, "copy busybox to"))?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
        .map_err(io(&target, "chmod"))?;

    let list = Command::new(busybox)
        .arg("--list-full")
        .output()
        .map_err(io(busybox, "run"))?;
    if !list.status.success() {
        return Err(BuildError::Failed {
            step: "busybox --list-full".to_string(),
            detail: String::from_utf8_lossy(&list.stderr).trim().to_string(),
        });
    }
    let applets = String::from_utf8_lossy(&list.stdout);
    for applet in applets.lines().map(str::trim).filter(|a| !a.is_empty()) {
        link_applet(root, applet)?;
    }
    link_applet(root, "bin/sh")?;

    write_files(root, TINY_FILES)?;
    Ok(())
}

/// Links `root/<applet path>` to `/bin/busybox` unless something is there already.
fn link_applet(root: &Path, applet: &str) -> Result<(), BuildError> {
    // `busybox --list-full` prints relative paths such as `usr/bin/awk`; refuse anything else.
    let rel = Path::new(applet);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(BuildError::Failed {
            step: "busybox --list-full".to_string(),
            detail: format!("unexpected applet path {applet:?}"),
        });
    }
    let link = root.join(rel);
    if link.symlink_metadata().is_ok() {
        return Ok(());
    }
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent, "create"))?;
    }
    symlink("/bin/busybox", &link).map_err(io(&link, "symlink"))
}

/// Checks that `path` is a statically linked ELF executable (no `PT_INTERP` program header).
fn check_static(path: &Path) -> Result<(), BuildError> {
    let missing = |why: &str| BuildError::ToolMissing {
        tool: format!("static busybox at {} ({why})", path.display()),
        hint: BUSYBOX_HINT.to_string(),
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing("not found")),
        Err(e) => return Err(io(path, "read")(e)),
    };
    match is_static_elf(&bytes) {
        Some(true) => Ok(()),
        Some(false) => Err(missing("dynamically linked")),
        None => Err(missing("not a 64-bit ELF file")),
    }
}

/// `Some(true)` for a 64-bit little-endian ELF without `PT_INTERP`, `Some(false)` with one,
/// `None` if it is not such an ELF file.
fn is_static_elf(b: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8).map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        })
    };
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    if phentsize < 4 {
        return None;
    }
    for i in 0..phnum {
        let p_type = u32_at(phoff.checked_add(i.checked_mul(phentsize)?)?)?;
        if p_type == PT_INTERP {
            return Some(false);
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_static_and_dynamic_elves() {
        // This test binary is dynamically linked (Rust's default on glibc).
        let me = std::fs::read("/proc/self/exe").expect("read self");
        assert_eq!(is_static_elf(&me), Some(false));
        assert_eq!(is_static_elf(b"#!/bin/sh\n"), None);
        assert_eq!(is_static_elf(b""), None);
    }
}
