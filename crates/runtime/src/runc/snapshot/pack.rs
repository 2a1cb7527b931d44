//! Packing an overlay upper directory into a tar stream (blocking).
//!
//! Kept per entry: type, mode, owner, mtime, symlink targets, hard links (as tar links),
//! extended attributes (PAX `SCHILY.xattr.*` records; this carries overlayfs's
//! `trusted.overlay.opaque` on opaque directories and `security.capability`), and character
//! devices with their numbers (overlayfs whiteouts are `0:0` character devices). Sockets are
//! skipped: they mean nothing once their process is gone.

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use tar::{Builder, EntryType, Header};

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

/// [`pack`] of a tree whose owners are host ids of the range starting at `range` (a sandbox
/// in a user namespace): the archive holds container ids (`id - range`), so it restores into
/// any range or none.
pub(crate) fn pack_relative<W: Write>(root: &Path, out: W, range: Option<u32>) -> io::Result<u64> {
    let relative = |id: u64| match range {
        Some(r) => u32::try_from(id)
            .ok()
            .and_then(|id| crate::runc::shift::shifted(id, 0, r))
            .map_or(id, u64::from),
        None => id,
    };
    let mut builder = Builder::new(out);
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut bytes = 0u64;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let mut names: Vec<_> = std::fs::read_dir(&dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        // Reverse so that popping keeps the sorted order for subdirectories.
        let mut subdirs = Vec::new();
        for name in names {
            let rel_path = rel.join(&name);
            let path = root.join(&rel_path);
            let meta = std::fs::symlink_metadata(&path)?;
            let ft = meta.file_type();
            if ft.is_socket() {
                continue;
            }
            append_xattrs(&mut builder, &path)?;
            let mut header = Header::new_gnu();
            header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
            header.set_uid(relative(u64::from(meta.uid())));
            header.set_gid(relative(u64::from(meta.gid())));
            header.set_size(0);
            if ft.is_dir() {
                header.set_entry_type(EntryType::Directory);
                builder.append_data(&mut header, &rel_path, io::empty())?;
                subdirs.push(rel_path);
            } else if ft.is_symlink() {
                header.set_entry_type(EntryType::Symlink);
                let target = std::fs::read_link(&path)?;
                builder.append_link(&mut header, &rel_path, &target)?;
            } else if ft.is_file() {
                let key = (meta.dev(), meta.ino());
                if meta.nlink() > 1 {
                    if let Some(first) = links.get(&key) {
                        header.set_entry_type(EntryType::Link);
                        builder.append_link(&mut header, &rel_path, first)?;
                        continue;
                    }
                    links.insert(key, rel_path.clone());
                }
                header.set_entry_type(EntryType::Regular);
                header.set_size(meta.len());
                let file = std::fs::File::open(&path)?;
                // Bound by the size recorded in the header, even if the file grows meanwhile.
                let mut reader = io::Read::take(file, meta.len());
                builder.append_data(
                    &mut header,
                    &rel_path,
                    &mut PadTo::new(&mut reader, meta.len()),
                )?;
                bytes += meta.len();
            } else if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() {
                let kind = if ft.is_char_device() {
                    EntryType::Char
                } else if ft.is_block_device() {
                    EntryType::Block
                } else {
                    EntryType::Fifo
                };
                header.set_entry_type(kind);
                let rdev = meta.rdev();
                header.set_device_major(nix::sys::stat::major(rdev) as u32)?;
                header.set_device_minor(nix::sys::stat::minor(rdev) as u32)?;
                builder.append_data(&mut header, &rel_path, io::empty())?;
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    builder.into_inner()?.flush()?;
    Ok(bytes)
}

/// Writes a PAX header with the extended attributes of `path` (not following symlinks), when it
/// has any with a UTF-8 name.
fn append_xattrs<W: Write>(builder: &mut Builder<W>, path: &Path) -> io::Result<()> {
    let names = match xattr::list(path) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut records: Vec<(String, Vec<u8>)> = Vec::new();
    for name in names {
        let Some(name) = name.to_str() else { continue };
        if let Some(value) = xattr::get(path, name)? {
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
