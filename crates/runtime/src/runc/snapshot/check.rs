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
        // The numeric fields restore reads: a header without them is refused here, at import,
        // not found out when a sandbox starts from it.
        let special = matches!(
            header.entry_type(),
            EntryType::Char | EntryType::Block | EntryType::Fifo
        );
        let numeric = header.mode().is_ok()
            && header.uid().is_ok()
            && header.gid().is_ok()
            && header.mtime().is_ok()
            && (!special || (header.device_major().is_ok() && header.device_minor().is_ok()));
        if !numeric {
            return Err(refused("has a malformed header", &rel));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar entry with a raw name and link (no checks, so `..` and `/` can be written).
    fn raw(out: &mut Vec<u8>, name: &str, kind: EntryType, link: &str, dev: (u32, u32)) {
        let mut h = tar::Header::new_ustar();
        {
            let old = h.as_old_mut();
            old.name[..name.len()].copy_from_slice(name.as_bytes());
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_entry_type(kind);
        let data: &[u8] = if kind == EntryType::Regular {
            b"data"
        } else {
            b""
        };
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_device_major(dev.0).expect("major");
        h.set_device_minor(dev.1).expect("minor");
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }

    /// One entry: name, type, link target, device numbers.
    type Entry<'a> = (&'a str, EntryType, &'a str, (u32, u32));

    fn tar_of(entries: &[Entry<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, link, dev) in entries {
            raw(&mut out, name, *kind, link, *dev);
        }
        out.extend_from_slice(&[0u8; 1024]);
        out
    }

    const R: EntryType = EntryType::Regular;
    const NO: (u32, u32) = (0, 0);

    #[test]
    fn ordinary_upper_dirs_pass() {
        let ok = tar_of(&[
            ("home/", EntryType::Directory, "", NO),
            ("home/f", R, "", NO),
            ("home/h", EntryType::Link, "home/f", NO),
            ("home/abs", EntryType::Symlink, "/usr/bin/python3", NO),
            ("home/rel", EntryType::Symlink, "../etc/hosts", NO),
            ("home/wh", EntryType::Char, "", NO),
            ("home/fifo", EntryType::Fifo, "", NO),
        ]);
        assert_eq!(check(ok.as_slice()).expect("accepted"), 4);
    }

    #[test]
    fn hostile_entries_are_refused() {
        let cases: &[(&str, &[Entry<'_>])] = &[
            ("dot-dot", &[("../x", R, "", NO)]),
            ("absolute", &[("/etc/x", R, "", NO)]),
            ("symlink out", &[("a/l", EntryType::Symlink, "../../x", NO)]),
            (
                "through a symlink",
                &[("l", EntryType::Symlink, "/", NO), ("l/x", R, "", NO)],
            ),
            (
                "hard link out",
                &[("h", EntryType::Link, "../etc/passwd", NO)],
            ),
            (
                "hard link to nothing",
                &[("h", EntryType::Link, "missing", NO)],
            ),
            ("block device", &[("sda", EntryType::Block, "", (8, 0))]),
            ("char device", &[("mem", EntryType::Char, "", (1, 1))]),
        ];
        for (what, entries) in cases {
            let e = check(tar_of(entries).as_slice()).expect_err(what);
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
        }
    }

    #[test]
    fn a_symlink_replaced_by_a_directory_no_longer_blocks() {
        let ok = tar_of(&[
            ("d", EntryType::Symlink, "/", NO),
            ("d", EntryType::Directory, "", NO),
            ("d/x", R, "", NO),
        ]);
        assert!(check(ok.as_slice()).is_ok());
    }
}
