//! Checking and normalizing request paths.
//!
//! A path must be non-empty, hold no NUL byte and no component longer than 255 bytes
//! (`InvalidArgument`). A relative path is resolved against the user's home. The result is
//! normalized lexically: empty and `.` components are dropped and `..` removes the previous
//! component (never above `/`), so `/tmp/../../etc` is `/etc`. Symlinks are left to the kernel,
//! which resolves them inside the sandbox's root.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cove_guest_protocol::GuestPath;

use crate::error::AgentError;

/// Longest path component in bytes (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// Longest normalized path in bytes (`PATH_MAX` - 1).
pub const MAX_PATH_BYTES: usize = 4095;

/// A path for messages (lossy UTF-8).
pub fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The absolute, normalized path of a request.
pub fn resolve(path: &GuestPath, home: &Path) -> Result<PathBuf, AgentError> {
    let bytes = path.0.as_slice();
    let shown = String::from_utf8_lossy(bytes);
    if bytes.is_empty() {
        return Err(AgentError::invalid("path is empty"));
    }
    if bytes.contains(&0) {
        return Err(AgentError::invalid(format!(
            "path {shown:?} contains a NUL byte"
        )));
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    let base: &[u8] = if bytes.starts_with(b"/") {
        b""
    } else {
        home.as_os_str().as_bytes()
    };
    for part in base
        .split(|&b| b == b'/')
        .chain(bytes.split(|&b| b == b'/'))
    {
        match part {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            p if p.len() > MAX_NAME_BYTES => {
                return Err(AgentError::invalid(format!(
                    "path {shown:?} has a component longer than {MAX_NAME_BYTES} bytes"
                )));
            }
            p => parts.push(p),
        }
    }
    let mut out = Vec::with_capacity(bytes.len() + base.len() + 1);
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    if out.len() > MAX_PATH_BYTES {
        return Err(AgentError::invalid(format!("path {shown:?} is too long")));
    }
    Ok(PathBuf::from(OsStr::from_bytes(&out)))
}

/// The wire form of a path.
pub fn to_guest(path: &Path) -> GuestPath {
    GuestPath(path.as_os_str().as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cove_guest_protocol::ErrorCode;

    fn r(p: &[u8]) -> Result<PathBuf, AgentError> {
        resolve(&GuestPath(p.to_vec()), Path::new("/home/user"))
    }

    #[test]
    fn normalizes() {
        assert_eq!(
            r(b"/tmp/../../../../tmp/trav").expect("ok"),
            PathBuf::from("/tmp/trav")
        );
        assert_eq!(
            r(b"/etc/./../etc/hostname").expect("ok"),
            PathBuf::from("/etc/hostname")
        );
        assert_eq!(r(b"a/b/").expect("ok"), PathBuf::from("/home/user/a/b"));
        assert_eq!(r(b"../../..").expect("ok"), PathBuf::from("/"));
        assert_eq!(r(b"//x//y").expect("ok"), PathBuf::from("/x/y"));
        assert_eq!(r(b"/").expect("ok"), PathBuf::from("/"));
        // Percent signs are ordinary bytes here (decoding is the HTTP layer's job).
        assert_eq!(
            r(b"..%2fetc").expect("ok"),
            PathBuf::from("/home/user/..%2fetc")
        );
        let odd = r(b"/tmp/\xff\nname").expect("ok");
        assert_eq!(odd.as_os_str().as_bytes(), b"/tmp/\xff\nname");
    }

    #[test]
    fn rejects() {
        for bad in [&b""[..], b"/a\0b", &[b'a'; 256][..]] {
            assert_eq!(r(bad).expect_err("bad").code, ErrorCode::InvalidArgument);
        }
        assert!(r(&[b'a'; 255]).is_ok());
        let long: Vec<u8> = std::iter::repeat_n(b"/abcdefgh".as_slice(), 500)
            .flatten()
            .copied()
            .collect();
        assert_eq!(r(&long).expect_err("long").code, ErrorCode::InvalidArgument);
    }
}
