//! Unpacking a snapshot tar stream into an empty overlay upper directory (blocking).
//!
//! The inverse of `pack.rs`: directories, files, symlinks, hard links, character/block devices
//! (overlayfs whiteouts) and FIFOs, with owner, mode, file mtimes and extended attributes.
//! Entry paths must be relative and stay below the target: `..`, absolute paths, and paths
//! through a symlink are refused, so a tampered snapshot cannot write outside the sandbox; hard
//! links must name a target inside it, and metadata entries (long names, PAX headers) larger
//! than 1 MiB are refused before they are read into memory (`guard.rs`).
//!
//! Every write goes through `cove_confine` (entries made with `O_EXCL`/`mkdirat`/`symlinkat`
//! under parents opened without following links); plain path calls are denied here.
#![deny(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use cove_confine::Tree;
use nix::sys::stat::makedev;
use rustix::fs::FileType;
use tar::{Archive, EntryType};
use tracing::debug;
use xattr::FileExt as _;

use super::pack::{XATTR_HEX_PAX_PREFIX, XATTR_PAX_PREFIX};

/// Buffer of file content copies (1 MiB).
const COPY_BUF_BYTES: usize = 1 << 20;

/// Unpacks the tar stream `input` into `root` (which must exist); returns the number of file
/// content bytes written.
pub fn unpack<R: Read>(input: R, root: &Path) -> io::Result<u64> {
    let tree = Tree::open(root)?;
    let mut archive = Archive::new(super::guard::HeaderGuard::new(input));
    let mut bytes = 0u64;
    let mut buf = vec![0u8; COPY_BUF_BYTES];
    for entry in archive.entries()? {
        let mut entry = entry?;
        let rel = safe_relative(&entry.path()?)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let xattrs = pax_xattrs(&mut entry)?;
        let header = entry.header().clone();
        let mode = header.mode()? & 0o7777;
        let (uid, gid) = (header.uid()? as u32, header.gid()? as u32);
        let kind = header.entry_type();
        remove_existing(&tree, &rel, kind)?;
        // Directories and files get their extended attributes through their own descriptor,
        // after chown (which would clear `security.capability`).
        let mut opened: Option<std::fs::File> = None;
        match kind {
            EntryType::Directory => {
                match tree.mkdir(&rel, 0o700) {
                    Ok(()) => {}
                    Err(e) if is_exists(&e) => {}
                    Err(e) => return Err(refuse_link(e, &rel)),
                }
                let dir = tree.open_dir(&rel).map_err(|e| refuse_link(e, &rel))?;
                opened = Some(dir.as_file().map_err(io::Error::from)?);
            }
            EntryType::Regular | EntryType::Continuous => {
                let mut file = tree
                    .create_new(&rel, 0o600)
                    .map_err(|e| refuse_link(e, &rel))?;
                bytes += copy_large(&mut entry, &mut file, &mut buf)?;
                let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(header.mtime()?);
                file.set_modified(mtime)?;
                opened = Some(file);
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| invalid("symlink entry without a target"))?;
                tree.symlink(&rel, &target)
                    .map_err(|e| refuse_link(e, &rel))?;
            }
            EntryType::Link => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| invalid("hard link entry without a target"))?;
                let target = safe_relative(&target)?;
                tree.hard_link(&target, &rel)
                    .map_err(|e| refuse_link(e, &rel))?;
                // A hard link shares the first entry's owner, mode and attributes.
                continue;
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let file_type = match kind {
                    EntryType::Char => FileType::CharacterDevice,
                    EntryType::Block => FileType::BlockDevice,
                    _ => FileType::Fifo,
                };
                let major = u64::from(header.device_major()?.unwrap_or(0));
                let minor = u64::from(header.device_minor()?.unwrap_or(0));
                tree.mknod(&rel, file_type, mode, makedev(major, minor))
                    .map_err(|e| refuse_link(e, &rel))?;
            }
            other => {
                debug!(kind = ?other, path = %rel.display(), "skipping unsupported tar entry");
                continue;
            }
        }
        tree.chown(&rel, Some(uid), Some(gid))
            .map_err(io::Error::from)?;
        // After chown, which clears set-id bits. FIFOs and devices keep the mode `mknod` gave
        // them (never opened to change it).
        if kind != EntryType::Symlink {
            tree.chmod(&rel, mode).map_err(io::Error::from)?;
        }
        if let Some(file) = opened {
            set_xattrs(&file, &xattrs, &rel);
        }
    }
    Ok(bytes)
}

/// Sets extended attributes on an entry through its own descriptor; one that cannot be set
/// (an unsupported name on this filesystem) is skipped.
fn set_xattrs(file: &std::fs::File, xattrs: &HashMap<String, Vec<u8>>, rel: &Path) {
    for (name, value) in xattrs {
        if let Err(e) = file.set_xattr(name, value) {
            debug!(path = %rel.display(), xattr = %name, error = %e, "cannot restore xattr");
        }
    }
}

fn is_exists(e: &cove_confine::Error) -> bool {
    matches!(e, cove_confine::Error::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists)
}

/// An entry whose path goes through a symlink or a non-directory is refused (`InvalidData`),
/// as a tampered snapshot's; other errors pass as they are.
fn refuse_link(e: cove_confine::Error, rel: &Path) -> io::Error {
    match e {
        cove_confine::Error::Link { .. } | cove_confine::Error::WrongKind { .. } => {
            invalid(&format!(
                "snapshot path goes through a non-directory: {}",
                rel.display()
            ))
        }
        other => other.into(),
    }
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

/// Makes room for an entry at `rel`: an existing directory stays for a directory entry;
/// anything else already there is removed (a later entry wins, as with `tar -x`).
fn remove_existing(tree: &Tree, rel: &Path, kind: EntryType) -> io::Result<()> {
    match tree.stat(rel) {
        Ok(None) => Ok(()),
        Ok(Some(meta)) if meta.is_dir() && kind == EntryType::Directory => Ok(()),
        Ok(Some(_)) => tree.remove(rel).map_err(|e| refuse_link(e, rel)),
        Err(e) => Err(refuse_link(e, rel)),
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}
