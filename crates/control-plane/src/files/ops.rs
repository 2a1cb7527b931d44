//! stat, exists, list, mkdir, move, remove.

use cove_api_types::{FileExists, FileInfo, FileList, MakeDirRequest, MoveRequest, MAX_LIST_DEPTH};
use cove_domain::{validate, InvalidInput};
use cove_node_api::{NodeError, SandboxPath};
use tracing::info;

use super::{checked, guest_path, to_api};
use crate::error::from_node;
use crate::{ControlPlane, ServiceError};

/// How [`ControlPlane::list_files`] lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Levels to list: 1 (`None`) = the directory's own entries, n = n-1 levels below them
    /// too (1 to [`MAX_LIST_DEPTH`]).
    pub depth: Option<u32>,
}

impl ControlPlane {
    /// The user a file call acts for: the request's, else the sandbox's.
    pub(super) async fn file_user(
        &self,
        sandbox_id: &str,
        user: Option<String>,
    ) -> Result<String, ServiceError> {
        let sandbox = self.running_sandbox(sandbox_id).await?;
        let user = user.unwrap_or(sandbox.user);
        validate::user("user", &user)?;
        Ok(user)
    }

    /// `lstat` of a path: a symlink is described, not followed.
    pub async fn stat_file(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileInfo, ServiceError> {
        let user = self.file_user(sandbox_id, user).await?;
        let path = checked("path", path)?;
        let info = self
            .node()
            .stat(sandbox_id, path, Some(user))
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        Ok(to_api(info))
    }

    /// Whether anything (a broken symlink too) is at a path. A missing parent, or a parent
    /// that is not a directory, is `false`, not an error.
    pub async fn file_exists(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<FileExists, ServiceError> {
        let user = self.file_user(sandbox_id, user).await?;
        let path = checked("path", path)?;
        match self.node().stat(sandbox_id, path, Some(user)).await {
            Ok(_) => Ok(FileExists { exists: true }),
            Err(NodeError::FileNotFound(_) | NodeError::WrongType { .. }) => {
                Ok(FileExists { exists: false })
            }
            Err(e) => Err(from_node(e, sandbox_id)),
        }
    }

    /// The entries below a directory.
    pub async fn list_files(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
        options: ListOptions,
    ) -> Result<FileList, ServiceError> {
        let ListOptions { depth } = options;
        let depth = depth.unwrap_or(1);
        if !(1..=MAX_LIST_DEPTH).contains(&depth) {
            return Err(InvalidInput::new(
                "depth",
                format!("must be between 1 and {MAX_LIST_DEPTH}"),
            )
            .into());
        }
        let user = self.file_user(sandbox_id, user).await?;
        let path = checked("path", path)?;
        let entries = self
            .node()
            .list_dir(sandbox_id, path, Some(user), depth)
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        Ok(FileList {
            entries: entries.into_iter().map(to_api).collect(),
        })
    }

    /// `mkdir -p`; created directories belong to the user. An existing directory is fine; an
    /// existing file is `already_exists`.
    pub async fn make_dir(
        &self,
        sandbox_id: &str,
        req: MakeDirRequest,
    ) -> Result<FileInfo, ServiceError> {
        let user = self.file_user(sandbox_id, req.user).await?;
        let path = guest_path("path", req.path, req.path_b64)?;
        let info = self
            .node()
            .make_dir(sandbox_id, path, Some(user))
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        Ok(to_api(info))
    }

    /// Renames a path; answers the destination's metadata.
    pub async fn move_file(
        &self,
        sandbox_id: &str,
        req: MoveRequest,
    ) -> Result<FileInfo, ServiceError> {
        let user = self.file_user(sandbox_id, req.user).await?;
        let from = guest_path("from", req.from, req.from_b64)?;
        let to = guest_path("to", req.to, req.to_b64)?;
        let info = self
            .node()
            .rename(sandbox_id, from, to, Some(user))
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        Ok(to_api(info))
    }

    /// Removes a file, a symlink (the link only, never its target) or a directory tree.
    pub async fn remove_file(
        &self,
        sandbox_id: &str,
        path: SandboxPath,
        user: Option<String>,
    ) -> Result<(), ServiceError> {
        let user = self.file_user(sandbox_id, user).await?;
        let path = checked("path", path)?;
        self.node()
            .remove(sandbox_id, path, Some(user))
            .await
            .map_err(|e| from_node(e, sandbox_id))?;
        info!(sandbox_id, "file removed");
        Ok(())
    }
}
