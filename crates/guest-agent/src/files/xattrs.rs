//! `SetXattrs` and `GetXattrs` (protocol v2): a path's extended attributes under one namespace
//! of the `user.` class, as the request's user (the kernel applies that user's rights: writing
//! needs write permission on the file, reading needs read permission). A final symlink is never
//! followed: Linux keeps no `user.` attributes on symlinks, so one reads as having none and
//! writing to one is refused. Cove's own paths are refused and read as having none.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use cove_guest_protocol::{
    GetXattrsRequest, SetXattrsRequest, XattrValue, MAX_XATTR_BYTES, MAX_XATTR_PATHS,
};

use super::path::display;
use super::{pseudo, Actor};
use crate::error::AgentError;
use crate::state::Agent;

/// The attribute class whose namespaces the requests may name.
const USER_CLASS: &str = "user.";

/// Longest attribute name the kernel takes (`XATTR_NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

/// Checks a namespace: `user.` followed by name bytes, no NUL.
fn check_namespace(ns: &str) -> Result<(), AgentError> {
    if !ns.starts_with(USER_CLASS) || ns.len() >= MAX_NAME_BYTES || ns.contains('\0') {
        return Err(AgentError::invalid(format!(
            "extended attribute namespace {ns:?} must start with {USER_CLASS:?}, be shorter than \
             {MAX_NAME_BYTES} bytes and hold no NUL"
        )));
    }
    Ok(())
}

/// Replaces the attributes of `req.path` under `req.namespace` with `req.entries`.
pub fn set_xattrs(agent: &Agent, req: SetXattrsRequest) -> Result<(), AgentError> {
    check_namespace(&req.namespace)?;
    let mut total = 0usize;
    for (key, value) in &req.entries {
        let name_len = req.namespace.len() + key.len();
        if key.is_empty() || key.contains('\0') || name_len > MAX_NAME_BYTES {
            return Err(AgentError::invalid(format!(
                "extended attribute key {key:?} must be 1 to {} bytes without NUL",
                MAX_NAME_BYTES - req.namespace.len()
            )));
        }
        total += name_len + value.0.len();
    }
    if total > MAX_XATTR_BYTES {
        return Err(AgentError::invalid(format!(
            "extended attributes of {total} bytes exceed the limit of {MAX_XATTR_BYTES}"
        )));
    }
    let actor = Actor::of(agent, req.user.as_deref())?;
    let path = actor.path(&req.path)?;
    agent.reserved.check(&path, false)?;
    pseudo::check_writable(&path)?;
    let _as_user = actor.assume()?;
    let meta = std::fs::symlink_metadata(&path).map_err(|e| AgentError::io("stat", &path, &e))?;
    if meta.file_type().is_symlink() {
        return Err(AgentError::precondition(format!(
            "{} is a symlink, which keeps no user extended attributes",
            display(&path)
        )));
    }
    let io_err = |what: &str, e: io::Error| xattr_error(what, &path, e);
    let stale: Vec<_> = xattr::list(&path)
        .map_err(|e| io_err("list extended attributes of", e))?
        .filter_map(|name| {
            let name = name.to_str()?.to_string();
            let key = name.strip_prefix(req.namespace.as_str())?;
            (!req.entries.contains_key(key)).then_some(name)
        })
        .collect();
    for name in stale {
        match xattr::remove(&path, &name) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(io_err("remove an extended attribute of", e)),
        }
    }
    for (key, value) in &req.entries {
        let name = format!("{}{key}", req.namespace);
        xattr::set(&path, &name, &value.0)
            .map_err(|e| io_err("set an extended attribute of", e))?;
    }
    Ok(())
}

/// The attributes under `req.namespace` of each of `req.paths`.
pub fn get_xattrs(
    agent: &Agent,
    req: GetXattrsRequest,
) -> Result<Vec<BTreeMap<String, XattrValue>>, AgentError> {
    check_namespace(&req.namespace)?;
    if req.paths.len() > MAX_XATTR_PATHS {
        return Err(AgentError::invalid(format!(
            "at most {MAX_XATTR_PATHS} paths per request, got {}",
            req.paths.len()
        )));
    }
    let actor = Actor::of(agent, req.user.as_deref())?;
    let paths = req
        .paths
        .iter()
        .map(|p| actor.path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let _as_user = actor.assume()?;
    Ok(paths
        .iter()
        .map(|p| {
            if agent.reserved.check(p, false).is_err() {
                return BTreeMap::new();
            }
            read_namespace(p, &req.namespace)
        })
        .collect())
}

/// What `path` holds under `namespace` (nothing when it cannot be read), at most
/// [`MAX_XATTR_BYTES`] bytes in name order.
fn read_namespace(path: &Path, namespace: &str) -> BTreeMap<String, XattrValue> {
    let mut out = BTreeMap::new();
    let Ok(names) = xattr::list(path) else {
        return out;
    };
    let mut names: Vec<String> = names
        .filter_map(|n| n.to_str().map(str::to_string))
        .filter(|n| n.starts_with(namespace) && n.len() > namespace.len())
        .collect();
    names.sort();
    let mut total = 0usize;
    for name in names {
        let Ok(Some(value)) = xattr::get(path, &name) else {
            continue;
        };
        total += name.len() + value.len();
        if total > MAX_XATTR_BYTES {
            break;
        }
        out.insert(name[namespace.len()..].to_string(), XattrValue(value));
    }
    out
}

/// An attribute call's error: an unsupported filesystem is a precondition, a full attribute
/// block is no space, the rest as any I/O error.
fn xattr_error(what: &str, path: &Path, e: io::Error) -> AgentError {
    match e.raw_os_error() {
        Some(libc::ENOTSUP) => AgentError::precondition(format!(
            "{} is on a filesystem without user extended attributes",
            display(path)
        )),
        Some(libc::E2BIG) | Some(libc::ERANGE) => AgentError::new(
            cove_guest_protocol::ErrorCode::NoSpace,
            format!(
                "{what} {}: no room for more extended attributes",
                display(path)
            ),
        ),
        _ => AgentError::io(what, path, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_stay_in_the_user_class() {
        assert!(check_namespace("user.e2b.").is_ok());
        assert!(check_namespace("user.").is_ok());
        assert!(check_namespace("trusted.x.").is_err());
        assert!(check_namespace("security.").is_err());
        assert!(check_namespace("user.\0").is_err());
    }
}
