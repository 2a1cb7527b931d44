//! A bound on a snapshot's metadata entries, checked on the raw tar stream before the `tar`
//! crate sees it: that crate reads a GNU long name or link (`L`, `K`) and a PAX header (`x`,
//! `g`) whole into memory, so a tampered snapshot with a 4 GiB "long name" would make the node
//! allocate 4 GiB. [`HeaderGuard`] follows the stream's 512-byte framing (a header block, then
//! its data rounded up to a block) and fails the read with `InvalidData` as soon as a metadata
//! entry declares more than [`MAX_METADATA_BYTES`]. File contents pass unbounded (the disk
//! bounds them).

use std::io::{self, Read};

/// Largest GNU long name/link or PAX header accepted (1 MiB: paths are at most 4 KiB, and the
/// PAX records carry a file's extended attributes, 64 KiB each at most).
pub const MAX_METADATA_BYTES: u64 = 1 << 20;

const BLOCK: u64 = 512;

/// A reader of a tar stream that refuses oversized metadata entries.
pub struct HeaderGuard<R> {
    inner: R,
    /// Bytes of the current header block seen so far (when `data_left` is 0).
    header: Vec<u8>,
    /// Bytes of entry data (padded to blocks) still to pass before the next header.
    data_left: u64,
    /// The data of the PAX header being passed (bounded by [`MAX_METADATA_BYTES`]), kept to
    /// read its `size` record, which overrides the next entry's zero size as in the `tar`
    /// crate, so this guard's framing stays the crate's.
    pax: Option<Vec<u8>>,
    /// Unpadded bytes of the current PAX header still to collect.
    pax_left: u64,
    /// The `size` the last PAX header gave the next entry.
    pax_size: Option<u64>,
}

impl<R: Read> HeaderGuard<R> {
    /// Guards `inner`, which must be at the start of a tar stream.
    pub fn new(inner: R) -> Self {
        HeaderGuard {
            inner,
            header: Vec::with_capacity(BLOCK as usize),
            data_left: 0,
            pax: None,
            pax_left: 0,
            pax_size: None,
        }
    }

    /// Accounts `bytes` just read.
    fn track(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.data_left > 0 {
                let n = (self.data_left.min(bytes.len() as u64)) as usize;
                if let Some(pax) = &mut self.pax {
                    let keep = (self.pax_left.min(n as u64)) as usize;
                    pax.extend_from_slice(&bytes[..keep]);
                    self.pax_left -= keep as u64;
                }
                self.data_left -= n as u64;
                bytes = &bytes[n..];
                if self.data_left == 0 {
                    if let Some(pax) = self.pax.take() {
                        self.pax_size = pax_size(&pax);
                    }
                }
                continue;
            }
            let want = BLOCK as usize - self.header.len();
            let n = want.min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == BLOCK as usize {
                let size = match entry_size(&self.header)? {
                    // An end-of-archive block.
                    None => 0,
                    Some((s, b'x' | b'g')) => s,
                    Some((0, _)) => self.pax_size.take().unwrap_or(0),
                    Some((s, _)) => {
                        self.pax_size = None;
                        s
                    }
                };
                let typeflag = self.header[156];
                if typeflag == b'x' && size > 0 {
                    self.pax = Some(Vec::with_capacity(size as usize));
                    self.pax_left = size;
                }
                self.data_left = size.div_ceil(BLOCK) * BLOCK;
                self.header.clear();
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for HeaderGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.track(&buf[..n])?;
        Ok(n)
    }
}

/// The size field and type flag of one header block (`None` for an all-zero end block).
/// Errors: a metadata entry larger than [`MAX_METADATA_BYTES`], a malformed size.
fn entry_size(header: &[u8]) -> io::Result<Option<(u64, u8)>> {
    if header.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let size = parse_size(&header[124..136])?;
    let typeflag = header[156];
    let metadata = matches!(typeflag, b'L' | b'K' | b'x' | b'g' | b'X');
    if metadata && size > MAX_METADATA_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "snapshot metadata entry of {size} bytes (type {:?}) exceeds {MAX_METADATA_BYTES}",
                typeflag as char
            ),
        ));
    }
    Ok(Some((size, typeflag)))
}

/// The `size` record of a PAX header's data (`"<len> size=<n>\n"` records).
fn pax_size(data: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(data);
    text.lines().find_map(|rec| {
        let (_, kv) = rec.split_once(' ')?;
        kv.strip_prefix("size=")?.trim().parse().ok()
    })
}

/// The size field: octal digits (space/NUL padded), or GNU base-256 (high bit set).
fn parse_size(field: &[u8]) -> io::Result<u64> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed size in a tar header");
    if field[0] & 0x80 != 0 {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            v = v.checked_mul(256).ok_or_else(bad)? | u64::from(b);
        }
        return Ok(v);
    }
    let text = std::str::from_utf8(field).map_err(|_| bad())?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|_| bad())
}
