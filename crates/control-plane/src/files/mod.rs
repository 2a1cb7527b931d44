//! Files in a sandbox: streamed upload and download ([`transfer`]; a multi-file upload is one
//! [`ControlPlane::write_file`] per part), stat, exists, list, mkdir, move, remove ([`ops`]),
//! watching a directory ([`watch`]), and extended attributes ([`xattrs`]).
//!
//! Paths travel as bytes: the services take a [`SandboxPath`] (a REST request names it as
//! UTF-8, `path`, or as base64 bytes, `path_b64`, which [`guest_path`] decodes); answers
//! render bytes that are not UTF-8 lossily and add the exact bytes as `*_b64` (see
//! `cove_api_types::file`). The guest agent resolves every path inside the
//! sandbox's own root; this layer only checks the shape (no NUL, components of at most 255
//! bytes, at most 4096 bytes in all).

mod ops;
mod transfer;
mod watch;
mod xattrs;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use cove_api_types::{FileInfo, FileType};
use cove_domain::{validate, InvalidInput};
use cove_node_api::SandboxPath;

use crate::ServiceError;

pub use ops::ListOptions;
pub use transfer::{ReadOptions, WriteOptions};
pub use watch::WatchOptions;

/// The path a request names, from its UTF-8 form or its base64 form (exactly one), checked
/// as the services check a [`SandboxPath`]. `field` names the UTF-8 form in errors (`path`,
/// `from`, `to`). The REST routes decode their `path`/`path_b64` query pairs with it, the
/// services the same pairs in JSON bodies (`MakeDirRequest`, `MoveRequest`).
pub fn guest_path(
    field: &str,
    text: Option<String>,
    b64: Option<String>,
) -> Result<SandboxPath, ServiceError> {
    let bytes = match (text, b64) {
        (Some(t), None) => t.into_bytes(),
        (None, Some(b)) => B64.decode(b.trim()).map_err(|e| {
            InvalidInput::new(format!("{field}_b64"), format!("is not valid base64: {e}"))
        })?,
        (None, None) => {
            return Err(InvalidInput::new(field, format!("give {field} or {field}_b64")).into())
        }
        (Some(_), Some(_)) => {
            return Err(InvalidInput::new(
                field,
                format!("give only one of {field} and {field}_b64"),
            )
            .into())
        }
    };
    checked(field, SandboxPath(bytes))
}

/// A path a service was given, checked for its shape (no NUL, components of at most 255
/// bytes, at most 4096 bytes in all); `field` names it in errors.
pub(crate) fn checked(field: &str, path: SandboxPath) -> Result<SandboxPath, ServiceError> {
    validate::path(field, &path.0)?;
    Ok(path)
}

/// Parses a mode: octal with a leading `0` or `0o` (`0644`, `0o644`), else decimal (`420`);
/// at most `0o7777`.
pub(crate) fn parse_mode(s: &str) -> Result<u32, ServiceError> {
    let bad = || {
        InvalidInput::new(
            "mode",
            "use octal (0644, 0o644) or decimal (420), at most 0o7777",
        )
    };
    let s = s.trim();
    let parsed = if let Some(oct) = s.strip_prefix("0o") {
        u32::from_str_radix(oct, 8)
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8)
    } else {
        s.parse::<u32>()
    };
    match parsed {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(bad().into()),
    }
}

/// Text for bytes that may not be UTF-8: the lossy string, and the exact bytes as base64 when
/// the lossy string differs from them.
pub(crate) fn text_and_b64(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(B64.encode(bytes)),
        ),
    }
}

pub(crate) fn to_api_type(t: cove_node_api::FileType) -> FileType {
    match t {
        cove_node_api::FileType::File => FileType::File,
        cove_node_api::FileType::Dir => FileType::Dir,
        cove_node_api::FileType::Symlink => FileType::Symlink,
        cove_node_api::FileType::Other => FileType::Other,
    }
}

/// Converts the guest's file metadata to the API's.
pub(crate) fn to_api(i: cove_node_api::FileInfo) -> FileInfo {
    use chrono::TimeZone;
    let (name, name_b64) = text_and_b64(&i.name.0);
    let (path, path_b64) = text_and_b64(&i.path.0);
    let (symlink_target, symlink_target_b64) = match i.symlink_target {
        Some(t) => {
            let (s, b) = text_and_b64(&t.0);
            (Some(s), b)
        }
        None => (None, None),
    };
    FileInfo {
        name,
        name_b64,
        path,
        path_b64,
        file_type: to_api_type(i.file_type),
        size: i.size,
        mode: i.mode,
        owner: i.owner,
        group: i.group,
        mtime: chrono::Utc
            .timestamp_millis_opt(i.mtime_ms)
            .single()
            .unwrap_or_default(),
        symlink_target,
        symlink_target_b64,
        uid: None,
        gid: None,
        atime: None,
        ctime: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_come_as_text_or_base64() {
        let p = guest_path("path", Some("/tmp/a b".into()), None).expect("text");
        assert_eq!(p.0, b"/tmp/a b");
        let p = guest_path("path", None, Some(B64.encode(b"/tmp/\xff\n"))).expect("b64");
        assert_eq!(p.0, b"/tmp/\xff\n");
        for (t, b) in [
            (None, None),
            (Some("/a".to_string()), Some("L2E=".to_string())),
            (None, Some("not base64!".to_string())),
            (Some("/a\0b".to_string()), None),
            (Some(format!("/{}", "x".repeat(256))), None),
        ] {
            let err = guest_path("path", t, b).expect_err("refused");
            assert_eq!(err.code(), cove_api_types::ErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn modes_are_octal_or_decimal() {
        assert_eq!(parse_mode("0644").ok(), Some(0o644));
        assert_eq!(parse_mode("0o755").ok(), Some(0o755));
        assert_eq!(parse_mode("420").ok(), Some(0o644));
        assert_eq!(parse_mode("0").ok(), Some(0));
        assert!(parse_mode("0999").is_err());
        assert!(parse_mode("70000").is_err());
        assert!(parse_mode("rw").is_err());
    }

    #[test]
    fn non_utf8_names_carry_their_bytes() {
        assert_eq!(text_and_b64(b"plain"), ("plain".to_string(), None));
        let (t, b) = text_and_b64(b"a\xffb");
        assert_eq!(t, "a\u{fffd}b");
        assert_eq!(B64.decode(b.expect("b64")).expect("decode"), b"a\xffb");
    }
}
