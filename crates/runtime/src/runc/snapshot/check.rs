//! Checking a snapshot tar stream that came from outside (an imported checkpoint archive)
//! before anything of it is kept (blocking).
//!
//! Accepted: directories, regular files, FIFOs, overlayfs whiteouts (character device 0:0),
//! hard links to an earlier entry, and symlinks whose target does not climb above the
//! archive's root (absolute targets resolve inside the sandbox's root). Refused: `..` or
//! absolute entry paths, entries below a symlink, hard links to anything but an earlier
//! file, every other device, and every other entry type. [`unpack`](super::unpack) enforces
//! the path rules again when the snapshot is restored.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use tar::{Archive, EntryType};

use super::unpack::safe_relative;

/// Reads the whole tar stream `input`, refusing it at the first entry that breaks the rules
/// above (`InvalidData`, naming the entry); returns the file content bytes it holds.
pub fn check<R: Read>(input: R) -> io::Result<u64> {
    let mut archive = Archive::new(input);
    let mut symlinks: HashSet<PathBuf> = HashSet::new();
    let mut files: HashSet<PathBuf> = HashSet::new();
    let mut bytes = 0u64;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw = entry.path()?.into_owned();
        let rel = safe_relative(&raw)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        if rel.ancestors().skip(1).any(|a| symlinks.contains(a)) {
            return Err(refused("goes through a symlink", &rel));
        }
        let header = entry.header().clone();
        match header.entry_type() {
            EntryType::Directory | EntryType::Fifo => {}
            EntryType::Regular | EntryType::Continuous => {
                bytes += io::copy(&mut entry, &mut io::sink())?;
                files.insert(rel.clone());
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| refused("is a symlink without a target", &rel))?;
                if climbs_out(&rel, &target) {
                    return Err(refused("is a symlink out of the sandbox", &rel));
                }
                symlinks.insert(rel.clone());
            }
            EntryType::Link => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| refused("is a hard link without a target", &rel))?;
                let target = safe_relative(&target)
                    .map_err(|_| refused("is a hard link out of the sandbox", &rel))?;
                if !files.contains(&target) {
                    return Err(refused("is a hard link to no earlier file", &rel));
                }
                files.insert(rel.clone());
            }
            EntryType::Char => {
                let major = header.device_major()?.unwrap_or(0);
                let minor = header.device_minor()?.unwrap_or(0);
                if (major, minor) != (0, 0) {
                    return Err(refused("is a device", &rel));
                }
            }
            EntryType::Block => return Err(refused("is a device", &rel)),
            _ => return Err(refused("has an unsupported entry type", &rel)),
        }
        if header.entry_type() != EntryType::Symlink {
            // A later entry replaces an earlier symlink of the same path.
            symlinks.remove(&rel);
        }
    }
    Ok(bytes)
}

/// Whether symlink `link` (a relative entry path) with `target` points above the root: a
/// relative target with more `..` than the link has parents at that point.
fn climbs_out(link: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth = link.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

fn refused(why: &str, rel: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("archive entry {} {why}", rel.display()),
    )
}
