//! envd's path rules: an empty path is the user's home (the default workdir), `~` and `~/…`
//! expand to it, a relative path is joined to it, and the result is cleaned (`.`, `..`,
//! repeated slashes). `~other` is refused.

use crate::error::{ConnectCode, ConnectError};

/// The home directory of `user` in an E2B-style template (`/root` for root).
pub fn home_of(user: &str) -> String {
    if user == "root" {
        "/root".to_string()
    } else {
        format!("/home/{user}")
    }
}

/// Resolves `path` for `user` to a clean absolute path.
pub fn resolve(path: &str, user: &str) -> Result<String, ConnectError> {
    let home = home_of(user);
    let joined = if path.is_empty() || path == "~" {
        home
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else if path.starts_with('~') {
        return Err(ConnectError::new(
            ConnectCode::InvalidArgument,
            format!("path '{path}' names another user's home, which is not supported"),
        ));
    } else if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{home}/{path}")
    };
    Ok(clean(&joined))
}

/// Lexically cleans an absolute path (like Go's `filepath.Clean`).
pub fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The last component of a path (`/` for the root).
pub fn base_name(path: &str) -> &str {
    match path.trim_end_matches('/').rsplit_once('/') {
        Some((_, name)) if !name.is_empty() => name,
        _ => "/",
    }
}

/// The directory part of a clean absolute path.
pub fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((dir, _)) => dir,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_envd() {
        assert_eq!(resolve("", "user").ok().as_deref(), Some("/home/user"));
        assert_eq!(
            resolve("a.txt", "user").ok().as_deref(),
            Some("/home/user/a.txt")
        );
        assert_eq!(
            resolve("~/x/../y", "user").ok().as_deref(),
            Some("/home/user/y")
        );
        assert_eq!(
            resolve("/tmp//a/./b", "root").ok().as_deref(),
            Some("/tmp/a/b")
        );
        assert_eq!(resolve("x", "root").ok().as_deref(), Some("/root/x"));
        assert!(resolve("~bob/x", "user").is_err());
        assert_eq!(clean("/../.."), "/");
        assert_eq!(base_name("/home/user/a.txt"), "a.txt");
        assert_eq!(parent("/home/user/a.txt"), "/home/user");
        assert_eq!(parent("/a"), "/");
    }
}
