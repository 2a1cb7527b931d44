//! Extended attributes of files in a sandbox, under one namespace of the `user.` class: replace
//! a path's, read several paths' at once. The E2B layer keeps E2B's file metadata there
//! (`user.e2b.*`). The guest applies the request user's rights (as `setxattr`/`getxattr` would
//! for that user's processes) and never follows a final symlink.

use std::collections::BTreeMap;

use cove_domain::InvalidInput;
use cove_node_api::{SetXattrsRequest, XattrsRequest};

use super::guest_path;
use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// Most bytes of attribute names (namespace included, once per key) and values set on one path
/// or read from one path (the guest protocol's bound).
pub(crate) const MAX_XATTR_BYTES: usize = 8192;

/// Most paths one `file_xattrs` call reads.
pub(crate) const MAX_XATTR_PATHS: usize = 10_000;

/// Longest namespace, in bytes.
const MAX_NAMESPACE_BYTES: usize = 64;

/// Checks a namespace: `user.` and up to 64 bytes of printable ASCII without spaces.
fn check_namespace(namespace: &str) -> Result<(), InvalidInput> {
    let ok = namespace.starts_with("user.")
        && namespace.len() <= MAX_NAMESPACE_BYTES
        && namespace.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::new(
            "namespace",
            format!(
                "must start with `user.` and be at most {MAX_NAMESPACE_BYTES} bytes of printable \
                 ASCII without spaces"
            ),
        ))
    }
}

impl ControlPlane {
    /// Makes `entries` (keys after `namespace`, values) exactly the extended attributes of
    /// `path` under `namespace`, acting as `user` (default: the sandbox's).
    ///
    /// # Errors
    /// `invalid_argument` (the path, the namespace, an empty key or one with NUL, more than
    /// 8 KiB of names and values), `sandbox_not_found`, `sandbox_not_running`, `file_not_found`,
    /// `permission_denied`, `failed_precondition` (a symlink, a filesystem without extended
    /// attributes), `not_implemented` (a node or guest agent that predates them).
    pub async fn set_file_xattrs(
        &self,
        sandbox_id: &str,
        path: String,
        user: Option<String>,
        namespace: &str,
        entries: BTreeMap<String, Vec<u8>>,
    ) -> Result<(), ServiceError> {
        check_namespace(namespace)?;
        let mut total = 0usize;
        for (key, value) in &entries {
            if key.is_empty() || key.contains('\0') {
                return Err(InvalidInput::new("entries", "keys are non-empty, without NUL").into());
            }
            total += namespace.len() + key.len() + value.len();
        }
        if total > MAX_XATTR_BYTES {
            return Err(InvalidInput::new(
                "entries",
                format!("{total} bytes of attributes exceed the limit of {MAX_XATTR_BYTES}"),
            )
            .into());
        }
        let user = self.file_user(sandbox_id, user).await?;
        let req = SetXattrsRequest {
            path: guest_path("path", Some(path), None)?,
            user: Some(user),
            namespace: namespace.to_string(),
            entries,
        };
        self.node()
            .set_xattrs(sandbox_id, req)
            .await
            .map_err(|e| from_node(e, sandbox_id))
    }

    /// The extended attributes under `namespace` of each of `paths` (keys without the
    /// namespace), in order, acting as `user` (default: the sandbox's). A path that is gone,
    /// unreadable for the user or a symlink has none.
    ///
    /// # Errors
    /// `invalid_argument` (a path, the namespace, more than 10,000 paths, an unknown user), `sandbox_not_found`, `sandbox_not_running`, `not_implemented` (a node or
    /// guest agent that predates them).
    pub async fn file_xattrs(
        &self,
        sandbox_id: &str,
        paths: Vec<String>,
        user: Option<String>,
        namespace: &str,
    ) -> Result<Vec<BTreeMap<String, Vec<u8>>>, ServiceError> {
        check_namespace(namespace)?;
        if paths.len() > MAX_XATTR_PATHS {
            return Err(InvalidInput::new(
                "paths",
                format!("at most {MAX_XATTR_PATHS} paths per call"),
            )
            .into());
        }
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let user = self.file_user(sandbox_id, user).await?;
        let paths = paths
            .into_iter()
            .map(|p| guest_path("path", Some(p), None))
            .collect::<Result<Vec<_>, _>>()?;
        let req = XattrsRequest {
            paths,
            user: Some(user),
            namespace: namespace.to_string(),
        };
        self.node()
            .xattrs(sandbox_id, req)
            .await
            .map_err(|e| from_node(e, sandbox_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_user_class() {
        assert!(check_namespace("user.e2b.").is_ok());
        assert!(check_namespace("trusted.e2b.").is_err());
        assert!(check_namespace("user.a b").is_err());
        assert!(check_namespace(&format!("user.{}", "x".repeat(64))).is_err());
    }
}
