//! Unpacking a snapshot tar stream into an empty overlay upper directory (blocking).
//!
//! The inverse of `pack.rs`: directories, files, symlinks, hard links, character/block devices
//! (overlayfs whiteouts) and FIFOs, with owner, mode, file mtimes and extended attributes.
//! Entry paths must be relative and stay below the target: `..`, absolute paths, and paths
//! through a symlink are refused, so a tampered snapshot cannot write outside the sandbox; hard
//! links must name a target inside it, and metadata entries (long names, PAX headers) larger
//! than 1 MiB are refused before they are read into memory (`guard.rs`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use tar::{Archive, EntryType};
use tracing::debug;

use super::pack::{XATTR_HEX_PAX_PREFIX, XATTR_PAX_PREFIX};

/// Buffer of file content copies (1 MiB).
const COPY_BUF_BYTES: usize = 1 << 20;

/// Unpacks the tar stream `input` into `root` (which must exist); returns the number of file
/// content bytes written.
pub fn unpack<R: Read>(input: R, root: &Path) -> io::Result<u64> {
    let mut archive = Archive::new(super::guard::HeaderGuard::new(input));
    let mut bytes = 0u64;
    let mut buf = vec![0u8; COPY_BUF_BYTES];
    for entry in archive.entries()? {
        let mut entry = entry?;
        let rel = safe_relative(&entry.path()?)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dst = root.join(&rel);
        check_parents(root, &rel)?;
        let xattrs = pax_xattrs(&mut entry)?;
        let header = entry.header().clone();
        let mode = header.mode()? & 0o7777;
        let (uid, gid) = (header.uid()? as u32, header.gid()? as u32);
        let kind = header.entry_type();
        remove_existing(&dst, kind)?;
        match kind {
            EntryType::Directory => {
                if !dst.is_dir() {
                    std::fs::create_dir(&dst)?;
                }
            }
            EntryType::Regular | EntryType::Continuous => {
                let mut file = std::fs::File::create(&dst)?;
                bytes += copy_large(&mut entry, &mut file, &mut buf)?;
                let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(header.mtime()?);
                file.set_modified(mtime)?;
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| invalid("symlink entry without a target"))?;
                std::os::unix::fs::symlink(target, &dst)?;
            }
            EntryType::Link => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| invalid("hard link entry without a target"))?;
                let target = safe_relative(&target)?;
                check_parents(root, &target)?;
                std::fs::hard_link(root.join(target), &dst)?;
                // A hard link shares the first entry's owner, mode and attributes.
                continue;
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let flag = match kind {
                    EntryType::Char => SFlag::S_IFCHR,
                    EntryType::Block => SFlag::S_IFBLK,
                    _ => SFlag::S_IFIFO,
                };
                let major = u64::from(header.device_major()?.unwrap_or(0));
                let minor = u64::from(header.device_minor()?.unwrap_or(0));
                mknod(
                    &dst,
                    flag,
                    Mode::from_bits_truncate(mode),
                    makedev(major, minor),
                )
                .map_err(io::Error::from)?;
            }
            other => {
                debug!(kind = ?other, path = %rel.display(), "skipping unsupported tar entry");
                continue;
            }
        }
        std::os::unix::fs::lchown(&dst, Some(uid), Some(gid))?;
        if kind != EntryType::Symlink {
            // After chown, which clears set-id bits.
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode))?;
        }
        for (name, value) in &xattrs {
            if let Err(e) = xattr::set(&dst, name, value) {
                debug!(path = %rel.display(), xattr = %name, error = %e, "cannot restore xattr");
            }
        }
    }
    Ok(bytes)
}

/// Copies `from` to `to` through `buf` (large reads and writes: few system calls per file).
fn copy_large(from: &mut impl Read, to: &mut impl Write, buf: &mut [u8]) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// The extended attributes in the entry's PAX records.
fn pax_xattrs<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<HashMap<String, Vec<u8>>> {
    let mut out = HashMap::new();
    if let Some(exts) = entry.pax_extensions()? {
        for ext in exts {
            let ext = ext?;
            let Ok(key) = ext.key() else { continue };
            if let Some(name) = key.strip_prefix(XATTR_PAX_PREFIX) {
                out.insert(name.to_string(), ext.value_bytes().to_vec());
            } else if let Some(name) = key.strip_prefix(XATTR_HEX_PAX_PREFIX) {
                let hex = ext.value_bytes();
                let value: Option<Vec<u8>> = (0..hex.len())
                    .step_by(2)
                    .map(|i| {
                        hex.get(i..i + 2)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                    })
                    .collect();
                let value = value.ok_or_else(|| invalid("malformed hex xattr in snapshot"))?;
                out.insert(name.to_string(), value);
            }
        }
    }
    Ok(out)
}

/// `path` as a plain relative path: `.` components dropped; `..`, roots and prefixes refused.
pub(super) fn safe_relative(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => {
                return Err(invalid(&format!(
                    "unsafe path in snapshot: {}",
                    path.display()
                )))
            }
        }
    }
    Ok(out)
}

/// Refuses a path whose existing parents (below `root`) include a symlink or a non-directory.
fn check_parents(root: &Path, rel: &Path) -> io::Result<()> {
    let mut at = root.to_path_buf();
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    for c in parent.components() {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at)?;
        if !meta.is_dir() {
            return Err(invalid(&format!(
                "snapshot path goes through a non-directory: {}",
                rel.display()
            )));
        }
    }
    Ok(())
}

/// Makes room for an entry at `dst`: an existing directory stays for a directory entry;
/// anything else already there is removed (a later entry wins, as with `tar -x`).
fn remove_existing(dst: &Path, kind: EntryType) -> io::Result<()> {
    match std::fs::symlink_metadata(dst) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => {
            if kind == EntryType::Directory {
                Ok(())
            } else {
                std::fs::remove_dir_all(dst)
            }
        }
        Ok(_) => std::fs::remove_file(dst),
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}
