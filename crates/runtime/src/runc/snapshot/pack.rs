//! Packing an overlay upper directory into a tar stream (blocking).
//!
//! Kept per entry: type, mode, owner, mtime, symlink targets, hard links (as tar links),
//! extended attributes (PAX `SCHILY.xattr.*` records; this carries overlayfs's
//! `trusted.overlay.opaque` on opaque directories and `security.capability`), and character
//! devices with their numbers (overlayfs whiteouts are `0:0` character devices). Sockets are
//! skipped: they mean nothing once their process is gone.
//!
//! The tree is the sandbox's own: every access goes through `cove_confine` and plain path
//! calls are denied in this module.
#![deny(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use cove_confine::Tree;
use rustix::fs::FileType;
use tar::{Builder, EntryType, Header};
use xattr::FileExt as _;

/// PAX record prefix of an extended attribute (the GNU tar / libarchive convention).
pub(crate) const XATTR_PAX_PREFIX: &str = "SCHILY.xattr.";
/// PAX record prefix of an extended attribute whose value holds a newline, written as hex: the
/// `tar` crate reads PAX records line by line, so a raw newline (as in overlayfs's binary
/// `trusted.overlay.origin` file handles, at random) would make the archive unreadable.
pub(crate) const XATTR_HEX_PAX_PREFIX: &str = "COVE.xattr-hex.";

/// Writes every entry under `root` (not `root` itself) as a tar stream into `out`; returns the
/// number of file content bytes written.
pub fn pack<W: Write>(root: &Path, out: W) -> io::Result<u64> {
    pack_relative(root, out, None)
}

/// Most entries one snapshot packs: the tree is a tenant's, so the walk has a bound.
const MAX_PACK_ENTRIES: u64 = 50_000_000;

/// [`pack`] of a tree whose owners are host ids of the range starting at `range` (a sandbox
/// in a user namespace): the archive holds container ids (`id - range`), so it restores into
/// any range or none.
///
/// The tree is the sandbox's own (its root may change it while a checkpoint packs it): every
/// access goes through [`Tree`], so no link is followed, no FIFO or device is opened, and an
/// entry swapped for a link or a FIFO between listing and reading is skipped, not read through.
/// Extended attributes are kept for directories and regular files (read through their own
/// descriptors); symlinks, devices and FIFOs carry none.
pub(crate) fn pack_relative<W: Write>(root: &Path, out: W, range: Option<u32>) -> io::Result<u64> {
    let relative = |id: u32| match range {
        Some(r) => crate::runc::shift::shifted(id, 0, r).unwrap_or(id),
        None => id,
    };
    let mut builder = Builder::new(out);
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut bytes = 0u64;
    let mut seen = 0u64;
    // Pending directories are (parent, name, path) and opened when their turn comes: the
    // descriptors held at once follow the tree's depth, not a directory's width.
    let mut stack: Vec<(Rc<Tree>, Option<PathBuf>, PathBuf)> =
        vec![(Rc::new(Tree::open(root)?), None, PathBuf::new())];
    while let Some((parent, name, rel)) = stack.pop() {
        let dir = match name {
            None => parent,
            Some(name) => match parent.open_dir(&name) {
                Ok(dir) => Rc::new(dir),
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e.into()),
            },
        };
        let mut names = dir.names()?;
        names.sort_by(|a, b| a.0.cmp(&b.0));
        // Reverse so that popping keeps the sorted order for subdirectories.
        let mut subdirs = Vec::new();
        for (name, _) in names {
            seen += 1;
            if seen > MAX_PACK_ENTRIES {
                return Err(cove_confine::Error::TooMany {
                    max: MAX_PACK_ENTRIES,
                }
                .into());
            }
            let name = Path::new(OsStr::from_bytes(name.to_bytes()));
            let rel_path = rel.join(name);
            let Some(meta) = dir.stat(name)? else {
                continue;
            };
            let mut header = Header::new_gnu();
            header.set_mode(meta.mode);
            header.set_uid(u64::from(relative(meta.uid)));
            header.set_gid(u64::from(relative(meta.gid)));
            header.set_mtime(u64::try_from(meta.mtime).unwrap_or(0));
            header.set_size(0);
            match meta.kind {
                FileType::Directory => {
                    let sub = match dir.open_dir(name) {
                        Ok(sub) => sub,
                        Err(e) if vanished(&e) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    append_xattrs(&mut builder, &sub.as_file()?)?;
                    drop(sub);
                    header.set_entry_type(EntryType::Directory);
                    builder.append_data(&mut header, &rel_path, io::empty())?;
                    subdirs.push((dir.clone(), Some(name.to_path_buf()), rel_path));
                }
                FileType::Symlink => {
                    let target = match dir.read_link(name) {
                        Ok(target) => target,
                        Err(e) if vanished(&e) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    header.set_entry_type(EntryType::Symlink);
                    builder.append_link(&mut header, &rel_path, &target)?;
                }
                FileType::RegularFile => {
                    let key = (meta.dev, meta.ino);
                    if meta.nlink > 1 {
                        if let Some(first) = links.get(&key) {
                            header.set_entry_type(EntryType::Link);
                            builder.append_link(&mut header, &rel_path, first)?;
                            continue;
                        }
                    }
                    let file = match dir.open_file(name) {
                        Ok(file) => file,
                        Err(e) if vanished(&e) => continue,
                        Err(e) => return Err(e.into()),
                    };
                    let len = file.metadata()?.len();
                    if meta.nlink > 1 {
                        links.insert(key, rel_path.clone());
                    }
                    append_xattrs(&mut builder, &file)?;
                    header.set_entry_type(EntryType::Regular);
                    header.set_size(len);
                    // Bound by the size recorded in the header, even if the file grows meanwhile.
                    let mut reader = io::Read::take(file, len);
                    builder.append_data(
                        &mut header,
                        &rel_path,
                        &mut PadTo::new(&mut reader, len),
                    )?;
                    bytes += len;
                }
                FileType::CharacterDevice | FileType::BlockDevice | FileType::Fifo => {
                    let kind = match meta.kind {
                        FileType::CharacterDevice => EntryType::Char,
                        FileType::BlockDevice => EntryType::Block,
                        _ => EntryType::Fifo,
                    };
                    header.set_entry_type(kind);
                    header.set_device_major(nix::sys::stat::major(meta.rdev) as u32)?;
                    header.set_device_minor(nix::sys::stat::minor(meta.rdev) as u32)?;
                    builder.append_data(&mut header, &rel_path, io::empty())?;
                }
                // Sockets mean nothing once their process is gone.
                _ => {}
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    builder.into_inner()?.flush()?;
    Ok(bytes)
}

/// Whether an entry changed under the walk (removed, or replaced by a link or another kind):
/// skipped, as if the pack had come a moment later.
fn vanished(e: &cove_confine::Error) -> bool {
    e.is_not_found()
        || matches!(
            e,
            cove_confine::Error::Link { .. } | cove_confine::Error::WrongKind { .. }
        )
}

/// Writes a PAX header with the extended attributes of the open `file` (a regular file or a
/// directory), when it has any with a UTF-8 name.
fn append_xattrs<W: Write>(builder: &mut Builder<W>, file: &std::fs::File) -> io::Result<()> {
    let names = match file.list_xattr() {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut records: Vec<(String, Vec<u8>)> = Vec::new();
    for name in names {
        let Some(name) = name.to_str() else { continue };
        if let Some(value) = file.get_xattr(name)? {
            if value.contains(&b'\n') {
                let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
                records.push((format!("{XATTR_HEX_PAX_PREFIX}{name}"), hex.into_bytes()));
            } else {
                records.push((format!("{XATTR_PAX_PREFIX}{name}"), value));
            }
        }
    }
    if records.is_empty() {
        return Ok(());
    }
    builder.append_pax_extensions(records.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
}

/// A reader that yields exactly `len` bytes: the inner reader's, then zeros if it ended early
/// (a file truncated while it was packed), so the archive stays well-formed.
struct PadTo<'a, R> {
    inner: &'a mut R,
    left: u64,
}

impl<'a, R: io::Read> PadTo<'a, R> {
    fn new(inner: &'a mut R, len: u64) -> Self {
        PadTo { inner, left: len }
    }
}

impl<R: io::Read> io::Read for PadTo<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.inner.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}
