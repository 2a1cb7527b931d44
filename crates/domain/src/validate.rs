//! Validation of names a client sends: environment variables, metadata, paths, the names of
//! templates and volumes.

use std::collections::BTreeMap;

use crate::InvalidInput;

/// Longest template or volume name, bytes.
pub const MAX_RESOURCE_NAME: usize = 63;

/// Checks a template or volume name: 1 to 63 of `[a-z0-9_-]`, starting with a letter or digit
/// (names appear in paths and on command lines).
pub fn resource_name(field: &str, name: &str) -> Result<(), InvalidInput> {
    let ok = !name.is_empty()
        && name.len() <= MAX_RESOURCE_NAME
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::new(
            field,
            "must be 1 to 63 of [a-z0-9_-], starting with a letter or digit",
        ))
    }
}

/// Largest value of one environment variable in bytes (128 KiB, Linux's `MAX_ARG_STRLEN`).
pub const MAX_ENV_VALUE_BYTES: usize = 128 * 1024;

/// Checks environment names against `[A-Za-z_][A-Za-z0-9_]*` and values for NUL, so that a name
/// such as `X;touch /tmp/pwn` or `A=B` is refused before anything runs.
pub fn env(field: &str, env: &BTreeMap<String, String>) -> Result<(), InvalidInput> {
    for (name, value) in env {
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(InvalidInput::new(
                format!("{field}.{name}"),
                "environment variable names must match [A-Za-z_][A-Za-z0-9_]*",
            ));
        }
        if value.contains('\0') {
            return Err(InvalidInput::new(
                format!("{field}.{name}"),
                "value contains NUL",
            ));
        }
        if value.len() > MAX_ENV_VALUE_BYTES {
            return Err(InvalidInput::new(
                format!("{field}.{name}"),
                format!("value is longer than {MAX_ENV_VALUE_BYTES} bytes"),
            ));
        }
    }
    Ok(())
}

/// Checks metadata: at most 64 keys, keys 1–256 bytes, values at most 4096 bytes.
pub fn metadata(m: &BTreeMap<String, String>) -> Result<(), InvalidInput> {
    if m.len() > 64 {
        return Err(InvalidInput::new("metadata", "at most 64 keys"));
    }
    for (k, v) in m {
        if k.is_empty() || k.len() > 256 {
            return Err(InvalidInput::new("metadata", "keys must be 1 to 256 bytes"));
        }
        if v.len() > 4096 {
            return Err(InvalidInput::new(
                format!("metadata.{k}"),
                "at most 4096 bytes",
            ));
        }
    }
    Ok(())
}

/// Checks a sandbox path: non-empty, no NUL, at most 4096 bytes, no component over 255 bytes.
pub fn path(field: &str, p: &[u8]) -> Result<(), InvalidInput> {
    if p.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    if p.contains(&0) {
        return Err(InvalidInput::new(field, "must not contain NUL"));
    }
    if p.len() > 4096 {
        return Err(InvalidInput::new(field, "is longer than 4096 bytes"));
    }
    if p.split(|&b| b == b'/').any(|c| c.len() > 255) {
        return Err(InvalidInput::new(
            field,
            "has a component longer than 255 bytes",
        ));
    }
    Ok(())
}

/// Checks a user name as it may appear in `/etc/passwd`.
pub fn user(field: &str, u: &str) -> Result<(), InvalidInput> {
    let ok = !u.is_empty()
        && u.len() <= 32
        && u.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        && !u.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::new(field, "is not a valid user name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        let ok: BTreeMap<_, _> = [("A_1".to_string(), "x\n$HOME".to_string())].into();
        assert!(env("env", &ok).is_ok());
        for bad in ["1BAD", "A=B", "X;touch /tmp/pwn", ""] {
            let m: BTreeMap<_, _> = [(bad.to_string(), "x".to_string())].into();
            assert!(env("env", &m).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths() {
        assert!(path("path", b"/tmp/a b\n").is_ok());
        assert!(path("path", b"/tmp/a\0b").is_err());
        assert!(path("path", &[b'a'; 256]).is_err());
    }
}
